#pragma once
// Internal: the quantization hot path on CUDA (fake_quant.cu), device pointers, queued on the
// framework's one stream. Bit-exact with the CPU kernels (kernels/cpu/kernels.h): the same
// float32 operations in the same order, round half to even (rintf), built with -fmad=false.
// Without the CUDA backend every call throws (none.cpp).
#include <cstdint>

namespace qat::quant::kernels::cuda {

/// Per-tensor, per-channel or per-block qparams: scale[param_of(i, len, inner, block)] etc.
/// (param_index.h) from device arrays, or the host scalars scale0 / zp0 when `scale` is null.
struct FqParams {
  const float* scale = nullptr;
  const std::int32_t* zero_point = nullptr;
  float scale0 = 1.0f;
  std::int32_t zp0 = 0;
  std::int64_t len = 1, inner = 1;
  std::int64_t block = 0;  ///< > 0: one parameter per block of `block` indices along len
  /// Device flag (uint8 [1]) or null: when it reads 0, y = x and mask = 1 (no host sync).
  const std::uint8_t* enabled = nullptr;
};

/// q = rint(x * (1/scale)) + zp; y = (clamp(q, qmin, qmax) - zp) * scale; mask = [qmin <= q <= qmax].
void fake_quant(const float* x, float* y, std::uint8_t* mask, std::int64_t n, const FqParams& p,
                std::int64_t qmin, std::int64_t qmax);
/// dx = mask ? dy : 0 (the straight-through estimator).
void masked_copy(const float* dy, const std::uint8_t* mask, float* dx, std::int64_t n);

/// PyTorch's fused_moving_avg_obs_fake_quant, per tensor, in one cooperative launch: with
/// `observe`, min / max of x (NaN skipped, -0 below +0), then running_min / running_max updated
/// (first batch: set; then r += c (m - r) in float32), then scale / zero_point from them as
/// calculate_qparams; a batch holding NaN / inf leaves the state alone and adds 1 to
/// *nonfinite_batches. Then y = fake_quant(x) (or a copy of x without `fake_quant_on`, mask 1).
struct FusedObserverArgs {
  float* running_min;
  float* running_max;
  float* scale;
  std::int32_t* zero_point;
  std::int32_t* nonfinite_batches;
  float averaging_constant;
  std::int64_t qmin, qmax;
  bool symmetric;
  std::int32_t symmetric_zero_point;
  bool observe, fake_quant_on;
  /// Device flags (uint8 [1]) or null, ANDed with observe / fake_quant_on inside the kernel
  /// (a quantizer's observer_enabled / fake_quant_enabled buffers, read without a host sync).
  const std::uint8_t* observer_enabled = nullptr;
  const std::uint8_t* fake_quant_enabled = nullptr;
};
void fused_moving_avg_obs_fake_quant(const float* x, float* y, std::uint8_t* mask, std::int64_t n,
                                     const FusedObserverArgs& args);

/// An observer step on CUDA (observer.cu), x viewed as (outer, len, inner) with one range per
/// index of len (per tensor: 1, 1, n). Unless *observer_enabled is 0: the batch's min / max per
/// range (NaN skipped, -0 below +0, deterministic), then min_val / max_val updated as
/// obs::update_range (averaging_constant 0: running min / max; else the moving average), then,
/// with `scale`, scale / zero_point as calculate_qparams; a batch holding NaN / inf anywhere
/// leaves every range alone and adds 1 to *nonfinite_batches. With `y`: y = fake_quant(x) with
/// the (new) scale / zero_point and its STE mask, or y = x and mask 1 when *fake_quant_enabled
/// is 0. No host sync; scratch from the device pool.
struct ObserveArgs {
  float* min_val;                        ///< [len]
  float* max_val;                        ///< [len]
  std::int32_t* nonfinite_batches;       ///< [1]
  const std::uint8_t* observer_enabled;  ///< [1] or null (on)
  float averaging_constant;              ///< 0: MinMaxObserver
  float* scale = nullptr;                ///< [len] or null: no qparams, no fake quant
  std::int32_t* zero_point = nullptr;    ///< [len]
  std::int64_t qmin = 0, qmax = 255;
  bool symmetric = false;
  std::int32_t symmetric_zero_point = 0;
  const std::uint8_t* fake_quant_enabled = nullptr;  ///< [1] or null (on)
  /// > 0: one range per block of `block` indices along len (len % block == 0), ranges shaped
  /// (outer, len / block, inner) as the min_val / max_val / scale / zero_point arrays.
  std::int64_t block = 0;
  /// Data-parallel (distributed::replicas_active()): the batch's ranges are combined over the
  /// replicas before the update. Called with device memory [min (R), -max (R), -bad (1)], R ranges,
  /// which it MIN-reduces in place over the replicas, queued on the stream (no host sync).
  void (*sync_ranges)(float* packed, std::int64_t n) = nullptr;
};
void observe(const float* x, std::int64_t outer, std::int64_t len, std::int64_t inner,
             const ObserveArgs& args, float* y, std::uint8_t* mask);

/// A tensor viewed as (outer, len, inner) with one parameter per index of len: element i uses
/// parameter (i / inner) % len (per tensor: 1, 1, n).
struct ParamLayout {
  std::int64_t outer = 1, len = 1, inner = 1;
  std::int64_t numel() const { return outer * len * inner; }
};

/// The learnable quantizers (learnable.cu), float32 parameters on the device (not validated:
/// reading them would cost a host sync). Elementwise outputs are bit-exact with the CPU; the
/// parameter gradients are the CPU's float32 partial sums (chunk256, kernels/cpu/kernels.h)
/// summed in double in a fixed order (no atomics: the same
/// bits on every run), a different order than the CPU's, so they agree with it to rounding
/// (~1e-7), not to the bit.
///
/// LSQ forward: y = fake_quant(x) with scale[c] and zero point clamp(rint(zero_point[c]), qmin, qmax).
void lsq_forward(const float* x, float* y, const ParamLayout& l, const float* scale,
                 const float* zero_point, std::int64_t qmin, std::int64_t qmax);
/// LSQ backward (learnable_math.h lsq_grad_terms): dx (skipped when null) and dscale[c] /
/// dzero_point[c] (each skipped when null); the backward zero point is
/// trunc(clamp(zp + 0.5)) with `truncated_zero_point` (the per-tensor op), else clamp(rint(zp)).
void lsq_backward(const float* x, const float* dy, float* dx, const ParamLayout& l, const float* scale,
                  const float* zero_point, bool truncated_zero_point, std::int64_t qmin,
                  std::int64_t qmax, float grad_factor, float* dscale, float* dzero_point);
/// Learnable amax forward (learnable_math.h amax_forward_one): y and the mask bits.
void amax_forward(const float* x, float* y, std::uint8_t* mask, const ParamLayout& l, const float* amax,
                  bool is_signed, std::int64_t qmin, std::int64_t qmax);
/// Learnable amax backward: dx (skipped when null) and damax[c] (skipped when null).
void amax_backward(const float* dy, const std::uint8_t* mask, float* dx, const ParamLayout& l,
                   float* damax);

/// v[i] = max(v[i], lo) in place, NaN kept (learnable.cu): the learnable quantizers' scale /
/// amax guard on the device (the CPU clamps the same values, and throws on NaN / inf).
void clamp_below(float* v, std::int64_t n, float lo);

/// FP8 fake quantization (fp8.cu, fp8_math.h fake_quant_one), scale[c] on the device: y and the
/// STE mask [|x / s| <= max], bit-exact with the CPU.
void fp8_fake_quant(const float* x, float* y, std::uint8_t* mask, const ParamLayout& l,
                    const float* scale, int mantissa_bits, int min_exponent, float max);

}  // namespace qat::quant::kernels::cuda
