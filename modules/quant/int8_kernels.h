#pragma once
// Integer-only inference kernels (Jacob et al. 2018, "Quantization and Training of Neural
// Networks for Efficient Integer-Arithmetic-Only Inference"): uint8 activations with a zero
// point, int8 symmetric per-channel weights, int32 bias and accumulators, and requantization
// by a fixed-point multiplier and a rounding right shift.
#include <cstdint>

namespace qat::quant::int8 {

/// real = m0 * 2^(shift - 31) with m0 in [2^30, 2^31) (TFLite's QuantizeMultiplier).
struct Multiplier {
  std::int32_t m0 = 0;
  int shift = 0;
};
Multiplier quantize_multiplier(double real);

/// round(x * m0 * 2^(shift - 31)), ties away from zero, exactly (one rounding, 64-bit integers;
/// TFLite's single-rounding variant), saturated to int32.
std::int32_t multiply_by_quantized_multiplier(std::int32_t x, Multiplier m);

/// Output stage: y = clamp(zero_point + round(acc * M), lo, hi).
struct Requant {
  const Multiplier* multiplier;  ///< per output channel
  std::int32_t zero_point;       ///< output zero point
  std::int32_t lo, hi;           ///< clamp range (a fused ReLU raises lo to zero_point)
};

/// y (N, O) = requant(x (N, K) . w^T - zx * rowsum(w) + bias), x uint8 with zero point zx,
/// w int8 (O, K), bias int32 (O), w_sums = rowsum(w) (O, precomputed).
void linear_u8s8(const std::uint8_t* x, std::int64_t N, std::int64_t K, std::int32_t zx,
                 const std::int8_t* w, const std::int32_t* w_sums, std::int64_t O,
                 const std::int32_t* bias, const Requant& rq, std::uint8_t* y);

/// y (O, P) = requant(w (O, K) . col (K, P) - zx * rowsum(w) + bias), col uint8.
void gemm_u8s8_cols(const std::int8_t* w, const std::int32_t* w_sums, std::int64_t O, std::int64_t K,
                    const std::uint8_t* col, std::int64_t P, std::int32_t zx, const std::int32_t* bias,
                    const Requant& rq, std::uint8_t* y);

}  // namespace qat::quant::int8
