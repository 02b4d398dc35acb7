#pragma once
// Internal: the loops of fake quantization. float32 runs the runtime-dispatched kernels
// (modules/quant/kernels/cpu/kernels.h); the templates below are the float64 path and the
// scalar reference the kernels reproduce.
#include <cmath>
#include <cstdint>

#include "framework/tensor/tensor.h"
#include "modules/quant/detail/layout.h"

namespace qat::quant::detail {

/// q = round_half_even(x * (1/scale)) + zp, 1/scale rounded to float32 first (PyTorch);
/// y = (clamp(q, qmin, qmax) - zp) * scale;  mask = [qmin <= q <= qmax] (may be null).
template <class T>
void fq_run(const T* __restrict x, T* __restrict y, std::uint8_t* __restrict mask, std::int64_t n,
            float scale, std::int32_t zp, std::int64_t qmin, std::int64_t qmax) {
  const T inv = static_cast<T>(1.0f / scale), s = static_cast<T>(scale), z = static_cast<T>(zp);
  const T lo = static_cast<T>(qmin), hi = static_cast<T>(qmax);
  // clamp written as selects; NaN fails q > lo and maps to qmin, as in PyTorch
  for (std::int64_t i = 0; i < n; ++i) {
    const T q = std::nearbyint(x[i] * inv) + z;
    if (mask != nullptr) mask[i] = static_cast<std::uint8_t>((q >= lo) & (q <= hi));
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

/// Records on the tape the straight-through backward of an op out = f(x) whose gradient passes
/// where mask (uint8, x's shape) is 1: dx = dy * mask. Shared by every fake-quant op.
/// The backward runs on the mask's device (CPU kernels or kernels::cuda::masked_copy).
void record_ste(Tensor& out, const char* name, const Tensor& x, Tensor mask);

/// Throws (naming `name`) unless every scale is positive and finite and every zero point in
/// [qmin, qmax]: what fake_quantize checks before quantizing.
void require_qparams(const float* scale, const std::int32_t* zero_point, std::int64_t n,
                     std::int64_t qmin, std::int64_t qmax, const char* name);

/// The same for float32 with a bit mask (kernels::fake_quant's: element i at bit i % 8 of byte
/// i / 8), as fake_quant_f32 writes it.
void record_ste_bits(Tensor& out, const char* name, const Tensor& x, Tensor mask_bits);

/// fq_run over a float32 tensor laid out as `layout` (scale / zp per parameter), with the
/// dispatched kernels: one call per run, or per row of [outer, len * inner] when the
/// parameter axis is (nearly) innermost and runs would be short. The mask as bits (may be null).
void fake_quant_f32(const float* x, float* y, std::uint8_t* mask_bits, const Layout& layout,
                    const float* scale, const std::int32_t* zero_point, std::int64_t qmin,
                    std::int64_t qmax);

/// Runs shorter than this go through the row kernels (fake_quant_rows, min_max_rows).
inline constexpr std::int64_t kShortRun = 16;

}  // namespace qat::quant::detail
