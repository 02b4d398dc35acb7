#pragma once
// Internal: the elementwise loops of fake quantization, shared by the fixed-qparams op, the
// learnable ops and the quantizer modules. Each takes __restrict pointers so it vectorises.
#include <cmath>
#include <cstdint>

namespace qat::quant::detail {

/// q = round_half_even(x * (1/scale)) + zp, 1/scale rounded to float32 first (PyTorch);
/// y = (clamp(q, qmin, qmax) - zp) * scale;  mask = [qmin <= q <= qmax] (may be null).
template <class T>
void fq_run(const T* __restrict x, T* __restrict y, std::uint8_t* __restrict mask, std::int64_t n,
            float scale, std::int32_t zp, std::int64_t qmin, std::int64_t qmax) {
  const T inv = static_cast<T>(1.0f / scale), s = static_cast<T>(scale), z = static_cast<T>(zp);
  const T lo = static_cast<T>(qmin), hi = static_cast<T>(qmax);
  // clamp written as selects (vectorises to max/min); NaN fails q > lo and maps to qmin,
  // as in PyTorch
  if (mask == nullptr) {
    for (std::int64_t i = 0; i < n; ++i) {
      const T q = std::nearbyint(x[i] * inv) + z;
      const T c = q > lo ? q : lo;
      y[i] = ((c < hi ? c : hi) - z) * s;
    }
    return;
  }
  for (std::int64_t i = 0; i < n; ++i) {
    const T q = std::nearbyint(x[i] * inv) + z;
    mask[i] = static_cast<std::uint8_t>((q >= lo) & (q <= hi));
    const T c = q > lo ? q : lo;
    y[i] = ((c < hi ? c : hi) - z) * s;
  }
}

/// dx = dy * mask (the straight-through estimator, clipped to the quantization range).
template <class T>
void ste_run(const T* __restrict dy, const std::uint8_t* __restrict mask, T* __restrict dx,
             std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) dx[i] = mask[i] ? dy[i] : T(0);
}

}  // namespace qat::quant::detail
