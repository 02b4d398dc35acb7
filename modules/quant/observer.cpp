#include "modules/quant/observer.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <typeinfo>
#include <vector>

#include "framework/distributed/replica.h"
#include "framework/nn/state_check.h"
#include "modules/quant/detail/fq_kernels.h"
#include "modules/quant/detail/layout.h"
#include "modules/quant/fake_quant.h"
#include "modules/quant/kernels/cpu/kernels.h"
#include "modules/quant/kernels/cuda/kernels.h"

namespace qat::quant {

void detail::sync_ranges_min(float* packed, std::int64_t n) {
  distributed::sync_device(packed, n, distributed::ReduceOp::Min);
}

namespace {
constexpr float kInf = std::numeric_limits<float>::infinity();

Tensor filled(const Shape& shape, float v) { return Tensor::full(shape, v, DType::Float32); }

// a + c (b - a) with the product rounded to float before the add, as PyTorch computes it;
// volatile stops the compiler from contracting the two into one FMA (-march=native), which
// rounds once and differs from PyTorch in the last bit.
float moving_average(float a, float b, float c) {
  const volatile float step = c * (b - a);
  return a + step;
}

}  // namespace

Observer::Observer(std::string type_name, const QuantSpec& spec, const Shape& param_shape)
    : nn::Module(std::move(type_name)), spec_(spec) {
  spec_.validate();
  min_val_ = register_buffer("min_val", filled(param_shape, kInf));
  max_val_ = register_buffer("max_val", filled(param_shape, -kInf));
}

std::string Observer::who() const { return type_name() + (label_.empty() ? "" : " '" + label_ + "'"); }

bool Observer::has_observed() const {
  const Tensor host = min_val_.to(Device::CPU);  // (a copy from a device: not in the training step)
  const float* mn = host.data<float>();
  for (std::int64_t i = 0; i < host.numel(); ++i)
    if (mn[i] != kInf) return true;
  return false;
}

void Observer::reset() {
  min_val_.fill_(kInf);
  max_val_.fill_(-kInf);
}

void Observer::prepare_statistics(const Tensor& x) {
  const Shape expected = param_shape(spec_, x.shape());
  if (min_val_.shape() != expected) {
    QAT_REQUIRE(!has_observed(), who(), "input of shape ", x.shape(), " needs statistics of shape ",
                expected, ", but this observer has recorded ", min_val_.shape());
    min_val_ = replace_buffer("min_val", Tensor::full(expected, kInf, DType::Float32, x.device()));
    max_val_ = replace_buffer("max_val", Tensor::full(expected, -kInf, DType::Float32, x.device()));
  }
  if (x.device() == Device::CUDA) {
    if (!nonfinite_batches_.defined())
      nonfinite_batches_ = Tensor::zeros(Shape{1}, DType::Int32, Device::CUDA);
    else
      nonfinite_batches_ = nonfinite_batches_.to(Device::CUDA);
  }
}

Tensor Observer::forward(const Tensor& x) {
  require_float(x, who().c_str(), "x");
  if (x.device() == Device::CUDA) {
    const float c = device_averaging_constant();
    QAT_REQUIRE(c >= 0, who(), "not implemented on CUDA yet (input of shape ", x.shape(), ")");
    require_dtype(x, DType::Float32, who().c_str(), "x");
    if (x.numel() == 0) return x;
    spec_.validate_for(x.shape(), who().c_str());
    prepare_statistics(x);
    common_device(who().c_str(), {{"x", &x}, {"min_val", &min_val_}, {"max_val", &max_val_}});
    const detail::Layout l = detail::Layout::of(spec_, x.shape());
    kernels::cuda::ObserveArgs a{};
    a.min_val = min_val_.cuda_data<float>(), a.max_val = max_val_.cuda_data<float>();
    a.nonfinite_batches = nonfinite_batches_.cuda_data<std::int32_t>();
    a.observer_enabled = nullptr, a.averaging_constant = c;
    a.block = l.blocked ? l.block : 0;
    // data-parallel: the global batch's range, reduced on the device (no host round trip)
    if (distributed::replicas_active()) a.sync_ranges = &detail::sync_ranges_min;
    kernels::cuda::observe(x.cuda_data<float>(), l.outer, l.len, l.inner, a, nullptr, nullptr);
    return x;
  }
  require_cpu(who().c_str(), {{"x", &x}});
  if (x.numel() == 0) return x;
  begin_rows(x);
  const Tensor xf = x.dtype() == DType::Float32 ? x : x.to(DType::Float32);
  const detail::Layout layout = detail::Layout::of(spec_, x.shape());
  std::vector<float> bmin(layout.num_params, kInf), bmax(layout.num_params, -kInf);
  bool bad = false;
  const float* px = xf.data<float>();
  if (!layout.blocked && layout.num_params > 1 && layout.inner < detail::kShortRun) {
    // channel axis (nearly) innermost: column-wise over rows [outer, len * inner], one pass
    const std::int64_t cols = layout.len * layout.inner;
    std::vector<float> cmin(cols, kInf), cmax(cols, -kInf);
    kernels::min_max_rows(px, layout.outer, cols, cmin.data(), cmax.data(), &bad);
    for (std::int64_t c = 0; c < cols; ++c) {
      bmin[c / layout.inner] = std::min(bmin[c / layout.inner], cmin[c]);
      bmax[c / layout.inner] = std::max(bmax[c / layout.inner], cmax[c]);
    }
  } else if (!layout.blocked && layout.outer == 1 && layout.num_params > 1) {
    kernels::min_max_runs(px, layout.len, layout.inner, bmin.data(), bmax.data(), &bad);  // rows
  } else {  // runs of `inner` elements per parameter (per-tensor: one run)
    layout.for_each_run([&](std::int64_t off, std::int64_t n, std::int64_t p) {
      float mn, mx;
      kernels::min_max(px + off, n, &mn, &mx, &bad);
      bmin[p] = std::min(bmin[p], mn);
      bmax[p] = std::max(bmax[p], mx);
    });
  }
  QAT_REQUIRE(!bad, who(), "observed NaN or Inf in an input of shape ", x.shape(),
              " (a diverged training step or bad data)");
  // data-parallel: the global batch's range (min of mins, max of maxes) before any averaging
  distributed::sync_min_max(bmin.data(), bmax.data(), layout.num_params);
  update(bmin.data(), bmax.data());
  return x;
}

void Observer::begin_rows(const Tensor& x) {
  spec_.validate_for(x.shape(), who().c_str());
  prepare_statistics(x);
}

bool Observer::merge(const float*, const float*, float*, float*, std::int64_t) const { return false; }

void Observer::set_statistics(const float* mn, const float* mx, std::int64_t n) {
  QAT_CHECK(n == min_val_.numel() && min_val_.device() == Device::CPU);
  std::copy(mn, mn + n, min_val_.data<float>());
  std::copy(mx, mx + n, max_val_.data<float>());
}

QParams Observer::calculate_qparams() const {
  if (min_val_.device() != Device::CPU) {  // on the host, then back (not in the training step)
    QParams q = quant::calculate_qparams(min_val_.to(Device::CPU), max_val_.to(Device::CPU), spec_);
    if (spec_.granularity == Granularity::PerBlock && spec_.block_scale_bits > 0)
      double_quantize_scales(q.scale, spec_.block_scale_bits);
    return {q.scale.to(min_val_.device()), q.zero_point.to(min_val_.device())};
  }
  QParams q = quant::calculate_qparams(min_val_, max_val_, spec_);
  if (spec_.granularity == Granularity::PerBlock && spec_.block_scale_bits > 0)
    double_quantize_scales(q.scale, spec_.block_scale_bits);
  return q;
}

// ---- MinMaxObserver -------------------------------------------------------------------------

MinMaxObserver::MinMaxObserver(const QuantSpec& spec, const Shape& param_shape)
    : MinMaxObserver("MinMaxObserver", spec, param_shape) {}

MinMaxObserver::MinMaxObserver(std::string type_name, const QuantSpec& spec, const Shape& param_shape)
    : Observer(std::move(type_name), spec, param_shape) {}

// min_val = min(min_val, min(x)), max_val = max(max_val, max(x))
void MinMaxObserver::merge_into(const float* batch_min, const float* batch_max, float* mn, float* mx,
                                std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) {
    mn[i] = std::min(mn[i], batch_min[i]);
    mx[i] = std::max(mx[i], batch_max[i]);
  }
}

void MinMaxObserver::update(const float* batch_min, const float* batch_max) {
  merge_into(batch_min, batch_max, min_val_.data<float>(), max_val_.data<float>(), min_val_.numel());
}

// Only the classes whose update is merge_into's (a subclass may override update).
bool MinMaxObserver::merge(const float* batch_min, const float* batch_max, float* mn, float* mx,
                           std::int64_t n) const {
  if (typeid(*this) != typeid(MinMaxObserver) && typeid(*this) != typeid(PerChannelMinMaxObserver))
    return false;
  merge_into(batch_min, batch_max, mn, mx, n);
  return true;
}

// ---- MovingAverageMinMaxObserver -------------------------------------------------------------

MovingAverageMinMaxObserver::MovingAverageMinMaxObserver(const QuantSpec& spec, const Shape& param_shape,
                                                         double averaging_constant)
    : MovingAverageMinMaxObserver("MovingAverageMinMaxObserver", spec, param_shape, averaging_constant) {
}

MovingAverageMinMaxObserver::MovingAverageMinMaxObserver(std::string type, const QuantSpec& spec,
                                                         const Shape& param_shape,
                                                         double averaging_constant)
    : Observer(std::move(type), spec, param_shape), averaging_constant_(averaging_constant) {
  QAT_REQUIRE(averaging_constant > 0 && averaging_constant <= 1, type_name(),
              "averaging_constant must be in (0, 1], got ", averaging_constant);
}

// first batch: min_val = min(x); then min_val += c (min(x) - min_val), in float32 as PyTorch
void MovingAverageMinMaxObserver::merge_into(const float* batch_min, const float* batch_max, float* mn,
                                             float* mx, std::int64_t n) const {
  const auto c = static_cast<float>(averaging_constant_);
  for (std::int64_t i = 0; i < n; ++i) {
    if (mn[i] == kInf && mx[i] == -kInf) {
      mn[i] = batch_min[i];
      mx[i] = batch_max[i];
    } else {
      mn[i] = moving_average(mn[i], batch_min[i], c);
      mx[i] = moving_average(mx[i], batch_max[i], c);
    }
  }
}

void MovingAverageMinMaxObserver::update(const float* batch_min, const float* batch_max) {
  merge_into(batch_min, batch_max, min_val_.data<float>(), max_val_.data<float>(), min_val_.numel());
}

bool MovingAverageMinMaxObserver::merge(const float* batch_min, const float* batch_max, float* mn,
                                        float* mx, std::int64_t n) const {
  if (typeid(*this) != typeid(MovingAverageMinMaxObserver) &&
      typeid(*this) != typeid(MovingAveragePerChannelMinMaxObserver))
    return false;
  merge_into(batch_min, batch_max, mn, mx, n);
  return true;
}

std::string MovingAverageMinMaxObserver::extra_repr() const {
  return spec_.str() + ", averaging_constant=" + std::to_string(averaging_constant_);
}

PerChannelMinMaxObserver::PerChannelMinMaxObserver(const QuantSpec& spec, std::int64_t num_channels)
    : MinMaxObserver("PerChannelMinMaxObserver", spec, Shape{num_channels}) {
  QAT_REQUIRE(spec.granularity == Granularity::PerChannel, "PerChannelMinMaxObserver",
              "spec must be per-channel, got ", spec.str());
}

MovingAveragePerChannelMinMaxObserver::MovingAveragePerChannelMinMaxObserver(const QuantSpec& spec,
                                                                             std::int64_t num_channels,
                                                                             double averaging_constant)
    : MovingAverageMinMaxObserver("MovingAveragePerChannelMinMaxObserver", spec, Shape{num_channels},
                                  averaging_constant) {
  QAT_REQUIRE(spec.granularity == Granularity::PerChannel, "MovingAveragePerChannelMinMaxObserver",
              "spec must be per-channel, got ", spec.str());
}

void double_quantize_scales(Tensor& scale, int bits) {
  QAT_REQUIRE(bits >= 2 && bits <= 16, "double_quantize_scales", "bits must be in [2, 16], got ", bits);
  require_dtype(scale, DType::Float32, "double_quantize_scales", "scale");
  float* s = scale.data<float>();
  float top = 0;
  for (std::int64_t i = 0; i < scale.numel(); ++i) top = std::max(top, s[i]);
  const float levels = static_cast<float>((1 << bits) - 1);
  const float s2 = top / levels;
  if (!(s2 > 0)) return;
  for (std::int64_t i = 0; i < scale.numel(); ++i) s[i] = std::max(std::nearbyint(s[i] / s2), 1.0f) * s2;
}

// A pair is either a recorded range or the initial (+inf, -inf); anything else (NaN, min > max,
// one infinite end) came from a corrupt file and would poison calculate_qparams.
void Observer::check_state(const StateView& state, std::vector<std::string>& problems) const {
  const Tensor* mn = nn::check::find(state, "min_val");
  const Tensor* mx = nn::check::find(state, "max_val");
  if (mn == nullptr || mx == nullptr) return;
  if (mn->shape() != mx->shape() || mn->dtype() != DType::Float32 || mx->dtype() != DType::Float32) {
    problems.push_back(qat::detail::concat("min_val ", dtype_name(mn->dtype()), mn->shape(),
                                           " and max_val ", dtype_name(mx->dtype()), mx->shape(),
                                           ": must be float32 of one shape"));
    return;
  }
  const float* lo = mn->data<float>();
  const float* hi = mx->data<float>();
  const auto limit = static_cast<float>(nn::check::kMaxScale);
  // bitwise & and |: a branch-free count the compiler vectorises (the guard runs this every step)
  const auto good = [&](std::int64_t i) {
    const bool unobserved = (lo[i] == kInf) & (hi[i] == -kInf);
    const bool recorded = (std::fabs(lo[i]) <= limit) & (std::fabs(hi[i]) <= limit) & (lo[i] <= hi[i]);
    return unobserved | recorded;
  };
  const std::int64_t n = mn->numel();
  std::int64_t bad = 0, first = 0;
  for (std::int64_t i = 0; i < n; ++i) bad += !good(i);
  if (bad == 0) return;
  while (good(first)) ++first;
  const std::string at = mn->dim() > 0 ? qat::detail::concat("[", first, "]") : "";
  problems.push_back(qat::detail::concat(
      "min_val", at, " = ", nn::check::value_text(lo[first]), ", max_val", at, " = ",
      nn::check::value_text(hi[first]),
      ": not a recorded range (finite, min <= max, |value| <= 1e+30) nor the unobserved (inf, -inf)",
      n > 1 ? qat::detail::concat(" (", bad, " of ", n, " pairs)") : ""));
}
}  // namespace qat::quant
