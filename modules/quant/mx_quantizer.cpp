#include "modules/quant/mx_quantizer.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "framework/nn/state_check.h"
#include "framework/tensor/dispatch.h"
#include "modules/quant/detail/layout.h"
#include "modules/quant/fake_quant.h"

namespace qat::quant {

// ---- MXFakeQuantize ---------------------------------------------------------------------------

MXFakeQuantize::MXFakeQuantize(const QuantSpec& spec) : Quantizer("MXFakeQuantize", spec) {
  QAT_REQUIRE(spec.is_microscaled(), "MXFakeQuantize",
              "spec must have E8M0 (MX) or E4M3 (NVFP4) block scales, got ", spec.str());
  if (spec.scale_format == ScaleFormat::E4M3)
    per_tensor_scale_ = register_buffer("per_tensor_scale", Tensor::zeros(Shape{1}, DType::Float32));
}

Tensor MXFakeQuantize::forward(const Tensor& x) {
  const bool record = observing();
  if (is_training() && fake_quant_enabled())
    refuse_nonfinite_input(x, " in training (a block holding NaN / inf quantizes to NaN)");
  if (!fake_quant_enabled()) return x;
  if (spec_.scale_format != ScaleFormat::E4M3) return fake_quantize_mx(x, spec_);
  float pts = per_tensor_scale_.data<float>()[0];
  if (observer_enabled() || pts == 0) pts = nvfp4_per_tensor_scale(x);
  if (record) per_tensor_scale_.data<float>()[0] = pts;
  return fake_quantize_mx(x, spec_, pts);
}

QParams MXFakeQuantize::qparams() const {
  return {Tensor::ones(Shape{1}, DType::Float32), Tensor::zeros(Shape{1}, DType::Int32)};
}

void MXFakeQuantize::check_state(const StateView& state, std::vector<std::string>& problems) const {
  Quantizer::check_state(state, problems);
  if (spec_.scale_format != ScaleFormat::E4M3) return;
  nn::check::satisfies(
      problems, state, "per_tensor_scale",
      [](double v) { return v == 0 || (v >= nn::check::kMinScale && v <= nn::check::kMaxScale); },
      [] {
        return qat::detail::concat("not an NVFP4 per-tensor scale: 0 (never recorded) or in [",
                                   nn::check::kMinScale, ", ", nn::check::kMaxScale, "]");
      });
}

// ---- DynamicFakeQuantize ----------------------------------------------------------------------

QParams dynamic_qparams(const Tensor& x, const QuantSpec& spec) {
  constexpr const char* fn = "dynamic_qparams";
  require_float(x, fn, "x");
  spec.validate_for(x.shape(), fn);
  const detail::Layout layout = detail::Layout::of(spec, x.shape());
  Tensor mn = Tensor::full(param_shape(spec, x.shape()), std::numeric_limits<float>::infinity());
  Tensor mx = Tensor::full(mn.shape(), -std::numeric_limits<float>::infinity());
  float* pmn = mn.data<float>();
  float* pmx = mx.data<float>();
  qat::detail::dispatch_float(x.dtype(), fn, [&]<class T>() {
    const T* px = x.data<T>();
    layout.for_each_run([&](std::int64_t off, std::int64_t n, std::int64_t p) {
      for (std::int64_t i = off; i < off + n; ++i) {
        const auto v = static_cast<float>(px[i]);
        if (v != v) continue;
        pmn[p] = std::min(pmn[p], v);
        pmx[p] = std::max(pmx[p], v);
      }
    });
  });
  return calculate_qparams(mn, mx, spec);
}

DynamicFakeQuantize::DynamicFakeQuantize(const QuantSpec& spec)
    : Quantizer("DynamicFakeQuantize", spec) {
  QAT_REQUIRE(spec.dynamic && spec.format == Format::Int, "DynamicFakeQuantize",
              "spec must be a dynamic integer spec, got ", spec.str());
  last_ = {Tensor::ones(Shape{1}, DType::Float32), Tensor::zeros(Shape{1}, DType::Int32)};
}

Tensor DynamicFakeQuantize::forward(const Tensor& x) {
  observing();  // counts the batch under a CalibrationGuard
  if (is_training() && fake_quant_enabled())
    refuse_nonfinite_input(x, " in training (NaN / inf would set the batch's range)");
  if (!fake_quant_enabled()) return x;
  last_ = dynamic_qparams(x, spec_);
  return fake_quantize(x, last_, spec_);
}

}  // namespace qat::quant
