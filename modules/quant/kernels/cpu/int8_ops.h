#pragma once
// Internal: the int8 model's data movement around the GEMM (int8_gemm.h), runtime-dispatched:
// quantize / dequantize, byte transposes, widening, uint8 max pooling.
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

}  // namespace qat::quant::int8::kernels
