// The example programs' models and checkpoints (checkpoints.h).
#include "examples/common/checkpoints.h"

#include <algorithm>
#include <sstream>

#include "framework/io/checkpoint_error.h"
#include "framework/io/restore.h"
#include "framework/tensor/random.h"
#include "modules/quant/checkpoint_meta.h"
#include "modules/quant/qconfig.h"

namespace qat::examples {

namespace {

// "SELECTOR=CONFIG": SELECTOR is "type:TypeName", a glob (has * ? [) or an exact module name.
void add_rule(quant::QConfigRegistry& registry, const std::string& rule) {
  const auto eq = rule.find('=');
  QAT_REQUIRE(eq != std::string::npos && eq > 0 && eq + 1 < rule.size(), "--rule",
              "expected SELECTOR=CONFIG, got '", rule, "'");
  const std::string selector = rule.substr(0, eq), config = rule.substr(eq + 1);
  if (selector.rfind("type:", 0) == 0)
    registry.set_module_type(selector.substr(5), config);
  else if (selector.find_first_of("*?[") != std::string::npos)
    registry.set_module_glob(selector, config);
  else
    registry.set_module_name(selector, config);
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string part; std::getline(ss, part, sep);)
    if (!part.empty()) out.push_back(part);
  return out;
}

}  // namespace

std::string join(const std::vector<std::string>& v, char sep) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : std::string(1, sep)) + x;
  return s;
}

// One input of the model's shape: prepare_qat and convert trace the model's forward on it.
Tensor example_input(const ModelFactory& factory) {
  return factory.flatten_input ? Tensor::zeros(Shape{1, 784}) : Tensor::zeros(Shape{1, 1, 28, 28});
}

// The float model, prepared for QAT when `o.mode` says so; `report` receives prepare's report.
nn::ModulePtr build_model(const Options& o, const ModelFactory& factory, quant::PrepareReport* report,
                          const io::Checkpoint* float_init) {
  nn::ModulePtr model = factory.build(o.arch);
  if (float_init) io::load_into(*model, *float_init);  // QAT starts from these float weights
  if (o.mode == "qat") {
    quant::QConfigRegistry registry;
    registry.set_global(o.qconfig);
    for (const std::string& rule : o.rules) add_rule(registry, rule);
    const quant::PrepareReport r = quant::prepare_qat(*model, registry, example_input(factory));
    if (report) *report = r;
  }
  return model;
}

// What a checkpoint says about the model that wrote it, so that it can be rebuilt.
std::map<std::string, std::string> describe(const Options& o, const ModelFactory& f,
                                            const std::string& kind) {
  return {{"kind", kind},
          {"model", f.model},
          {"arch", o.arch},
          {"mode", o.mode},
          {"qconfig", o.mode == "qat" ? o.qconfig : ""},
          {"rules", join(o.rules, ';')}};
}

// The metadata entry `key` of a checkpoint written by `f.program`; throws CheckpointError naming
// the file and the key when it is absent.
std::string meta(const io::Checkpoint& ckpt, const ModelFactory& f, const std::string& key) {
  const auto it = ckpt.metadata.find(key);
  if (it == ckpt.metadata.end())
    throw io::CheckpointError(ckpt.info.source,
                              "has no '" + key + "' metadata entry: not written by " + f.program);
  return it->second;
}

// The training counter `key` of a checkpoint, which must lie in [0, max].
std::int64_t counter(const io::Checkpoint& ckpt, const std::string& key, std::int64_t max) {
  const auto& c = ckpt.training->counters;
  const auto it = c.find(key);
  if (it == c.end())
    throw io::CheckpointError(ckpt.info.source, "has no '" + key + "' training counter");
  if (it->second < 0 || it->second > max)
    throw io::CheckpointError(
        ckpt.info.source,
        detail::concat("training counter '", key, "' = ", it->second, " is not in [0, ", max, "]"));
  return it->second;
}

// Adopts the architecture and quantization recorded in `ckpt`; throws CheckpointError if it was
// written by another program or architecture (values from the file are printed escaped).
void adopt(Options& o, const ModelFactory& f, const io::Checkpoint& ckpt) {
  const std::string model = meta(ckpt, f, "model");
  if (model != f.model)
    throw io::CheckpointError(ckpt.info.source,
                              "holds a '" + detail::printable(model) + "' model, not '" + f.model + "'");
  const std::string arch = meta(ckpt, f, "arch");
  if (std::find(f.archs.begin(), f.archs.end(), arch) == f.archs.end())
    throw io::CheckpointError(ckpt.info.source,
                              "holds unknown architecture '" + detail::printable(arch) + "'");
  const std::string kind = meta(ckpt, f, "kind");
  if (kind != "fp32" && kind != "qat" && kind != "int8")
    throw io::CheckpointError(ckpt.info.source, "metadata 'kind' = '" + detail::printable(kind) +
                                                    "' is none of fp32, qat, int8");
  o.arch = arch;
  o.mode = meta(ckpt, f, "mode");
  if (o.mode != "fp32" && o.mode != "qat")
    throw io::CheckpointError(ckpt.info.source, "metadata 'mode' = '" + detail::printable(o.mode) +
                                                    "' is neither fp32 nor qat");
  if (o.mode == "qat") {
    o.qconfig = meta(ckpt, f, "qconfig");
    const auto names = quant::QConfigRegistry().names();
    if (std::find(names.begin(), names.end(), o.qconfig) == names.end())
      throw io::CheckpointError(
          ckpt.info.source,
          "metadata 'qconfig' = '" + detail::printable(o.qconfig) + "' is not a QAT config");
  }
  o.rules = split(meta(ckpt, f, "rules"), ';');
}

/// Writes the training checkpoint (model, optimizer, data order, RNG) after `epoch`, atomically,
/// so that --resume continues exactly; returns its size in bytes.
std::int64_t save_training(const Options& o, const ModelFactory& f, nn::Module& model,
                           const quant::PrepareReport& prepared, const optim::Optimizer& opt,
                           const data::DataLoader& loader, int epoch, std::int64_t global_step) {
  io::Checkpoint ckpt = io::capture(model);
  ckpt.metadata = describe(o, f, o.mode);
  // Each quantizer's spec, each layer's config and rule, and the hint for a load that does not fit.
  ckpt.metadata.merge(quant::checkpoint_metadata(model, prepared));
  ckpt.optimizer = io::capture(opt);
  const auto st = loader.state();
  ckpt.training = io::TrainingState{.epoch = epoch,
                                    .global_step = global_step,
                                    .generators = {{"default", default_generator().state()}},
                                    .counters = {{"loader_seed", static_cast<std::int64_t>(st.seed)},
                                                 {"loader_epoch", st.epoch},
                                                 {"loader_batch", st.batch}}};
  io::save(ckpt, o.save);
  return static_cast<std::int64_t>(io::to_bytes(ckpt).size());
}

}  // namespace qat::examples
