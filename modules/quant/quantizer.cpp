#include "modules/quant/quantizer.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <vector>

#include "framework/autograd/grad_mode.h"
#include "framework/autograd/node.h"
#include "framework/distributed/replica.h"
#include "framework/nn/state_check.h"
#include "framework/optim/divergence.h"
#include "framework/tensor/finite.h"
#include "framework/tensor/parallel.h"
#include "modules/quant/checkpoint_meta.h"
#include "modules/quant/detail/fq_kernels.h"
#include "modules/quant/detail/layout.h"
#include "modules/quant/detail/on_host.h"
#include "modules/quant/fake_quant.h"
#include "modules/quant/histogram_observer.h"
#include "modules/quant/kernels/cpu/kernels.h"
#include "modules/quant/kernels/cuda/kernels.h"

namespace qat::quant {

// ---- calibration ----------------------------------------------------------------------------

namespace {
thread_local CalibrationGuard* g_calibration = nullptr;
}

CalibrationGuard::CalibrationGuard() : prev_(g_calibration) { g_calibration = this; }
CalibrationGuard::~CalibrationGuard() { g_calibration = prev_; }
CalibrationGuard* CalibrationGuard::current() { return g_calibration; }

std::int64_t CalibrationGuard::observed(const Quantizer* q) const {
  const auto it = seen_.find(q);
  return it == seen_.end() ? 0 : it->second;
}

bool Quantizer::observing() const {
  if (!observer_enabled()) return false;
  if (CalibrationGuard* guard = CalibrationGuard::current()) {
    guard->record(this);
    return true;
  }
  return is_training();
}

// ---- Quantizer ------------------------------------------------------------------------------

Quantizer::Quantizer(std::string type_name, const QuantSpec& spec)
    : nn::Module(std::move(type_name)), spec_(spec) {
  spec_.validate();
  register_load_hints();  // a program with quantizers gets the checkpoint checks for them
  fake_quant_enabled_ = register_buffer("fake_quant_enabled", Tensor::ones(Shape{1}, DType::UInt8));
  observer_enabled_ = register_buffer("observer_enabled", Tensor::ones(Shape{1}, DType::UInt8));
}

void Quantizer::refuse_nonfinite_input(const Tensor& x, const char* why) const {
  const qat::detail::NonFinite bad = qat::detail::find_nonfinite(x);
  if (bad.count == 0) return;
  const std::string e = qat::detail::concat(
      label_.empty() ? type_name() : qat::detail::concat(type_name(), " '", label_, "'"), ": input",
      qat::detail::index_text(x.shape(), bad.first), " = ", nn::check::value_text(bad.value),
      x.numel() > 1 ? qat::detail::concat(" (", bad.count, " of ", x.numel(), " values are not finite)")
                    : "",
      why);
  if (const optim::DivergenceGuard* guard = optim::DivergenceGuard::current())
    guard->fail(optim::DivergenceError::Kind::Forward, label_.empty() ? type_name() : label_, e);
  throw Error(e);
}

void Quantizer::set_label(const std::string& label) {
  label_ = label;
  if (Observer* obs = observer()) obs->set_label(label + ".activation_post_process");
}

std::shared_ptr<Observer> make_observer(ObserverKind kind, const QuantSpec& spec,
                                        const Shape& param_shape) {
  switch (kind) {
    case ObserverKind::MinMax:
      return std::make_shared<MinMaxObserver>(spec, param_shape);
    case ObserverKind::MovingAverage:
      return std::make_shared<MovingAverageMinMaxObserver>(spec, param_shape);
    case ObserverKind::Histogram:
      QAT_REQUIRE(spec.granularity == Granularity::PerTensor, "make_observer",
                  "the histogram observer is per-tensor, got spec ", spec.str());
      return std::make_shared<HistogramObserver>(spec);
  }
  return nullptr;
}

// ---- FakeQuantize ---------------------------------------------------------------------------

FakeQuantize::FakeQuantize(const QuantSpec& spec, std::shared_ptr<Observer> observer,
                           const Shape& param_shape)
    : Quantizer("FakeQuantize", spec) {
  QAT_REQUIRE(spec.format == Format::Int, "FakeQuantize", "spec must be an integer format, got ",
              spec.str(), " (use FP8FakeQuantize)");
  QAT_REQUIRE(observer != nullptr, "FakeQuantize", "observer is null");
  observer_ = register_module("activation_post_process", std::move(observer));
  scale_ = register_buffer("scale", Tensor::ones(param_shape, DType::Float32));
  zero_point_ = register_buffer("zero_point", Tensor::zeros(param_shape, DType::Int32));
}

// On CUDA: observer step, qparams and fake quantization in device kernels, the switches read
// on the device (no host sync in training); per tensor with a moving average, PyTorch's fused
// op in one launch, else observe (observer.cu), fused per channel and per block. Per block with
// integer block scales (block_scale_bits) the scales are quantized on the host: a round trip per
// observing step. Data-parallel (a replica group is active): observe, with the batch ranges
// MIN-reduced over the replicas through NCCL between its range and update kernels, so every
// replica computes the same qparams. A batch holding NaN / inf is skipped by the observer and
// counted (Observer::nonfinite_batches) instead of refused, and the observer-off NaN check of the
// CPU path is not made.
Tensor FakeQuantize::forward_cuda(const Tensor& x) {
  const std::string who = label_.empty() ? type_name() : type_name() + " '" + label_ + "'";
  require_dtype(x, DType::Float32, who.c_str(), "x");
  const float c = observer_->device_averaging_constant();
  QAT_REQUIRE(c >= 0, who, "observer ", observer_->type_name(), ": not implemented on CUDA yet");
  // in training the observer_enabled switch is read by the kernel; calibration counts on the host
  const bool calib = calibrating();
  const bool observe = calib ? observing() : is_training();
  if (x.numel() != 0) {
    spec_.validate_for(x.shape(), who.c_str());
    observer_->prepare_statistics(x);
  }
  const Tensor& mn = observer_->min_val();
  if (mn.shape() != scale_.shape()) {  // the statistics' shape became known
    scale_ = replace_buffer("scale", Tensor::ones(mn.shape(), DType::Float32, x.device()));
    zero_point_ = replace_buffer("zero_point", Tensor::zeros(mn.shape(), DType::Int32, x.device()));
  }
  const Tensor& mx = observer_->max_val();
  common_device(who.c_str(), {{"x", &x},
                              {"scale", &scale_},
                              {"zero_point", &zero_point_},
                              {"fake_quant_enabled", &fake_quant_enabled_},
                              {"observer_enabled", &observer_enabled_},
                              {"min_val", &mn},
                              {"max_val", &mx}});
  Tensor out = Tensor::empty(x.shape(), DType::Float32, Device::CUDA);
  Tensor mask = Tensor::empty(x.shape(), DType::UInt8, Device::CUDA);
  if (x.numel() == 0) return out;
  const std::uint8_t* obs_flag = calib ? nullptr : observer_enabled_.cuda_data<std::uint8_t>();
  const auto sym_zp = static_cast<std::int32_t>(spec_.symmetric ? spec_.symmetric_zero_point() : 0);
  std::int32_t* counter = observer_->nonfinite_batches().cuda_data<std::int32_t>();
  // data-parallel: the batch's range is all-reduced over the replicas on the device between the
  // range and the update, so the fused single-launch path is split (observer.cu sync_ranges)
  const bool sync = observe && distributed::replicas_active();
  if (spec_.granularity == Granularity::PerTensor && c > 0 && !sync) {
    kernels::cuda::FusedObserverArgs a{mn.cuda_data<float>(),
                                       mx.cuda_data<float>(),
                                       scale_.cuda_data<float>(),
                                       zero_point_.cuda_data<std::int32_t>(),
                                       counter,
                                       c,
                                       spec_.quant_min(),
                                       spec_.quant_max(),
                                       spec_.symmetric,
                                       sym_zp,
                                       observe,
                                       true,
                                       obs_flag,
                                       fake_quant_enabled_.cuda_data<std::uint8_t>()};
    kernels::cuda::fused_moving_avg_obs_fake_quant(x.cuda_data<float>(), out.cuda_data<float>(),
                                                   mask.cuda_data<std::uint8_t>(), x.numel(), a);
  } else {
    const detail::Layout l = detail::Layout::of(spec_, x.shape());
    // per block with integer block scales: statistics on the device, the scales quantized on the
    // host (Observer::calculate_qparams, a round trip), then the fake quantization
    const bool host_scales = spec_.granularity == Granularity::PerBlock && spec_.block_scale_bits > 0;
    kernels::cuda::ObserveArgs a{};
    a.min_val = mn.cuda_data<float>(), a.max_val = mx.cuda_data<float>();
    a.nonfinite_batches = counter, a.observer_enabled = obs_flag, a.averaging_constant = c;
    a.scale = scale_.cuda_data<float>(), a.zero_point = zero_point_.cuda_data<std::int32_t>();
    a.qmin = spec_.quant_min(), a.qmax = spec_.quant_max();
    a.symmetric = spec_.symmetric, a.symmetric_zero_point = sym_zp;
    a.fake_quant_enabled = fake_quant_enabled_.cuda_data<std::uint8_t>();
    a.block = l.blocked ? l.block : 0;
    if (sync) a.sync_ranges = &detail::sync_ranges_min;
    if (observe && host_scales) {
      kernels::cuda::ObserveArgs stats = a;
      stats.scale = nullptr, stats.zero_point = nullptr;
      kernels::cuda::observe(x.cuda_data<float>(), l.outer, l.len, l.inner, stats, nullptr, nullptr);
      const QParams q = observer_->calculate_qparams();
      scale_.copy_(q.scale);
      zero_point_.copy_(q.zero_point);
    }
    if (!observe || host_scales) {  // only the fake quantization (its switch read on the device)
      kernels::cuda::FqParams p;
      p.scale = a.scale, p.zero_point = a.zero_point, p.len = l.len, p.inner = l.inner;
      p.block = a.block, p.enabled = a.fake_quant_enabled;
      kernels::cuda::fake_quant(x.cuda_data<float>(), out.cuda_data<float>(),
                                mask.cuda_data<std::uint8_t>(), x.numel(), p, a.qmin, a.qmax);
    } else {
      kernels::cuda::observe(x.cuda_data<float>(), l.outer, l.len, l.inner, a, out.cuda_data<float>(),
                             mask.cuda_data<std::uint8_t>());
    }
  }
  // straight-through estimator: dx = mask ? dy : 0
  autograd::record(out, "fake_quantize", {x},
                   [mask](const Tensor& g, const std::vector<Tensor>&, std::vector<Tensor>& gi) {
                     gi[0] = Tensor::empty(g.shape(), g.dtype(), Device::CUDA);
                     kernels::cuda::masked_copy(g.cuda_data<float>(), mask.cuda_data<std::uint8_t>(),
                                                gi[0].cuda_data<float>(), g.numel());
                   });
  return out;
}

// An observing forward on a weight's rows (per channel, the channel axis outermost, rows of at
// least kShortRun): each block of rows observed, its qparams computed and the rows
// fake-quantized while they are in L1, in place of a pass for the observer and one for the
// fake quantization. The same bits as observe, calculate_qparams, fake_quantize: every step is
// per row. Nothing changes until the whole weight is done; undefined where it does not apply
// or where a row fails (a NaN, or a corrupt state that calculate_qparams refuses): the general
// path then runs, and gives the general path's error.
// MLP fc1 [256, 784], repeated (in L2): 24.4 -> 20.2-20.5 us (avx512_vnni).
Tensor FakeQuantize::observe_rows(const Tensor& x) {
  if (!fake_quant_enabled() || !x.defined() || x.dtype() != DType::Float32 ||
      x.device() != Device::CPU || x.numel() == 0 || spec_.granularity != Granularity::PerChannel ||
      distributed::replicas_active() || !(observer_->spec() == spec_))
    return Tensor();
  observer_->begin_rows(x);  // forward's checks and errors
  const detail::Layout l = detail::Layout::of(spec_, x.shape());
  const std::int64_t rows = l.len, n = l.inner;
  if (l.blocked || l.outer != 1 || rows < 2 || n < detail::kShortRun) return Tensor();
  if (!observer_->merge(nullptr, nullptr, nullptr, nullptr, 0)) return Tensor();  // no rule
  const float* lo = observer_->min_val().data<float>();
  const float* hi = observer_->max_val().data<float>();
  std::vector<float> mn(lo, lo + rows), mx(hi, hi + rows);  // the statistics, committed at the end
  std::vector<float> scale(rows);
  std::vector<std::int32_t> zp(rows);
  Tensor out = Tensor::empty(x.shape(), DType::Float32);
  const bool grad = autograd::should_record(x);
  Tensor bits = grad ? Tensor::empty(Shape{(x.numel() + 7) / 8}, DType::UInt8) : Tensor();
  const float* px = x.data<float>();
  float* py = out.data<float>();
  std::uint8_t* pb = grad ? bits.data<std::uint8_t>() : nullptr;
  const QuantSpec& os = observer_->spec();
  const std::int64_t qmin = spec_.quant_min(), qmax = spec_.quant_max();
  // threads take whole rows, and whole bytes of the mask (rows of a multiple of 8), else one
  const std::int64_t grain = n % 8 == 0 ? std::max<std::int64_t>(1, (1 << 16) / n) : rows + 1;
  std::atomic<bool> failed{false};  // no exception leaves an OpenMP thread
  parallel_for(rows, grain, [&](std::int64_t b, std::int64_t e) {
    // rows observed then quantized while in L1: ~8 KB of them, at least 4 rows (fc1 [256, 784]
    // in blocks of 4 rows: 20.2-20.5 us; of 5: 21.1; of 10: 22.4; of 20: 24.8; of 1: 25.1)
    constexpr std::int64_t kMaxBlock = 64;
    const std::int64_t block = std::clamp<std::int64_t>(2048 / n, 4, kMaxBlock);
    float bmin[kMaxBlock], bmax[kMaxBlock];
    for (std::int64_t r = b; r < e && !failed.load(std::memory_order_relaxed); r += block) {
      const std::int64_t k = std::min(block, e - r);
      bool nonfinite = false;
      kernels::min_max_runs(px + r * n, k, n, bmin, bmax, &nonfinite);
      if (nonfinite) {
        failed = true;
        return;
      }
      observer_->merge(bmin, bmax, mn.data() + r, mx.data() + r, k);
      try {
        calculate_qparams(mn.data() + r, mx.data() + r, k, os, scale.data() + r, zp.data() + r);
      } catch (...) {
        failed = true;
        return;
      }
      kernels::fake_quant_runs(px + r * n, py + r * n, pb, r * n, k, n, scale.data() + r, zp.data() + r,
                               qmin, qmax);
    }
  });
  if (failed) return Tensor();
  // the general path's state and errors from here: statistics and qparams committed, then
  // fake_quantize's check of them (a range too wide for float32 gives an infinite scale)
  observer_->set_statistics(mn.data(), mx.data(), rows);
  if (scale_.shape() != observer_->min_val().shape()) {  // the statistics' shape became known
    scale_ = replace_buffer("scale", Tensor::empty(observer_->min_val().shape(), DType::Float32));
    zero_point_ =
        replace_buffer("zero_point", Tensor::empty(observer_->min_val().shape(), DType::Int32));
  }
  std::copy(scale.begin(), scale.end(), scale_.data<float>());
  std::copy(zp.begin(), zp.end(), zero_point_.data<std::int32_t>());
  detail::require_qparams(scale.data(), zp.data(), rows, qmin, qmax, "fake_quantize");
  detail::record_ste_bits(out, "fake_quantize", x, std::move(bits));
  return out;
}

Tensor FakeQuantize::forward(const Tensor& x) {
  if (x.defined() && x.device() == Device::CUDA) return forward_cuda(x);
  if (observing()) {
    if (Tensor out = observe_rows(x); out.defined()) return out;
    observer_->forward(x);
    const QParams q = observer_->calculate_qparams();
    if (q.scale.shape() != scale_.shape()) {  // the statistics' shape became known
      scale_ = replace_buffer("scale", q.scale.clone());
      zero_point_ = replace_buffer("zero_point", q.zero_point.clone());
    } else {
      scale_.copy_(q.scale);
      zero_point_.copy_(q.zero_point);
    }
  } else if (is_training() && fake_quant_enabled()) {  // (an observing forward refuses NaN already)
    refuse_nonfinite_input(x,
                           " in training with the observer off (NaN / inf data or activations, which "
                           "quantize to quant_min / quant_max and would hide from the loss)");
  }
  if (!fake_quant_enabled()) return x;
  return fake_quantize(x, {scale_, zero_point_}, spec_);
}

// ---- FP8FakeQuantize --------------------------------------------------------------------------

FP8FakeQuantize::FP8FakeQuantize(const QuantSpec& spec, std::shared_ptr<Observer> observer,
                                 const Shape& param_shape)
    : Quantizer("FP8FakeQuantize", spec) {
  QAT_REQUIRE(spec.is_float(), "FP8FakeQuantize", "spec must be an FP8 format, got ", spec.str());
  QAT_REQUIRE(observer != nullptr, "FP8FakeQuantize", "observer is null");
  observer_ = register_module("activation_post_process", std::move(observer));
  scale_ = register_buffer("scale", Tensor::ones(param_shape, DType::Float32));
}

// scale = max(|min|, |max|) / fp8_max, at least float32 eps. On CUDA an observing batch runs
// this on a host copy of x with the state moved to the host and back (the same bits as the CPU,
// a round trip per observing batch); the fake quantization runs on the device.
Tensor FP8FakeQuantize::forward(const Tensor& x) {
  if (observing()) {
    auto observe = [this](const Tensor& xs) {
      observer_->forward(xs);
      const Tensor& mn = observer_->min_val();
      const Tensor& mx = observer_->max_val();
      if (mn.shape() != scale_.shape())
        scale_ = replace_buffer("scale", Tensor::ones(mn.shape(), DType::Float32));
      const auto fmax = static_cast<float>(fp8_max(spec_.format));
      for (std::int64_t i = 0; i < scale_.numel(); ++i) {
        const float amax = std::max(-mn.data<float>()[i], mx.data<float>()[i]);
        scale_.data<float>()[i] = std::isfinite(amax) ? std::max(amax / fmax, kScaleEps) : 1.0f;
      }
    };
    if (x.defined() && x.device() == Device::CUDA)
      detail::with_state_on_host(*this, Device::CUDA, [&] { observe(x.to(Device::CPU)); });
    else
      observe(x);
  }
  if (!fake_quant_enabled()) return x;
  return fake_quantize_fp8(x, scale_, spec_);
}

QParams FP8FakeQuantize::qparams() const {
  return {scale_.clone(), Tensor::zeros(scale_.shape(), DType::Int32)};
}

// ---- state checks (Module::check_state) --------------------------------------------------------

void Quantizer::check_state(const StateView& state, std::vector<std::string>& problems) const {
  nn::check::flag(problems, state, "fake_quant_enabled");
  nn::check::flag(problems, state, "observer_enabled");
}

// The zero point calculate_qparams gives a symmetric spec (0 signed, the midpoint unsigned).
void FakeQuantize::check_state(const StateView& state, std::vector<std::string>& problems) const {
  Quantizer::check_state(state, problems);
  nn::check::scale(problems, state, "scale");
  const auto qmin = static_cast<double>(spec_.quant_min()),
             qmax = static_cast<double>(spec_.quant_max());
  if (!spec_.symmetric) {
    nn::check::in_range(problems, state, "zero_point", qmin, qmax, "a zero point of the spec's range");
    return;
  }
  const auto fixed = static_cast<double>(spec_.symmetric_zero_point());
  nn::check::satisfies(
      problems, state, "zero_point", [fixed](double z) { return (z == fixed) | (z == 0); },
      [&] {
        return qat::detail::concat("must be ", fixed, ", the fixed zero point of ", spec_.str(),
                                   fixed != 0 ? " (or 0 before any observation)" : "");
      });
}

void FP8FakeQuantize::check_state(const StateView& state, std::vector<std::string>& problems) const {
  Quantizer::check_state(state, problems);
  nn::check::scale(problems, state, "scale");
}
}  // namespace qat::quant
