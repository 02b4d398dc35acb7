#include "framework/optim/optimizer.h"

#include <set>
#include <unordered_map>

#include "framework/autograd/grad_mode.h"

namespace qat::optim {

Optimizer::Optimizer(NamedTensors params, double lr, const char* fn)
    : params_(std::move(params)), state_(params_.size()), lr_(lr) {
  QAT_REQUIRE(lr >= 0, fn, "lr must be >= 0, got ", lr);
  std::set<std::string> seen;
  for (const auto& [name, p] : params_) {
    QAT_REQUIRE(p.defined(), fn, "parameter '", name, "' is an undefined tensor");
    QAT_REQUIRE(is_floating(p.dtype()), fn, "parameter '", name,
                "' must be a float32 or float64 tensor, got ", dtype_name(p.dtype()), " on ",
                device_name(p.device()));
    // A parameter may be frozen for now (requires_grad false, e.g. a learnable quantizer in its
    // warm-up): it has no gradient and step() skips it until it gets one.
    QAT_REQUIRE(p.is_leaf(), fn, "parameter '", name, "' must be a leaf tensor (not produced by an op)");
    QAT_REQUIRE(seen.insert(name).second, fn, "parameter name '", name, "' appears twice");
  }
}

void Optimizer::step() {
  NoGradGuard no_grad;
  const std::size_t n_slots = slots().size();
  std::vector<CudaUpdate> on_cuda;
  for (std::size_t i = 0; i < params_.size(); ++i) {
    Tensor& p = params_[i].second;
    const Tensor g = p.grad();
    if (!g.defined()) continue;
    common_device(kind().c_str(), {{params_[i].first.c_str(), &p}, {"grad", &g}});
    state_[i].resize(n_slots);
    if (p.device() == Device::CUDA)
      on_cuda.push_back({&p, g, &state_[i]});
    else
      update(p, g, state_[i]);
  }
  if (!on_cuda.empty()) update_cuda(on_cuda);
}

void Optimizer::update_cuda(std::vector<CudaUpdate>& batch) {
  throw Error(detail::concat(kind(), ": not implemented on CUDA yet (parameter ",
                             dtype_name(batch.front().param->dtype()), batch.front().param->shape(),
                             " is on cuda)"));
}

void Optimizer::zero_grad() {
  for (auto& [name, p] : params_) p.zero_grad();
}

void Optimizer::set_lr(double lr) {
  QAT_REQUIRE(lr >= 0, "Optimizer::set_lr", "lr must be >= 0, got ", lr);
  lr_ = lr;
}

NamedTensors Optimizer::state() const {
  const std::vector<Slot> spec = slots();
  NamedTensors out;
  for (std::size_t i = 0; i < params_.size(); ++i)
    for (std::size_t s = 0; s < state_[i].size() && s < spec.size(); ++s)
      if (state_[i][s].defined())
        out.emplace_back(params_[i].first + "." + spec[s].name, state_[i][s].clone());
  return out;
}

void Optimizer::load_state(const NamedTensors& entries) {
  static constexpr const char* fn = "Optimizer::load_state";
  const std::vector<Slot> spec = slots();
  std::unordered_map<std::string, std::size_t> param_index, slot_index;
  for (std::size_t i = 0; i < params_.size(); ++i) param_index[params_[i].first] = i;
  for (std::size_t s = 0; s < spec.size(); ++s) slot_index[spec[s].name] = s;

  // Validate everything into a fresh table, then swap it in.
  std::vector<std::vector<Tensor>> fresh(params_.size());
  for (const auto& [key, t] : entries) {
    const std::size_t dot = key.rfind('.');
    const auto pi = dot == std::string::npos ? param_index.end() : param_index.find(key.substr(0, dot));
    QAT_REQUIRE(pi != param_index.end(), fn, "entry '", key, "' names no parameter of this ", kind(),
                " optimizer");
    const auto si = slot_index.find(key.substr(dot + 1));
    QAT_REQUIRE(si != slot_index.end(), fn, "entry '", key, "': ", kind(), " keeps no state slot '",
                key.substr(dot + 1), "'");
    const Tensor& p = params_[pi->second].second;
    const Slot& slot = spec[si->second];
    const Shape want_shape = slot.per_element ? p.shape() : Shape{};
    const DType want_dtype = slot.per_element ? p.dtype() : DType::Int64;
    QAT_REQUIRE(t.defined(), fn, "entry '", key, "' is an undefined tensor");
    QAT_REQUIRE(t.shape() == want_shape && t.dtype() == want_dtype, fn, "entry '", key, "' is ",
                dtype_name(t.dtype()), t.shape(), ", expected ", dtype_name(want_dtype), want_shape);
    if (!slot.per_element)
      QAT_REQUIRE(t.item() >= 0, fn, "entry '", key, "' must be >= 0, got ", t.item());
    auto& row = fresh[pi->second];
    row.resize(spec.size());
    QAT_REQUIRE(!row[si->second].defined(), fn, "entry '", key, "' appears twice");
    // per-element slots live on their parameter's device
    row[si->second] = slot.per_element && t.device() != p.device() ? t.to(p.device()) : t.clone();
  }
  for (std::size_t i = 0; i < fresh.size(); ++i)
    for (std::size_t s = 0; s < fresh[i].size(); ++s)
      QAT_REQUIRE(fresh[i][s].defined(), fn, "entry '", params_[i].first, ".", spec[s].name,
                  "' is missing (a parameter needs all of its state slots or none)");
  state_ = std::move(fresh);
}

}  // namespace qat::optim
