#pragma once
// Internal: the float32 loops of quantization-aware training, runtime-dispatched (one build per
// instruction set, framework/tensor/simd.h). Every path gives bit-identical results: the same
// per-element float operations (no FMA contraction: these files build with -ffp-contract=off),
// round half to even, and reductions in one fixed order (chunk256 below).
//
// chunk256 (the LSQ and learnable-amax sums): a run of n terms (padded with +0 to whole blocks
// of 16) is cut into chunks of 256 from its start; in each chunk, term j of each block is added
// in float32 to lane j (j < 16) in block order, and each lane's chunk sum goes to double lane j;
// then the 16 double lanes are combined pairwise (w = 8, 4, 2, 1). At most 16 terms per float32
// sum: the conversions to double, the cost of the sums on AVX2, come once per 256 terms (once
// per 128 made LSQ's backward 5-15% slower: 2^20 floats, 0-20% clipped, AVX2). A sum
// of products u v (LSQ's inside terms) adds each as fma(u, v, lane), one rounding per term.
// Narrower vectors emulate the lanes. The CUDA kernels add the same float32 partials.
#include <algorithm>
#include <cstdint>
#include <cstring>

#include "modules/quant/detail/float_round.h"

namespace qat::quant::kernels {

/// q = round_half_even(x * (1/scale)) + zp (1/scale rounded to float); y = (clamp(q, qmin,
/// qmax) - zp) * scale; mask = [qmin <= q <= qmax]. NaN -> qmin. The mask is a bit mask of the
/// whole tensor (element i: bit i % 8 of byte i / 8) in which x is element `first`: bits
/// [first, first + n) are written, the others kept (null: none).
void fake_quant(const float* x, float* y, std::uint8_t* mask_bits, std::int64_t first, std::int64_t n,
                float scale, std::int32_t zp, std::int64_t qmin, std::int64_t qmax);
/// fake_quant of `runs` consecutive runs of n elements, run r with scale[r], zp[r]: the rows of
/// a weight in one call (mask bits [first, first + runs * n)).
void fake_quant_runs(const float* x, float* y, std::uint8_t* mask_bits, std::int64_t first,
                     std::int64_t runs, std::int64_t n, const float* scale, const std::int32_t* zp,
                     std::int64_t qmin, std::int64_t qmax);
/// The same for `rows` rows of `cols` elements, element (r, c) with inv_scale[c] = 1/scale[c],
/// scale[c], zp[c] (float holding the integer zero point): parameters along the innermost axis.
/// Mask bits [0, rows * cols).
void fake_quant_rows(const float* x, float* y, std::uint8_t* mask_bits, std::int64_t rows,
                     std::int64_t cols, const float* inv_scale, const float* scale, const float* zp,
                     std::int64_t qmin, std::int64_t qmax);
/// The straight-through estimator on a bit mask (as fake_quant writes): dx = bit i ? dy : 0,
/// and in place g = bit i ? g : 0.
void masked_copy_bits(const float* dy, const std::uint8_t* mask_bits, float* dx, std::int64_t n);
void masked_zero_bits(float* g, const std::uint8_t* mask_bits, std::int64_t n);
/// dx = mask ? dy : 0 (the straight-through estimator).
void masked_copy(const float* dy, const std::uint8_t* mask, float* dx, std::int64_t n);
/// g = mask ? g : 0 in place (the same values as masked_copy), reading only the mask where it
/// is all ones.
void masked_zero(float* g, const std::uint8_t* mask, std::int64_t n);

/// LSQ backward on one run (PyTorch 1.13 fake_quantize_learnable_*_grad_kernel_cpu), zp the
/// backward zero point: q = round_half_even(fma(x, 1/s, zp)); dx = dy [qmin <= q <= qmax].
/// PyTorch's per-element scale gradient is ((dy r) (1/s)) gf inside, r = fma(q - zp, s, -x)
/// (its AVX2 / AVX-512 build contracts (q - zp) s - x), and (dy (qmin|qmax - zp)) gf
/// below|above, its zero-point gradient ((-dy) s) gf outside. Summed by chunk256: inside the
/// products dy r (each added as fma(dy, r, lane): not rounded on their own), their common factor
/// (1/s) gf taken out of the sum A; outside PyTorch's float32 terms themselves, b (scale) and z
/// (zero point), as the factors qmin|qmax - zp can be large (2^15) and opposite terms cancel.
/// NaN counts as below.
/// lsq_combine adds the gradients to *dscale, *dzp.
void lsq_backward(const float* x, const float* dy, float* dx, std::int64_t n, float s, float zp,
                  std::int64_t qmin, std::int64_t qmax, float gf, double* dscale, double* dzp);

/// The run's LSQ gradients from its sums (lsq_backward), in double: dscale += gf (A / s') + B,
/// dzp += Z, with 1 / s' the float32 reciprocal 1.0f / s of the per-element terms.
inline void lsq_combine(double a, double b, double z, float s, float gf, double* dscale, double* dzp) {
  const double inv = 1.0f / s;
  *dscale += static_cast<double>(gf) * (inv * a) + b;
  *dzp += z;
}

/// Learnable amax (PACT-style): s = amax / qmax, y = clamp(round(clamp(x, lo, amax) / s)) * s
/// with lo = -amax (signed) or 0; mask bit 0: x outside [lo, amax] or NaN, bit 1: x >= amax,
/// bit 2: signed and x <= -amax.
void amax_forward(const float* x, float* y, std::uint8_t* mask, std::int64_t n, float amax,
                  bool is_signed, std::int64_t qmin, std::int64_t qmax);
/// dx = bit 0 ? 0 : dy; returns chunk256(bit 1 ? dy : bit 2 ? -dy : 0).
double amax_backward(const float* dy, const std::uint8_t* mask, float* dx, std::int64_t n);

/// FP8 fake quantization: v = x / scale; mask = [|v| <= max]; y = round_fp8(v) * scale, the
/// nearest value with `mantissa_bits` and smallest normal exponent `min_exponent`, ties to even,
/// saturating at +-max, NaN kept.
void fp8_fake_quant(const float* x, float* y, std::uint8_t* mask, std::int64_t n, float scale,
                    int mantissa_bits, int min_exponent, float max);

/// 2^k as a float for -149 <= k <= 127 (std::ldexp(1.0f, k), exact), from its bits: the libm
/// call took a third of mx_fake_quant's time (two per block of 32).
inline float pow2f(int k) {
  const std::uint32_t bits = k >= -126 ? static_cast<std::uint32_t>(k + 127) << 23 : 1u << (k + 149);
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}
/// OCP MX shared exponent of a block with finite amax >= 0: floor(log2 amax) - emax_elem
/// clamped to E8M0's [-127, 127] (0 and float32 subnormals: -127).
inline int mx_shared_exponent(float amax, int emax) {
  std::uint32_t bits;
  std::memcpy(&bits, &amax, sizeof bits);
  return std::clamp(static_cast<int>(bits >> 23) - 127 - emax, -127, 127);
}
/// NVFP4 (torchao nvfp4_quantize, two-level): the block's scale per_tensor_scale *
/// e4m3(clamp(amax / 6 / per_tensor_scale, 2^-6, 448)), each step in float32.
inline float nvfp4_block_scale(float amax, float per_tensor_scale, const ElementFormat& e4m3) {
  const float scaled = std::clamp(amax / 6.0f / per_tensor_scale, 0.015625f, 448.0f);
  return per_tensor_scale * detail::round_element(scaled, e4m3);
}
inline float nvfp4_block_scale(float amax, float per_tensor_scale) {
  return nvfp4_block_scale(amax, per_tensor_scale, element_format(Format::FP8_E4M3));
}
/// OCP MX fake quantization of one row of n floats in blocks of `block` (the last may be
/// shorter): X = 2^mx_shared_exponent(block amax, emax), v = x * (1/X), y = round(v) X with the
/// element grid of fp8_fake_quant, mask = [|v| <= max]; a block holding NaN or +-inf -> NaN, mask 0.
void mx_fake_quant(const float* x, float* y, std::uint8_t* mask, std::int64_t n, std::int64_t block,
                   int mantissa_bits, int min_exponent, float max, int emax);
/// NVFP4 on one row: s = nvfp4_block_scale(block amax, per_tensor_scale), v = x / s,
/// y = round_e2m1(v) s, mask = [|v| <= 6]; non-finite blocks as mx_fake_quant.
void nvfp4_fake_quant(const float* x, float* y, std::uint8_t* mask, std::int64_t n, std::int64_t block,
                      float per_tensor_scale);

/// Min and max of n > 0 floats, NaN skipped, -0 counted below +0 (so the result does not depend
/// on the order). Sets *bad if any value is NaN or +-inf.
void min_max(const float* x, std::int64_t n, float* mn, float* mx, bool* bad);
/// min_max of each of `runs` consecutive runs of n > 0 floats into mn[r], mx[r] (one call for
/// the rows of a weight); *bad as min_max, for any run.
void min_max_runs(const float* x, std::int64_t runs, std::int64_t n, float* mn, float* mx, bool* bad);
/// Column-wise over a [rows, cols] block: mn[c] = min(mn[c], x[r, c]) for r in order (likewise
/// mx), NaN skipped, *bad set on NaN or +-inf. mn / mx hold the running values.
void min_max_rows(const float* x, std::int64_t rows, std::int64_t cols, float* mn, float* mx, bool* bad);

}  // namespace qat::quant::kernels
