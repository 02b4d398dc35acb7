#pragma once
#include <cstdint>

#include "framework/tensor/tensor.h"
#include "modules/quant/spec.h"

namespace qat::quant {

/// Scale (float32) and zero point (int32), one per tensor, channel or block.
struct QParams {
  Tensor scale;
  Tensor zero_point;
};

/// float32 machine epsilon, PyTorch's lower bound for scales.
inline constexpr float kScaleEps = 1.1920928955078125e-07f;

/// qparams from observed ranges exactly as PyTorch 1.13's observers compute them
/// (UniformQuantizationObserverBase._calculate_qparams), elementwise over n ranges, in float32:
///   the range is widened to include 0: lo = min(min, 0), hi = max(max, 0);
///   affine:    scale = max((hi - lo) / (qmax - qmin), eps),
///              zero_point = clamp(qmin - round_half_even(lo / scale), qmin, qmax);
///   symmetric: scale = max(max(-lo, hi) / ((qmax - qmin) / 2), eps)   (127.5 for int8),
///              zero_point = 0 if signed, else the midpoint (128 for 0..255 as PyTorch's default
///              quint8 observer, (qmin + qmax) / 2 for other ranges, as PyTorch with a custom range).
/// A range never observed (min = +inf, max = -inf) gives scale 1, zero_point 0.
void calculate_qparams(const float* min_val, const float* max_val, std::int64_t n, const QuantSpec& spec,
                       float* scale, std::int32_t* zero_point);

/// Tensor version: min_val/max_val float32 of equal shape -> QParams of that shape.
QParams calculate_qparams(const Tensor& min_val, const Tensor& max_val, const QuantSpec& spec);

}  // namespace qat::quant
