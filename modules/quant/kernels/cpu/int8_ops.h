#pragma once
// Internal: the int8 model's data movement around the GEMM (int8_gemm.h), runtime-dispatched:
// quantize / dequantize, byte transposes, widening, uint8 max pooling, and the elementwise int8
// functional ops (add, add + relu, mul, requantize).
#include <cstdint>

namespace qat::quant::int8::kernels {

/// q[i] = clamp(nearbyint(x[i] inv) + zp, lo, hi) as uint8, in float (Quantize::forward).
void quantize_u8(const float* x, std::int64_t n, float inv, float zp, float lo, float hi,
                 std::uint8_t* q);

/// dst[c ldd + r] = src[r lds + c] for r < rows, c < cols (bytes).
void transpose_u8(const std::uint8_t* src, std::int64_t rows, std::int64_t cols, std::int64_t lds,
                  std::uint8_t* dst, std::int64_t ldd);

/// dst[i] = src[i] as uint16 (the pairs format's widened activations).
void widen_u8_u16(const std::uint8_t* src, std::int64_t n, std::uint16_t* dst);

/// y[i] = scale (q[i] - zp) (Dequantize::forward).
void dequantize_u8(const std::uint8_t* q, std::int64_t n, float scale, std::int32_t zp, float* y);

/// Output rows per block of max_pool_u8.
constexpr std::int64_t kPoolRows = 64;
/// Max pooling of `planes` (H, W) uint8 planes into (Ho, Wo), kernel (kh, kw), stride (sh, sw),
/// every window inside the plane (no padding).
void max_pool_u8(const std::uint8_t* x, std::int64_t planes, std::int64_t H, std::int64_t W,
                 std::int64_t kh, std::int64_t kw, std::int64_t sh, std::int64_t sw, std::int64_t Ho,
                 std::int64_t Wo, std::uint8_t* y);

/// Max pooling of (N, H, W, C) uint8 into (N, Ho, Wo, C), kernel (kh, kw), stride (sh, sw),
/// padding (ph, pw) (padded taps are skipped).
void max_pool_nhwc_u8(const std::uint8_t* x, std::int64_t N, std::int64_t H, std::int64_t W,
                      std::int64_t C, std::int64_t kh, std::int64_t kw, std::int64_t sh, std::int64_t sw,
                      std::int64_t ph, std::int64_t pw, std::int64_t Ho, std::int64_t Wo,
                      std::uint8_t* y);

// ---- elementwise int8 ops (quant::QuantizedAdd etc., functional.h) ----------------------------
// Each computes in float32 exactly the operations of the fake-quantized model, in its order and
// without FMA contraction: x = (q - zero_point) scale (the fake quantizer's output), the float
// op, then the output fake quantizer's q = clamp(round_half_even(v inv) + zero_point, lo, hi)
// with inv = 1 / scale (kernels/cpu/fake_quant.cpp, FqStep). So the codes equal the QAT model's
// bit for bit, on every path.

/// An input's dequantization x = (q - zero_point) scale.
struct InQuant {
  float scale, zero_point;
};
/// The output's q = clamp(round_half_even(v inv) + zero_point, lo, hi), inv = 1 / scale.
struct OutQuant {
  float inv, zero_point, lo, hi;
};

enum class BinaryOp : std::uint8_t { Add, AddReLU, Mul };

/// y[i] = out(op(x_a, x_b)) with x_a = in_a(a[i sa]), x_b = in_b(b[i sb]) for i < n; strides
/// sa, sb are 1 or 0 (0: one broadcast value). op: x_a + x_b, max(x_a + x_b, 0), x_a x_b.
void binary_u8(BinaryOp op, const std::uint8_t* a, std::int64_t sa, InQuant in_a, const std::uint8_t* b,
               std::int64_t sb, InQuant in_b, std::int64_t n, OutQuant out, std::uint8_t* y);

/// y[i] = out(in(x[i])) (requantization, e.g. of each input of an int8 cat).
void requantize_u8(const std::uint8_t* x, std::int64_t n, InQuant in, OutQuant out, std::uint8_t* y);

}  // namespace qat::quant::int8::kernels
