#pragma once
// Fake quantization as differentiable ops: y = dequantize(quantize(x)) in float, with
// straight-through (STE) or learnable-quantizer gradients. Forward and backward of each op sit
// side by side in fake_quant.cpp (fixed qparams), learnable.cpp (LSQ, learnable amax) and
// fp8.cpp and mx.cpp. x may be float32 or float64; scales are float32 and zero points int32 (fixed) or
// float32 (learnable), laid out as QuantSpec::granularity says (see param_shape).
#include <cstdint>

#include "framework/tensor/tensor.h"
#include "modules/quant/qparams.h"
#include "modules/quant/spec.h"

namespace qat::quant {

/// Shape of the scale / zero_point tensors of `spec` for an input of shape `x`: [1] per
/// tensor, [C] per channel, x's shape with the axis divided by block_size per block.
Shape param_shape(const QuantSpec& spec, const Shape& x);

// ---- fixed qparams, straight-through gradient (fake_quant.cpp) ------------------------------
/// PyTorch's fake_quantize_per_tensor_affine:
///   q = round_half_even(x * (1/scale)) + zero_point   (1/scale in float32)
///   y = (clamp(q, qmin, qmax) - zero_point) * scale,   dx = dy * [qmin <= q <= qmax]
/// Bit-exact with PyTorch 1.13 except where its CPU kernel overflows an int64 (|x/scale| >= 2^63
/// or +-inf map to qmin there): here they saturate to qmax / qmin. NaN maps to qmin as in PyTorch.
Tensor fake_quantize_per_tensor_affine(const Tensor& x, float scale, std::int64_t zero_point,
                                       std::int64_t quant_min, std::int64_t quant_max);
/// The same per index along `axis` (PyTorch's fake_quantize_per_channel_affine);
/// scale float32 [C], zero_point int32 [C].
Tensor fake_quantize_per_channel_affine(const Tensor& x, const Tensor& scale, const Tensor& zero_point,
                                        int axis, std::int64_t quant_min, std::int64_t quant_max);
/// Any granularity of `spec` (integer formats): qparams shaped as param_shape(spec, x.shape()).
Tensor fake_quantize(const Tensor& x, const QParams& qparams, const QuantSpec& spec);

// ---- learnable quantizers (learnable.cpp) ---------------------------------------------------
// On CUDA (float32; x and the parameters on one device, the parameters' values not checked:
// that would cost a host sync): the forward and dx bit-exact with the CPU, the parameter
// gradients deterministic but summed in another order (within ~1e-7 relative of the CPU's).
/// LSQ / LSQ+ (Esser et al. 2019; Bhalgat et al. 2020) with PyTorch 1.13's
/// _fake_quantize_learnable_per_tensor_affine semantics: scale float32 [1] and zero_point
/// float32 [1] are differentiable; the forward rounds zero_point half-to-even, the backward
/// uses trunc(zero_point + 0.5) as PyTorch does. Gradients (q = round(zp + x/s)):
///   dx = dy [qmin <= q <= qmax]
///   dscale = grad_factor * sum(dy * ((clamp(q) - zp) s - x) / s)  inside,
///            grad_factor * sum(dy * (qmin|qmax - zp))              outside
///   dzero_point = grad_factor * sum(-dy * s)                          outside only
Tensor fake_quantize_learnable_per_tensor_affine(const Tensor& x, const Tensor& scale,
                                                 const Tensor& zero_point, std::int64_t quant_min,
                                                 std::int64_t quant_max, double grad_factor);
/// Per channel along `axis` (PyTorch's _fake_quantize_learnable_per_channel_affine: the
/// zero point is round_half_even + clamp in both passes); scale, zero_point float32 [C].
Tensor fake_quantize_learnable_per_channel_affine(const Tensor& x, const Tensor& scale,
                                                  const Tensor& zero_point, int axis,
                                                  std::int64_t quant_min, std::int64_t quant_max,
                                                  double grad_factor);
/// Symmetric fake quantization with a learnable clipping range amax (PACT, Choi et al. 2018;
/// NVIDIA pytorch-quantization's learn_amax): scale = amax / qmax,
///   y = clamp(round(clamp(x, lo, amax) / scale), qmin, qmax) * scale, lo = -amax (signed) or 0,
///   dx = dy [lo <= x <= amax],  damax = sum(dy [x >= amax]) - sum(dy [x <= -amax]) (signed).
/// amax float32 [1] (per tensor) or [C] along spec.axis (per channel); spec must be symmetric int.
Tensor fake_quantize_learnable_amax(const Tensor& x, const Tensor& amax, const QuantSpec& spec);

// ---- FP8 (fp8.cpp) -------------------------------------------------------------------------
/// Nearest FP8 value of v (round half to even, saturating at +-fp8_max, NaN kept).
float round_to_fp8(float v, Format format);
/// y = round_to_fp8(x / scale) * scale, dx = dy [|x / scale| <= fp8_max]; scale float32 [1] or
/// [C] along spec.axis (per channel). Typically scale = amax / fp8_max (delayed-scaling recipe
/// of Micikevicius et al. 2022 / Transformer Engine). On CUDA: float32, per tensor or per
/// channel, bit-exact with the CPU (a NaN stays NaN; its payload is the device's).
Tensor fake_quantize_fp8(const Tensor& x, const Tensor& scale, const QuantSpec& spec);

// ---- microscaling: OCP MX and NVFP4 (mx.cpp) ----------------------------------------------
/// Nearest value of element format `format` (FP8 / FP6 / FP4; Format::Int: MXINT8's codes / 64),
/// round half to even, saturating at its largest normal, NaN kept.
float round_to_element(float v, Format format);
/// NVFP4's fp32 per-tensor scale: max(amax / (448 * 6), FLT_MIN), amax over the finite values.
float nvfp4_per_tensor_scale(const Tensor& x);
/// Microscaled fake quantization (spec.is_microscaled()), blocks of spec.block_size over the
/// dimensions from spec.axis flattened (the last block of a row may be shorter):
///   OCP MX (E8M0): X = 2^clamp(floor(log2 block_amax) - emax_elem, -127, 127), y = round(x / X) X
///   NVFP4 (E4M3): s = pts * e4m3(clamp(block_amax / 6 / pts, 2^-6, 448)), y = e2m1(x / s) s,
///     pts = per_tensor_scale, or nvfp4_per_tensor_scale(x) when 0
/// Elements round half to even and saturate; a block holding NaN / inf is all NaN.
/// dx = dy [|x / X| <= element max] (straight-through inside the element range).
Tensor fake_quantize_mx(const Tensor& x, const QuantSpec& spec, float per_tensor_scale = 0.0f);

}  // namespace qat::quant
