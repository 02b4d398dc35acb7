#include "modules/quant/int8_kernels.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace qat::quant::int8 {

Multiplier quantize_multiplier(double real) {
  if (real == 0.0) return {0, 0};
  int shift = 0;
  const double q = std::frexp(real, &shift);  // real = q 2^shift, q in [0.5, 1)
  auto q_fixed = static_cast<std::int64_t>(std::round(q * (1LL << 31)));
  if (q_fixed == (1LL << 31)) {
    q_fixed /= 2;
    ++shift;
  }
  if (shift < -31) return {0, 0};
  return {static_cast<std::int32_t>(q_fixed), shift};
}

namespace {
inline std::uint8_t output(std::int32_t acc, const Requant& rq, std::int64_t o) {
  const std::int32_t v = rq.zero_point + multiply_by_quantized_multiplier(acc, rq.multiplier[o]);
  return static_cast<std::uint8_t>(std::clamp(v, rq.lo, rq.hi));
}
}  // namespace

// x * m0 * 2^(shift - 31) rounded once, ties away from zero, in 64-bit integer arithmetic
// (TFLite's single-rounding requantization; the older double rounding of gemmlowp is off by one
// near ties).
std::int32_t multiply_by_quantized_multiplier(std::int32_t x, Multiplier m) {
  const std::int64_t p = static_cast<std::int64_t>(x) * m.m0;
  const int right = 31 - m.shift;
  std::int64_t r;
  if (right <= 0) {
    r = p * (std::int64_t{1} << -right);
  } else if (right >= 63) {
    r = 0;
  } else {
    const std::int64_t half = std::int64_t{1} << (right - 1);
    r = (p + half - (p < 0 ? 1 : 0)) >> right;  // arithmetic shift: floor
  }
  return static_cast<std::int32_t>(std::clamp<std::int64_t>(r, INT32_MIN, INT32_MAX));
}

namespace {
// sum_k x[k] w[k] in int32 (vectorises: u8 and s8 widen to int32 lanes)
inline std::int32_t dot_u8s8(const std::uint8_t* __restrict x, const std::int8_t* __restrict w,
                             std::int64_t K) {
  std::int32_t acc = 0;
  for (std::int64_t k = 0; k < K; ++k)
    acc += static_cast<std::int32_t>(x[k]) * static_cast<std::int32_t>(w[k]);
  return acc;
}

// acc[p] += w * col[p]
inline void axpy_s8u8(std::int32_t w, const std::uint8_t* __restrict col, std::int32_t* __restrict acc,
                      std::int64_t P) {
  for (std::int64_t p = 0; p < P; ++p) acc[p] += w * static_cast<std::int32_t>(col[p]);
}
}  // namespace

// acc = sum_k (x - zx) w + bias = x.w - zx rowsum(w) + bias
void linear_u8s8(const std::uint8_t* x, std::int64_t N, std::int64_t K, std::int32_t zx,
                 const std::int8_t* w, const std::int32_t* w_sums, std::int64_t O,
                 const std::int32_t* bias, const Requant& rq, std::uint8_t* y) {
  for (std::int64_t n = 0; n < N; ++n)
    for (std::int64_t o = 0; o < O; ++o) {
      const std::int32_t acc = dot_u8s8(x + n * K, w + o * K, K) - zx * w_sums[o] + (bias ? bias[o] : 0);
      y[n * O + o] = output(acc, rq, o);
    }
}

void gemm_u8s8_cols(const std::int8_t* w, const std::int32_t* w_sums, std::int64_t O, std::int64_t K,
                    const std::uint8_t* col, std::int64_t P, std::int32_t zx, const std::int32_t* bias,
                    const Requant& rq, std::uint8_t* y) {
  std::vector<std::int32_t> acc(P);
  for (std::int64_t o = 0; o < O; ++o) {
    std::fill(acc.begin(), acc.end(), (bias ? bias[o] : 0) - zx * w_sums[o]);
    for (std::int64_t k = 0; k < K; ++k) axpy_s8u8(w[o * K + k], col + k * P, acc.data(), P);
    for (std::int64_t p = 0; p < P; ++p) y[o * P + p] = output(acc[p], rq, o);
  }
}

}  // namespace qat::quant::int8
