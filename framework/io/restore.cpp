#include "framework/io/restore.h"

#include <algorithm>
#include <cmath>
#include <mutex>
#include <optional>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

#include "framework/nn/module.h"
#include "framework/nn/state_check.h"
#include "framework/optim/optimizer.h"

namespace qat::io {
namespace {

using qat::detail::concat;
using qat::detail::printable;

std::string source_of(const Checkpoint& ckpt) {
  return ckpt.info.source.empty() ? "<memory>" : ckpt.info.source;
}

std::string mismatch_reason(const Tensor& saved, const Tensor& model) {
  const bool dtype_differs = saved.dtype() != model.dtype();
  const bool shape_differs = saved.shape() != model.shape();
  std::ostringstream os;
  os << "checkpoint ";
  if (dtype_differs) os << dtype_name(saved.dtype()) << (shape_differs ? " " : "");
  if (shape_differs) os << saved.shape();
  os << " vs model ";
  if (dtype_differs) os << dtype_name(model.dtype()) << (shape_differs ? " " : "");
  if (shape_differs) os << model.shape();
  return os.str();
}

std::string plural(std::size_t n, const char* word) { return concat(n, " ", word, n == 1 ? "" : "s"); }

// The hints registered with set_load_hint, by name.
struct LoadHints {
  std::mutex mutex;
  std::map<std::string, LoadHint> hints;
};
LoadHints& load_hints() {
  static LoadHints h;
  return h;
}

struct LoadChecks {
  std::mutex mutex;
  std::map<std::string, LoadCheck> checks;
};
LoadChecks& load_checks() {
  static LoadChecks c;
  return c;
}

struct LoadUpgrades {
  std::mutex mutex;
  std::map<std::string, LoadUpgrade> upgrades;
};
LoadUpgrades& load_upgrades() {
  static LoadUpgrades u;
  return u;
}

std::string dotted(const std::string& prefix, const std::string& local) {
  return prefix.empty() ? local : prefix + "." + local;
}

// The value checks of load_into (see restore.h) on the state the model would hold after copying
// `incoming` (full name -> checkpoint tensor); one line per problem.
std::vector<std::string> value_problems(nn::Module& model, const Checkpoint& ckpt,
                                        const std::unordered_map<std::string, const Tensor*>& incoming,
                                        const LoadOptions& options) {
  std::vector<std::string> out;
  for (auto& [module_name, m] : model.named_modules()) {
    const std::string& prefix = module_name;  // (a lambda cannot capture a structured binding)
    nn::Module::StateView view;
    std::vector<std::string> local;
    auto add = [&](const NamedTensors& own, bool parameters) {
      for (const auto& [name, t] : own) {
        const auto it = incoming.find(dotted(prefix, name));
        view[name] = it == incoming.end() ? t : *it->second;
        if (parameters && !options.allow_non_finite && it != incoming.end())
          nn::check::finite(local, view, name);
      }
    };
    add(m->named_parameters(/*recurse=*/false), true);
    add(m->named_buffers(/*recurse=*/false), false);
    m->check_state(view, local);
    for (const auto& line : local) out.push_back(dotted(prefix, line));
  }
  std::vector<LoadCheck> registered;
  {
    std::lock_guard<std::mutex> lock(load_checks().mutex);
    for (const auto& [name, check] : load_checks().checks) registered.push_back(check);
  }
  for (const auto& check : registered) check(model, ckpt, out);
  return out;
}

// "hint: ...\n" for the checkpoint's own hint and each registered one that has something to say.
std::string hints_for(nn::Module& model, const Checkpoint& ckpt, const LoadReport& report) {
  std::vector<std::string> hints;
  const auto own = ckpt.metadata.find(std::string(kLoadHintKey));
  if (own != ckpt.metadata.end() && !own->second.empty()) hints.push_back(printable(own->second));
  std::vector<LoadHint> registered;
  {
    std::lock_guard<std::mutex> lock(load_hints().mutex);
    for (const auto& [name, hint] : load_hints().hints) registered.push_back(hint);
  }
  for (const auto& hint : registered) {
    std::string h;
    try {
      h = hint(model, ckpt, report);
    } catch (const std::exception&) {  // a hint must not hide the load error itself
    }
    if (!h.empty() && std::find(hints.begin(), hints.end(), h) == hints.end()) hints.push_back(h);
  }
  std::string out;
  for (const auto& h : hints) out += "hint: " + h + "\n";
  return out;
}

}  // namespace

std::string LoadReport::str() const {
  std::ostringstream os;
  for (const auto& n : missing) os << "  missing from checkpoint: " << n << "\n";
  for (const auto& m : mismatched) os << "  " << m.name << ": " << m.reason << "\n";
  for (const auto& n : unexpected) os << "  unexpected in checkpoint: " << printable(n) << "\n";
  return os.str();
}

std::string LoadReport::summary(std::size_t max_per_kind) const {
  std::ostringstream os;
  auto rest = [&](std::size_t n, const char* what) {
    if (n > max_per_kind) os << "  ... and " << n - max_per_kind << " more " << what << "\n";
  };
  for (std::size_t i = 0; i < missing.size() && i < max_per_kind; ++i)
    os << "  missing from checkpoint: " << missing[i] << "\n";
  rest(missing.size(), "missing from checkpoint");
  for (std::size_t i = 0; i < mismatched.size() && i < max_per_kind; ++i)
    os << "  " << mismatched[i].name << ": " << mismatched[i].reason << "\n";
  rest(mismatched.size(), "with another shape or dtype");
  for (std::size_t i = 0; i < unexpected.size() && i < max_per_kind; ++i)
    os << "  unexpected in checkpoint: " << printable(unexpected[i]) << "\n";
  rest(unexpected.size(), "unexpected in checkpoint");
  return os.str();
}

void set_load_upgrade(const std::string& name, LoadUpgrade upgrade) {
  std::lock_guard<std::mutex> lock(load_upgrades().mutex);
  if (upgrade)
    load_upgrades().upgrades[name] = std::move(upgrade);
  else
    load_upgrades().upgrades.erase(name);
}

void set_load_check(const std::string& name, LoadCheck check) {
  std::lock_guard<std::mutex> lock(load_checks().mutex);
  if (check)
    load_checks().checks[name] = std::move(check);
  else
    load_checks().checks.erase(name);
}

void set_load_hint(const std::string& name, LoadHint hint) {
  std::lock_guard<std::mutex> lock(load_hints().mutex);
  if (hint)
    load_hints().hints[name] = std::move(hint);
  else
    load_hints().hints.erase(name);
}

namespace {
// A snapshot on the host: checkpoints are device-independent (a device tensor is copied back).
Tensor host_copy(const Tensor& t) { return t.device() == Device::CPU ? t.clone() : t.to(Device::CPU); }
}  // namespace

Checkpoint capture(const nn::Module& model) {
  Checkpoint ckpt;
  for (const auto& [name, t] : model.named_state()) ckpt.tensors.emplace_back(name, host_copy(t));
  return ckpt;
}

OptimizerState capture(const optim::Optimizer& opt) {
  NamedTensors state = opt.state();
  for (auto& [name, t] : state)
    if (t.device() != Device::CPU) t = t.to(Device::CPU);
  return {opt.kind(), opt.hyperparameters(), std::move(state)};
}

LoadReport load_into(nn::Module& model, const Checkpoint& original, const LoadOptions& options) {
  std::vector<LoadUpgrade> upgrades;
  {
    std::lock_guard<std::mutex> lock(load_upgrades().mutex);
    for (const auto& [name, upgrade] : load_upgrades().upgrades) upgrades.push_back(upgrade);
  }
  std::optional<Checkpoint> upgraded;
  if (!upgrades.empty()) {
    upgraded = original;  // tensor handles: the upgrades replace entries, never write into them
    for (const LoadUpgrade& u : upgrades) u(model, *upgraded);
  }
  const Checkpoint& ckpt = upgraded ? *upgraded : original;
  std::unordered_map<std::string_view, const Tensor*> saved;
  for (const auto& [name, t] : ckpt.tensors) saved.emplace(name, &t);
  std::unordered_map<std::string, const Tensor*> incoming;  // what the copies below would write

  // Plan everything first; the model is touched only once the plan is known to be acceptable.
  LoadReport report;
  std::vector<std::pair<Tensor, const Tensor*>> copies;
  const NamedTensors state = model.named_state();
  std::unordered_set<std::string_view> in_model;
  for (const auto& [name, t] : state) {
    in_model.insert(name);
    const auto it = saved.find(name);
    if (it == saved.end()) {
      report.missing.push_back(name);
    } else if (!it->second->defined()) {
      report.mismatched.push_back({name, "undefined in the checkpoint"});
    } else if (it->second->shape() != t.shape() || it->second->dtype() != t.dtype()) {
      report.mismatched.push_back({name, mismatch_reason(*it->second, t)});
    } else {
      report.loaded.push_back(name);
      copies.emplace_back(t, it->second);
      incoming.emplace(name, it->second);
    }
  }
  for (const auto& [name, t] : ckpt.tensors)
    if (!in_model.count(name)) report.unexpected.push_back(name);

  if (options.strict && !report.complete()) {
    const std::size_t n = report.missing.size() + report.unexpected.size() + report.mismatched.size();
    const bool by_name = !report.missing.empty() || !report.unexpected.empty();
    throw CheckpointError(
        source_of(ckpt),
        concat("does not match the model (", plural(n, "problem"), "; nothing was loaded):\n",
               report.summary(), by_name ? hints_for(model, ckpt, report) : std::string()));
  }
  const std::vector<std::string> problems = value_problems(model, ckpt, incoming, options);
  if (!problems.empty()) {
    std::string msg = concat("holds values the model cannot use (", plural(problems.size(), "problem"),
                             "; nothing was loaded):\n");
    for (const auto& p : problems) msg += "  " + p + "\n";
    throw CheckpointError(source_of(ckpt), msg);
  }
  for (auto& [dst, src] : copies) dst.copy_(*src);
  return report;
}

LoadReport load_into(nn::Module& model, const std::string& path, const LoadOptions& options) {
  return load_into(model, load(path), options);
}

void restore_optimizer(optim::Optimizer& opt, const Checkpoint& ckpt) {
  const std::string source = source_of(ckpt);
  if (!ckpt.optimizer) throw CheckpointError(source, "holds no optimizer state");
  const OptimizerState& saved = *ckpt.optimizer;
  if (saved.kind != opt.kind())
    throw CheckpointError(source, concat("holds state of a '", printable(saved.kind),
                                         "' optimizer, not '", opt.kind(), "'"));
  std::vector<std::string> problems;
  const auto current = opt.hyperparameters();
  for (const auto& [name, value] : current) {
    const auto it = saved.hyperparameters.find(name);
    if (it == saved.hyperparameters.end())
      problems.push_back(concat("hyperparameter ", name, " is missing from the checkpoint"));
    else if (name == "lr" && !(it->second >= 0 && std::isfinite(it->second)))
      problems.push_back(concat("saved lr ", it->second, " is not a finite value >= 0"));
    else if (name != "lr" && !(it->second == value))
      problems.push_back(
          concat("hyperparameter ", name, ": checkpoint ", it->second, " vs optimizer ", value));
  }
  for (const auto& [name, value] : saved.hyperparameters)
    if (!current.count(name))
      problems.push_back(concat("hyperparameter ", printable(name), " is unknown to ", opt.kind()));
  for (const auto& [name, t] : saved.state) {
    if (!t.defined() || (t.dtype() != DType::Float32 && t.dtype() != DType::Float64)) continue;
    std::vector<std::string> bad;
    nn::check::finite(bad, {{name, t}}, name);
    for (const auto& b : bad) problems.push_back("state " + printable(b));
  }
  if (!problems.empty()) {
    std::string msg = concat("optimizer does not match (", plural(problems.size(), "problem"),
                             "; nothing was restored):\n");
    for (const auto& p : problems) msg += "  " + p + "\n";
    throw CheckpointError(source, msg);
  }
  try {
    opt.load_state(saved.state);  // validates everything before changing anything
  } catch (const Error& e) {
    throw CheckpointError(source, concat("optimizer state does not fit: ", e.what()));
  }
  const auto lr = saved.hyperparameters.find("lr");
  if (lr != saved.hyperparameters.end()) opt.set_lr(lr->second);
}

void restore_generators(const Checkpoint& ckpt, const std::map<std::string, Generator*>& targets) {
  const std::string source = source_of(ckpt);
  if (!ckpt.training) throw CheckpointError(source, "holds no training state");
  std::string absent;
  for (const auto& [name, gen] : targets) {
    QAT_REQUIRE(gen != nullptr, "io::restore_generators", "generator '", name, "' is null");
    if (!ckpt.training->generators.count(name)) absent += (absent.empty() ? "" : ", ") + printable(name);
  }
  if (!absent.empty()) throw CheckpointError(source, "holds no state for generator(s) " + absent);
  for (const auto& [name, gen] : targets) {
    const auto& s = ckpt.training->generators.at(name).s;
    if (s[0] == 0 && s[1] == 0 && s[2] == 0 && s[3] == 0)
      throw CheckpointError(
          source, "generator '" + name + "' has an all-zero state, which xoshiro256** never reaches");
  }
  for (const auto& [name, gen] : targets) gen->set_state(ckpt.training->generators.at(name));
}

}  // namespace qat::io
