#include "framework/optim/divergence.h"

#include "framework/nn/state_check.h"
#include "framework/tensor/finite.h"

namespace qat::optim {
namespace {

using qat::detail::concat;

thread_local DivergenceGuard* t_current = nullptr;

// "fc1.weight[3, 7] = nan<context> (4 of 200704 values are not finite<more>)"
std::string describe(std::string_view name, const Tensor& t, const qat::detail::NonFinite& bad,
                     std::string_view context = "", std::string_view more = "") {
  std::string s = concat(name, qat::detail::index_text(t.shape(), bad.first), " = ",
                         nn::check::value_text(bad.value), context);
  if (t.numel() > 1)
    s += concat(" (", bad.count, " of ", t.numel(), " values are not finite", more, ")");
  else if (!more.empty())
    s += concat(" (", more.substr(2), ")");
  return s;
}

// Every module under `root` with parameters or buffers of its own, with its dotted name. Children
// are held by their shared_ptr, so a module replaced later stays valid (if no longer checked).
std::vector<std::pair<std::string, nn::ModulePtr>> stateful_modules(nn::Module& root) {
  std::vector<std::pair<std::string, nn::ModulePtr>> out;
  std::vector<std::pair<std::string, nn::ModulePtr>> stack{{"", nn::ModulePtr(nn::ModulePtr(), &root)}};
  while (!stack.empty()) {
    auto [name, m] = std::move(stack.back());
    stack.pop_back();
    if (!m->named_parameters(false).empty() || !m->named_buffers(false).empty())
      out.emplace_back(name, m);
    const nn::NamedModules& children = m->named_children();
    for (auto it = children.rbegin(); it != children.rend(); ++it)  // depth first, in order
      stack.emplace_back(name.empty() ? it->first : name + "." + it->first, it->second);
  }
  return out;
}

}  // namespace

DivergenceGuard::DivergenceGuard(nn::Module& model, const Options& options)
    : options_(options), params_(model.named_parameters()), step_(options.first_step) {
  QAT_REQUIRE(options.every >= 1, "DivergenceGuard", "every must be >= 1, got ", options.every);
  QAT_REQUIRE(options.first_step >= 1, "DivergenceGuard", "first_step must be >= 1, got ",
              options.first_step);
  if (options_.check_state) stateful_ = stateful_modules(model);
  prev_ = t_current;
  t_current = this;
}

// Guards usually die in reverse order; one that dies out of order is unlinked from the chain, so
// current() never returns a dead guard.
DivergenceGuard::~DivergenceGuard() {
  if (t_current == this) {
    t_current = prev_;
    return;
  }
  for (DivergenceGuard* g = t_current; g != nullptr; g = g->prev_)
    if (g->prev_ == this) {
      g->prev_ = prev_;
      return;
    }
}

DivergenceGuard* DivergenceGuard::current() { return t_current; }

DivergenceGuard::DivergenceGuard(nn::Module& model, const Optimizer& optimizer, const Options& options)
    : DivergenceGuard(model, options) {
  optimizer_ = &optimizer;
  params_ = optimizer.params();
}

void DivergenceGuard::set_step(std::int64_t step) {
  QAT_REQUIRE(step >= 1, "DivergenceGuard::set_step", "step must be >= 1, got ", step);
  step_ = step;
}

void DivergenceGuard::fail(DivergenceError::Kind kind, const std::string& tensor,
                           const std::string& what) const {
  std::string msg = concat("divergence at step ", step_, ": ", what);
  const bool sparse = kind == DivergenceError::Kind::Gradient ||
                      kind == DivergenceError::Kind::Parameter || kind == DivergenceError::Kind::State;
  if (sparse && options_.every > 1)
    msg += concat(" (checked every ", options_.every, " steps: it began after step ",
                  step_ - options_.every, ")");
  if (!note_.empty()) msg += "; " + note_;
  throw DivergenceError(msg, step_, kind, tensor);
}

void DivergenceGuard::check_input(const Tensor& x, std::string_view name) const {
  const qat::detail::NonFinite bad = qat::detail::find_nonfinite(x);
  if (bad.count == 0) return;
  fail(DivergenceError::Kind::Input, std::string(name), describe(name, x, bad, " in the data"));
}

void DivergenceGuard::check_loss(const Tensor& loss) {
  const qat::detail::NonFinite bad = qat::detail::find_nonfinite(loss);
  if (bad.count == 0) {
    if (loss.numel() == 1) {
      last_loss_ = loss.item();
      last_loss_step_ = step_;
    }
    return;
  }
  std::string what = loss.numel() == 1 ? concat("the loss is ", nn::check::value_text(bad.value))
                                       : concat("the loss ", describe("", loss, bad));
  if (last_loss_step_ > 0)
    what += concat(" (the last finite loss was ", nn::check::value_text(last_loss_), " at step ",
                   last_loss_step_, ")");
  fail(DivergenceError::Kind::Loss, "loss", what);
}

void DivergenceGuard::check_gradients() const {
  if (!checks_this_step()) return;
  for (const auto& [name, p] : params_) {
    const Tensor g = p.grad();
    if (!g.defined()) continue;
    const qat::detail::NonFinite bad = qat::detail::find_nonfinite(g);
    if (bad.count != 0)
      fail(DivergenceError::Kind::Gradient, name, concat("gradient of ", describe(name, g, bad)));
  }
}

void DivergenceGuard::end_step() {
  const std::int64_t step = step_++;
  if (step % options_.every != 0) return;
  step_ = step;  // name the step that was checked
  for (const auto& [name, p] : params_) {
    const qat::detail::NonFinite bad = qat::detail::find_nonfinite(p);
    if (bad.count == 0) continue;
    const std::string lr = optimizer_ != nullptr ? concat("; lr ", optimizer_->lr()) : "";
    fail(DivergenceError::Kind::Parameter, name,
         describe(name, p, bad, " after the optimizer step", lr));
  }
  for (const auto& [name, m] : stateful_) {
    problems_.clear();
    m->check_current_state(problems_);
    if (problems_.empty()) continue;
    std::string what;
    for (const std::string& p : problems_)
      what += concat(what.empty() ? "" : "; ", name.empty() ? "" : name + ".", p);
    fail(DivergenceError::Kind::State, name, what);
  }
  step_ = step + 1;
}

}  // namespace qat::optim
