#pragma once
// Quantization utilities: real quantize / dequantize to integer storage, and measures of the
// error a spec introduces (for choosing specs and for reports).
#include "framework/tensor/tensor.h"
#include "modules/quant/qparams.h"
#include "modules/quant/spec.h"

namespace qat::quant {

/// Integer storage of a spec: int8 / uint8 up to 8 bits, int16 up to 16 bits signed, int32 for
/// unsigned 9..16 bits.
DType storage_dtype(const QuantSpec& spec);

/// q = clamp(round_half_even(x / scale) + zero_point, qmin, qmax) in storage_dtype(spec), with
/// qparams laid out as param_shape(spec, x.shape()). Per-tensor results carry their QuantInfo.
Tensor quantize(const Tensor& x, const QParams& qparams, const QuantSpec& spec);
/// x = scale (q - zero_point), float32.
Tensor dequantize(const Tensor& q, const QParams& qparams, const QuantSpec& spec);

/// mean((x - fake_quantize(x))^2)
double quantization_mse(const Tensor& x, const QParams& qparams, const QuantSpec& spec);
/// Signal-to-quantization-noise ratio in dB: 10 log10(sum x^2 / sum (x - x_q)^2); +inf if exact.
double sqnr_db(const Tensor& x, const Tensor& x_quantized);
/// Largest error of a value inside the representable range: max(scale) / 2.
double error_bound(const QParams& qparams);
/// Bits of the float32 tensor over bits of its quantized form (codes plus one float32 scale and
/// one zero point per parameter; double-quantized block scales count their bits).
double compression_ratio(const QuantSpec& spec, const Shape& shape);

}  // namespace qat::quant
