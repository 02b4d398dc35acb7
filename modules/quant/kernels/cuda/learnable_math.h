#pragma once
// Internal: the per-element math of the learnable quantizers, host and device, so that the CPU
// tests run the very code the GPU runs against the CPU reference (learnable.cpp,
// kernels/cpu/learnable.cpp, the amax kernels of kernels/cpu/fake_quant.cpp). Every float32 step
// is the CPU's, in the same order: the device side builds with -fmad=false and its one fused
// multiply-add is explicit (fmaf, as the CPU's std::fma); the host side has no FMA contraction
// (no -march; the tests that include this build with -ffp-contract=off).
#include <cmath>
#include <cstdint>

#include "framework/kernels/cuda/host_device.h"
#include "modules/quant/kernels/cuda/observer_math.h"

namespace qat::quant::kernels::cuda::learnable {

/// Round half to even (the default rounding mode).
QAT_HOST_DEVICE inline float round_even(float v) {
#ifdef __CUDA_ARCH__
  return rintf(v);
#else
  return std::nearbyint(v);
#endif
}

/// a b + c rounded once.
QAT_HOST_DEVICE inline float fused_multiply_add(float a, float b, float c) {
#ifdef __CUDA_ARCH__
  return fmaf(a, b, c);
#else
  return std::fma(a, b, c);
#endif
}

/// std::clamp(v, lo, hi): lo when v < lo, hi when hi < v, else v.
QAT_HOST_DEVICE inline float clamp_like_std(float v, float lo, float hi) {
  return v < lo ? lo : (hi < v ? hi : v);
}

/// clamp(round_half_even(zp), qmin, qmax): the per-channel op's backward zero point (PyTorch's
/// _get_rounded_zero_point; -0.4 gives -0).
QAT_HOST_DEVICE inline float rounded_zero_point(float zp, float lo, float hi) {
  return clamp_like_std(round_even(zp), lo, hi);
}

/// The forward zero point of both LSQ ops: rounded_zero_point through the CPU's int32 cast,
/// exact except that -0 becomes +0 (+ 0.0f does that).
QAT_HOST_DEVICE inline float forward_zero_point(float zp, float lo, float hi) {
  return rounded_zero_point(zp, lo, hi) + 0.0f;
}

/// trunc(clamp(zp + 0.5, qmin, qmax)): the per-tensor op's backward zero point (PyTorch's
/// _get_zero_point_from_tensor: + 0.5, clamp, cast to int64).
QAT_HOST_DEVICE inline float truncated_zero_point(float zp, float lo, float hi) {
  return static_cast<float>(static_cast<std::int64_t>(clamp_like_std(zp + 0.5f, lo, hi)));
}

/// LSQ forward of one element: fake quantization with scale s and forward zero point zr,
/// y = (clamp(rint(x (1/s)) + zr, lo, hi) - zr) s (kernels/cpu/fake_quant.cpp).
QAT_HOST_DEVICE inline float lsq_forward_one(float x, float s, float zr, float lo, float hi) {
  std::uint8_t unused = 0;
  return obs::fake_quant_one(x, 1.0f / s, s, zr, lo, hi, &unused);
}

/// The constants of one run of the LSQ backward (kernels/cpu/learnable.cpp LsqBackward): zp is
/// the backward zero point, lo / hi = qmin / qmax, gf = float(grad_factor).
struct LsqGrad {
  float inv, zp, s, gf, lo, hi, small, big, neg_s;
};
QAT_HOST_DEVICE inline LsqGrad lsq_grad_consts(float s, float zp, float lo, float hi, float gf) {
  return LsqGrad{1.0f / s, zp, s, gf, lo, hi, lo - zp, hi - zp, -1.0f * s};
}

/// LSQ backward of one element (Esser et al. 2019; PyTorch 1.13's
/// fake_quantize_learnable_*_grad_kernel_cpu as Debian builds it for AVX2 / AVX-512, where the
/// compiler contracts both zp + x/s and (q - zp) s - x into fused multiply-adds: of 578 elements
/// inside the range, its per-element scale gradient equals this one in all, and a separately
/// rounded (q - zp) s's in 43):
///   q = rint(fma(x, 1/s, zp));  inside = qmin <= q <= qmax (NaN: below)
///   inside:  dx = dy, ds = ((dy r) (1/s)) gf with r = fma(q - zp, s, -x) = xfq - x, dz = 0
///   outside: dx = 0,  ds = (dy (qmin|qmax - zp)) gf,  dz = (dy (-s)) gf
/// Returns dx; *ds / *dz get PyTorch's float32 terms (the tests' reference; the reductions sum
/// lsq_grad_terms).
QAT_HOST_DEVICE inline float lsq_grad_one(float x, float dy, const LsqGrad& c, float* ds, float* dz) {
  const float q = round_even(fused_multiply_add(x, c.inv, c.zp));
  const bool not_below = q >= c.lo, above = q > c.hi;
  if (not_below && !above) {
    *ds = dy * fused_multiply_add(q - c.zp, c.s, -x) * c.inv * c.gf;
    *dz = 0.0f;
    return dy;
  }
  *ds = (not_below ? dy * c.big : dy * c.small) * c.gf;
  *dz = dy * c.neg_s * c.gf;
  return 0.0f;
}

/// The float32 terms that the CPU and the device sum (kernels/cpu/kernels.h lsq_backward):
///   inside:  *a = r, the factor of dy in lsq_grad_one's ds (without (1/s) gf), *b = *z = 0
///   outside: *a = 0, *b / *z = lsq_grad_one's ds / dz (PyTorch's terms)
/// A float32 lane takes fma(dx, *a, lane) (dx the returned value) and lane + *b, lane + *z;
/// dscale = gf ((1/s) A) + B, dzero_point = Z.
QAT_HOST_DEVICE inline float lsq_grad_terms(float x, float dy, const LsqGrad& c, float* a, float* b,
                                            float* z) {
  const float q = round_even(fused_multiply_add(x, c.inv, c.zp));
  const bool not_below = q >= c.lo, above = q > c.hi;
  if (not_below && !above) {
    *a = fused_multiply_add(q - c.zp, c.s, -x);
    *b = *z = 0.0f;
    return dy;
  }
  *a = 0.0f;
  *b = (not_below ? dy * c.big : dy * c.small) * c.gf;
  *z = dy * c.neg_s * c.gf;
  return 0.0f;
}

/// The constants of the learnable amax (kernels/cpu/fake_quant.cpp AmaxForward): s = amax / qmax,
/// the clipping range [lo_x, amax] with lo_x = -amax (signed) or 0.
struct AmaxConsts {
  float inv, s, hi_x, lo_x, lo, hi;
  bool is_signed;
};
QAT_HOST_DEVICE inline AmaxConsts amax_consts(float amax, bool is_signed, float lo, float hi) {
  const float s = amax / hi;
  return AmaxConsts{1.0f / s, s, amax, is_signed ? -amax : 0.0f, lo, hi, is_signed};
}

/// Learnable amax forward of one element: y = clamp(rint(clamp(x, lo_x, amax) (1/s)), qmin, qmax) s;
/// *mask bit 0: x outside [lo_x, amax] or NaN, bit 1: x >= amax, bit 2: signed and x <= -amax.
QAT_HOST_DEVICE inline float amax_forward_one(float v, const AmaxConsts& k, std::uint8_t* mask) {
  const bool in = v >= k.lo_x && v <= k.hi_x;
  *mask = static_cast<std::uint8_t>((in ? 0 : 1) | (v >= k.hi_x ? 2 : 0) |
                                    (k.is_signed && v <= k.lo_x ? 4 : 0));
  float c = v > k.lo_x ? v : k.lo_x;
  c = c < k.hi_x ? c : k.hi_x;
  const float q = round_even(c * k.inv);
  float qc = q > k.lo ? q : k.lo;
  qc = qc < k.hi ? qc : k.hi;
  return qc * k.s;
}

/// Learnable amax backward of one element: returns dx = bit 0 ? 0 : dy; *term = bit 1 ? dy :
/// bit 2 ? -dy : 0 (damax = sum of the terms).
QAT_HOST_DEVICE inline float amax_backward_one(float dy, std::uint8_t mask, float* term) {
  *term = (mask & 2) ? dy : ((mask & 4) ? -dy : 0.0f);
  return (mask & 1) ? 0.0f : dy;
}

/// The device reductions' fixed split (learnable.cu): each of `len` ranges of m terms goes to
/// `splits` blocks, block s taking the contiguous chunk [s ceil(m / splits), ...) (at least
/// kSliceMin terms each, at most kMaxBlocks blocks in all). It depends only on (m, len), so
/// the sums come out in the same order on every run.
inline constexpr std::int64_t kSliceMin = 4096;
inline constexpr std::int64_t kMaxBlocks = 8192;
QAT_HOST_DEVICE inline std::int64_t reduce_splits(std::int64_t m, std::int64_t len) {
  const std::int64_t by_size = (m + kSliceMin - 1) / kSliceMin;
  const std::int64_t by_blocks = len > 0 ? kMaxBlocks / len : 1;
  const std::int64_t s = by_size < by_blocks ? by_size : by_blocks;
  return s > 1 ? s : 1;
}

}  // namespace qat::quant::kernels::cuda::learnable
