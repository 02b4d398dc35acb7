#pragma once
// Quantizers whose scales come from each tensor they see: microscaled formats (OCP MX, NVFP4)
// and dynamic integer quantization. Neither keeps running statistics.
#include "modules/quant/quantizer.h"

namespace qat::quant {

/// OCP MX (E8M0 block scales) or NVFP4 (E4M3 block scales + fp32 per-tensor scale) fake
/// quantization, straight-through inside the element range (fake_quantize_mx). Block scales are
/// computed from every batch; NVFP4's per-tensor scale too while the observer switch is on
/// (recorded in the `per_tensor_scale` buffer in training), the recorded one when it is off
/// (freeze_qparams: torchao's calibrated per-tensor scale).
class MXFakeQuantize : public Quantizer {
 public:
  explicit MXFakeQuantize(const QuantSpec& spec);
  Tensor forward(const Tensor& x) override;
  /// Block scales exist only per batch: scale 1, zero point 0 (the int8 backend refuses these
  /// specs by name).
  QParams qparams() const override;
  /// NVFP4: the recorded per-tensor scale (0 before any training batch); MX: undefined.
  const Tensor& per_tensor_scale() const { return per_tensor_scale_; }
  /// The switches; NVFP4's per_tensor_scale 0 (never recorded) or in [kMinScale, kMaxScale].
  void check_state(const StateView& state, std::vector<std::string>& problems) const override;

 private:
  Tensor per_tensor_scale_;
};

/// Dynamic integer fake quantization (NVIDIA pytorch-quantization's dynamic QuantDescriptor,
/// torchao's 8da4w activations): each forward takes min / max of x per tensor, per index along
/// spec.axis (axis 0 of an activation: per row / token) or per block, computes qparams as the
/// observers do (calculate_qparams) and fake-quantizes with them, straight-through. No state
/// beyond the switches; qparams() are the last batch's.
class DynamicFakeQuantize : public Quantizer {
 public:
  explicit DynamicFakeQuantize(const QuantSpec& spec);
  Tensor forward(const Tensor& x) override;
  QParams qparams() const override { return {last_.scale.clone(), last_.zero_point.clone()}; }

 private:
  QParams last_;
};

/// The qparams dynamic quantization uses for x: min / max per param_shape(spec, x) group,
/// NaN skipped (+-inf widen the range), through calculate_qparams.
QParams dynamic_qparams(const Tensor& x, const QuantSpec& spec);

}  // namespace qat::quant
