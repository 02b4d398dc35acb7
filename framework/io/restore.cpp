#include "framework/io/restore.h"

#include <cmath>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

#include "framework/nn/module.h"
#include "framework/optim/optimizer.h"

namespace qat::io {
namespace {

using qat::detail::concat;

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

}  // namespace

std::string LoadReport::str() const {
  std::ostringstream os;
  for (const auto& n : missing) os << "  missing from checkpoint: " << n << "\n";
  for (const auto& m : mismatched) os << "  " << m.name << ": " << m.reason << "\n";
  for (const auto& n : unexpected) os << "  unexpected in checkpoint: " << n << "\n";
  return os.str();
}

Checkpoint capture(const nn::Module& model) {
  Checkpoint ckpt;
  for (const auto& [name, t] : model.named_state()) ckpt.tensors.emplace_back(name, t.clone());
  return ckpt;
}

OptimizerState capture(const optim::Optimizer& opt) {
  return {opt.kind(), opt.hyperparameters(), opt.state()};
}

LoadReport load_into(nn::Module& model, const Checkpoint& ckpt, const LoadOptions& options) {
  std::unordered_map<std::string_view, const Tensor*> saved;
  for (const auto& [name, t] : ckpt.tensors) saved.emplace(name, &t);

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
    }
  }
  for (const auto& [name, t] : ckpt.tensors)
    if (!in_model.count(name)) report.unexpected.push_back(name);

  if (options.strict && !report.complete()) {
    const std::size_t n = report.missing.size() + report.unexpected.size() + report.mismatched.size();
    throw CheckpointError(source_of(ckpt), concat("does not match the model (", plural(n, "problem"),
                                                  "; nothing was loaded):\n", report.str()));
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
    throw CheckpointError(
        source, concat("holds state of a '", saved.kind, "' optimizer, not '", opt.kind(), "'"));
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
      problems.push_back(concat("hyperparameter ", name, " is unknown to ", opt.kind()));
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
    if (!ckpt.training->generators.count(name)) absent += (absent.empty() ? "" : ", ") + name;
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
