#include "modules/quant/learnable_quantizer.h"

#include <algorithm>
#include <cmath>
#include <iostream>

#include "framework/autograd/grad_mode.h"
#include "framework/distributed/replica.h"
#include "framework/nn/state_check.h"
#include "framework/optim/divergence.h"
#include "framework/tensor/finite.h"
#include "modules/quant/detail/layout.h"
#include "modules/quant/detail/on_host.h"
#include "modules/quant/fake_quant.h"
#include "modules/quant/kernels/cuda/kernels.h"

namespace qat::quant {

namespace {

using qat::detail::concat;

// "LearnableFakeQuantize 'fc1.weight_fake_quant'", or the type alone before prepare_qat names it.
std::string who(const Quantizer& q) {
  return q.label().empty() ? q.type_name() : concat(q.type_name(), " '", q.label(), "'");
}

// "<who>: scale[2] = nan (3 of 8 values are not finite)<why>", or "" if every value is finite.
std::string nonfinite(const Quantizer& q, const Tensor& t, const char* name, const char* why) {
  const qat::detail::NonFinite bad = qat::detail::find_nonfinite(t);
  if (bad.count == 0) return "";
  return concat(
      who(q), ": ", name, qat::detail::index_text(t.shape(), bad.first), " = ",
      nn::check::value_text(bad.value),
      t.numel() > 1 ? concat(" (", bad.count, " of ", t.numel(), " values are not finite)") : "", why);
}

// A learned range value that is NaN / inf cannot be clamped back into meaning and would reach a
// NaN -> int cast: an error naming the quantizer, the tensor, index and value.
constexpr const char* kDiverged = ": a diverged training step (lower the learning rate)";
void require_finite(const Quantizer& q, const Tensor& t, const char* name) {
  if (std::string e = nonfinite(q, t, name, kDiverged); !e.empty()) throw Error(e);
}

// Values below kScaleEps clamped up to it (PyTorch clamps LSQ's scale the same way); adds the
// clamps to `count`. The first clamp of a quantizer prints one warning: "LSQ scale of 'fc1...'".
void clamp_up_to_eps(const Quantizer& q, const Tensor& t, const char* what, std::int64_t& count) {
  float* v = t.data<float>();
  std::int64_t n = 0, first = -1;
  float first_value = 0;
  for (std::int64_t i = 0; i < t.numel(); ++i)
    if (v[i] < kScaleEps) {
      if (n++ == 0) first = i, first_value = v[i];
      v[i] = kScaleEps;
    }
  if (n == 0) return;
  if (count == 0)
    std::cerr << "warning: " << what << " of '" << (q.label().empty() ? q.type_name() : q.label())
              << (first_value <= 0 ? "' went non-positive (" : "' fell below the minimum (")
              << first_value << " at index " << first << ") and is clamped to " << kScaleEps
              << "; lower the learning rate (further clamps of this quantizer are counted, not "
                 "reported)\n";
  count += n;
}

}  // namespace

LearnableFakeQuantize::LearnableFakeQuantize(const QuantSpec& spec, std::shared_ptr<Observer> observer,
                                             const Shape& param_shape, const Options& options)
    : Quantizer("LearnableFakeQuantize", spec), options_(options) {
  constexpr const char* fn = "LearnableFakeQuantize";
  QAT_REQUIRE(spec.format == Format::Int && spec.granularity != Granularity::PerBlock, fn,
              "needs an integer per-tensor or per-channel spec, got ", spec.str());
  QAT_REQUIRE(observer != nullptr, fn, "observer is null");
  QAT_REQUIRE(options.warmup_batches >= 1, fn, "warmup_batches must be >= 1, got ",
              options.warmup_batches);
  observer_ = register_module("activation_post_process", std::move(observer));
  scale_ = register_parameter("scale", Tensor::ones(param_shape, DType::Float32));
  zero_point_ = register_parameter("zero_point", Tensor::zeros(param_shape, DType::Float32));
  learning_enabled_ = register_buffer("learning_enabled", Tensor::zeros(Shape{1}, DType::UInt8));
  warmup_seen_ = register_buffer("warmup_seen", Tensor::zeros(Shape{}, DType::Int64));
  enable_static_estimate();
}

void LearnableFakeQuantize::enable_param_learning() {
  learning_enabled_.fill_(1);
  disable_observer();
  scale_.requires_grad_(true);
  zero_point_.requires_grad_(!spec_.symmetric);
}

void LearnableFakeQuantize::enable_static_estimate() {
  learning_enabled_.fill_(0);
  enable_observer();
  scale_.requires_grad_(false);
  zero_point_.requires_grad_(false);
}

void LearnableFakeQuantize::freeze_qparams(bool on) {
  if (!on) {
    if (warmup_seen_.item() >= options_.warmup_batches)
      enable_param_learning();
    else
      enable_static_estimate();
    return;
  }
  learning_enabled_.fill_(0);
  disable_observer();
  scale_.requires_grad_(false);
  zero_point_.requires_grad_(false);
}

// Observer init: the observer's qparams.  LSQ init: scale = 2 mean(|x|) / sqrt(qmax) per
// tensor or channel, zero point from the observer (LSQ+'s affine offset) or fixed.
void LearnableFakeQuantize::estimate(const Tensor& x) {
  NoGradGuard no_grad;
  observer_->forward(x);
  const QParams q = observer_->calculate_qparams();
  QAT_REQUIRE(q.scale.numel() == scale_.numel(), type_name(), "observer produced ", q.scale.numel(),
              " scales for ", scale_.numel(), " parameters");
  for (std::int64_t i = 0; i < scale_.numel(); ++i) {
    scale_.data<float>()[i] = q.scale.data<float>()[i];
    zero_point_.data<float>()[i] = static_cast<float>(q.zero_point.data<std::int32_t>()[i]);
  }
  if (options_.init == LearnableInit::LSQ && warmup_seen_.item() == 0) {
    const Tensor xf = x.dtype() == DType::Float32 ? x : x.to(DType::Float32);
    const detail::Layout layout = detail::Layout::of(spec_, x.shape());
    std::vector<double> abs_sum(layout.num_params, 0.0);
    std::vector<std::int64_t> count(layout.num_params, 0);
    layout.for_each_run([&](std::int64_t off, std::int64_t n, std::int64_t p) {
      for (std::int64_t i = 0; i < n; ++i) abs_sum[p] += std::fabs(xf.data<float>()[off + i]);
      count[p] += n;
    });
    // data-parallel: mean |x| over the global batch
    std::vector<double> sums(abs_sum);
    for (std::int64_t p = 0; p < layout.num_params; ++p) sums.push_back(static_cast<double>(count[p]));
    distributed::sync_sum(sums.data(), static_cast<std::int64_t>(sums.size()));
    for (std::int64_t p = 0; p < layout.num_params; ++p) {
      abs_sum[p] = sums[p];
      count[p] = static_cast<std::int64_t>(sums[layout.num_params + p]);
    }
    const double sqrt_qp = std::sqrt(static_cast<double>(spec_.quant_max()));
    for (std::int64_t p = 0; p < layout.num_params; ++p)
      scale_.data<float>()[p] =
          std::max(static_cast<float>(2.0 * abs_sum[p] / std::max<std::int64_t>(count[p], 1) / sqrt_qp),
                   kScaleEps);
  }
}

// On CUDA: an estimating batch (the warm-up, and calibration) runs the CPU code above on a host
// copy of x with the quantizer's state moved to the host and back (a round trip per such batch,
// the same bits as the CPU); a learning batch clamps the scale on the device and runs the CUDA
// op. The CPU's per-step checks that would read device values are not made there: a NaN / inf
// scale or input shows up as a non-finite loss (the divergence guard's), not as this
// quantizer's error. The phase switches (one byte each) are read on the host: a sync per read.
Tensor LearnableFakeQuantize::forward(const Tensor& x) {
  const bool cuda = x.defined() && x.device() == Device::CUDA;
  if (observing()) {
    auto step = [this](const Tensor& xs) {
      estimate(xs);
      // calibration only estimates: the warm-up (and the switch to learning) is training's
      if (!calibrating() &&
          (*warmup_seen_.data<std::int64_t>() += 1, warmup_seen_.item() >= options_.warmup_batches))
        enable_param_learning();
    };
    if (cuda)
      detail::with_state_on_host(*this, Device::CUDA, [&] { step(x.to(Device::CPU)); });
    else
      step(x);
  } else if (cuda) {
    kernels::cuda::clamp_below(scale_.cuda_data<float>(), scale_.numel(), kScaleEps);
  } else {
    require_finite(*this, scale_, "scale");
    require_finite(*this, zero_point_, "zero_point");
    clamp_up_to_eps(*this, scale_, "LSQ scale", scale_clamps_);  // keep it positive, as PyTorch
    if (is_training() && fake_quant_enabled())
      refuse_nonfinite_input(
          x,
          " in training (NaN / inf data or activations, which quantize to quant_min / "
          "quant_max and would hide from the loss)");
  }
  // The phase lives in the buffers (checkpointed); requires_grad follows it.
  scale_.requires_grad_(learning_enabled());
  zero_point_.requires_grad_(learning_enabled() && !spec_.symmetric);
  if (!fake_quant_enabled()) return x;
  const double grad_factor = options_.use_grad_scaling
                                 ? 1.0 / std::sqrt(static_cast<double>(x.numel()) * spec_.quant_max())
                                 : 1.0;
  if (spec_.granularity == Granularity::PerChannel)
    return fake_quantize_learnable_per_channel_affine(x, scale_, zero_point_, spec_.axis,
                                                      spec_.quant_min(), spec_.quant_max(), grad_factor);
  return fake_quantize_learnable_per_tensor_affine(x, scale_, zero_point_, spec_.quant_min(),
                                                   spec_.quant_max(), grad_factor);
}

QParams LearnableFakeQuantize::qparams() const {
  require_finite(*this, scale_, "scale");
  require_finite(*this, zero_point_, "zero_point");
  QParams q{scale_.clone(), Tensor::empty(zero_point_.shape(), DType::Int32)};
  const auto lo = static_cast<float>(spec_.quant_min()), hi = static_cast<float>(spec_.quant_max());
  for (std::int64_t i = 0; i < zero_point_.numel(); ++i) {
    q.scale.data<float>()[i] = std::max(q.scale.data<float>()[i], kScaleEps);
    q.zero_point.data<std::int32_t>()[i] =
        static_cast<std::int32_t>(std::clamp(std::nearbyint(zero_point_.data<float>()[i]), lo, hi));
  }
  return q;
}

// ---- LearnableAmaxFakeQuantize --------------------------------------------------------------

LearnableAmaxFakeQuantize::LearnableAmaxFakeQuantize(const QuantSpec& spec,
                                                     std::shared_ptr<Observer> observer,
                                                     const Shape& param_shape,
                                                     std::int64_t warmup_batches)
    : Quantizer("LearnableAmaxFakeQuantize", spec), warmup_batches_(warmup_batches) {
  constexpr const char* fn = "LearnableAmaxFakeQuantize";
  QAT_REQUIRE(spec.format == Format::Int && spec.symmetric && spec.granularity != Granularity::PerBlock,
              fn, "needs a symmetric integer per-tensor or per-channel spec, got ", spec.str());
  QAT_REQUIRE(observer != nullptr, fn, "observer is null");
  QAT_REQUIRE(warmup_batches >= 1, fn, "warmup_batches must be >= 1, got ", warmup_batches);
  observer_ = register_module("activation_post_process", std::move(observer));
  amax_ = register_parameter("amax", Tensor::ones(param_shape, DType::Float32));
  warmup_seen_ = register_buffer("warmup_seen", Tensor::zeros(Shape{}, DType::Int64));
  amax_.requires_grad_(false);
}

// On CUDA as LearnableFakeQuantize: estimating batches on the host, learning ones on the device.
Tensor LearnableAmaxFakeQuantize::forward(const Tensor& x) {
  const bool cuda = x.defined() && x.device() == Device::CUDA;
  if (observing()) {
    auto step = [this](const Tensor& xs) {
      observer_->forward(xs);
      const Tensor &mn = observer_->min_val(), &mx = observer_->max_val();
      QAT_REQUIRE(mn.numel() == amax_.numel(), type_name(), "observer produced ", mn.numel(),
                  " ranges for ", amax_.numel(), " amax values");
      for (std::int64_t i = 0; i < amax_.numel(); ++i)
        amax_.data<float>()[i] = std::max({-mn.data<float>()[i], mx.data<float>()[i], kScaleEps});
      if (!calibrating() &&
          (*warmup_seen_.data<std::int64_t>() += 1, warmup_seen_.item() >= warmup_batches_))
        disable_observer();
    };
    if (cuda)
      detail::with_state_on_host(*this, Device::CUDA, [&] { step(x.to(Device::CPU)); });
    else
      step(x);
  } else if (cuda) {
    kernels::cuda::clamp_below(amax_.cuda_data<float>(), amax_.numel(), kScaleEps);
  } else {
    require_finite(*this, amax_, "amax");
    clamp_up_to_eps(*this, amax_, "PACT amax", amax_clamps_);
    if (is_training() && fake_quant_enabled())
      refuse_nonfinite_input(x,
                             " in training (NaN / inf data or activations, which clip to -amax / amax "
                             "and would hide from the loss)");
  }
  amax_.requires_grad_(!frozen_ && warmup_seen_.item() >= warmup_batches_);  // phase: the buffers
  if (!fake_quant_enabled()) return x;
  return fake_quantize_learnable_amax(x, amax_, spec_);
}

void LearnableAmaxFakeQuantize::freeze_qparams(bool on) {
  frozen_ = on;
  enable_observer(!on && warmup_seen_.item() < warmup_batches_);
  amax_.requires_grad_(!on && warmup_seen_.item() >= warmup_batches_);
}

QParams LearnableAmaxFakeQuantize::qparams() const {
  require_finite(*this, amax_, "amax");
  QParams q{Tensor::empty(amax_.shape(), DType::Float32), Tensor::zeros(amax_.shape(), DType::Int32)};
  const auto qmax = static_cast<float>(spec_.quant_max());
  for (std::int64_t i = 0; i < amax_.numel(); ++i)
    q.scale.data<float>()[i] = std::max(amax_.data<float>()[i], kScaleEps) / qmax;
  return q;
}

std::int64_t learnable_range_clamps(nn::Module& model) {
  std::int64_t n = 0;
  for (const auto& [name, m] : model.named_modules()) {
    if (const auto* q = dynamic_cast<const LearnableFakeQuantize*>(m)) n += q->scale_clamps();
    if (const auto* q = dynamic_cast<const LearnableAmaxFakeQuantize*>(m)) n += q->amax_clamps();
  }
  return n;
}

// ---- state checks (Module::check_state) --------------------------------------------------------

namespace {
void check_learnable_scale(const nn::Module::StateView& state, const char* name,
                           std::vector<std::string>& problems) {
  nn::check::in_range(problems, state, name, -nn::check::kMaxScale, nn::check::kMaxScale,
                      "a learnable scale (finite; clamped up to eps at use)");
}
}  // namespace

void LearnableFakeQuantize::check_state(const StateView& state,
                                        std::vector<std::string>& problems) const {
  Quantizer::check_state(state, problems);
  nn::check::flag(problems, state, "learning_enabled");
  nn::check::in_range(problems, state, "warmup_seen", 0, 9.2e18, "a batch count");
  check_learnable_scale(state, "scale", problems);
  const auto qmin = static_cast<double>(spec_.quant_min()),
             qmax = static_cast<double>(spec_.quant_max());
  if (spec_.symmetric) {
    const auto fixed = static_cast<double>(spec_.symmetric_zero_point());
    nn::check::satisfies(
        problems, state, "zero_point", [fixed](double z) { return z == fixed || z == 0; },
        [&] {
          return qat::detail::concat("must be ", fixed, ", the fixed zero point of ", spec_.str());
        });
  } else {
    constexpr double kSlack = 1 << 24;  // float32 integers are exact below 2^24
    nn::check::in_range(problems, state, "zero_point", qmin - kSlack, qmax + kSlack,
                        "a learnable zero point (clamped to the spec's range at use)");
  }
}

void LearnableAmaxFakeQuantize::check_state(const StateView& state,
                                            std::vector<std::string>& problems) const {
  Quantizer::check_state(state, problems);
  nn::check::in_range(problems, state, "warmup_seen", 0, 9.2e18, "a batch count");
  check_learnable_scale(state, "amax", problems);
}
}  // namespace qat::quant
