#include "modules/quant/qconfig.h"

#include <fnmatch.h>

namespace qat::quant {

void QuantizerConfig::validate() const {
  constexpr const char* fn = "QuantizerConfig";
  spec.validate();
  QAT_REQUIRE((kind == QuantizerKind::FP8) == spec.is_float(), fn,
              "kind FP8 goes with FP8 specs "
              "only, got spec ",
              spec.str());
  QAT_REQUIRE(kind != QuantizerKind::LSQ || spec.granularity != Granularity::PerBlock, fn,
              "LSQ supports per-tensor and per-channel specs, got ", spec.str());
  QAT_REQUIRE(kind != QuantizerKind::LearnableAmax ||
                  (spec.symmetric && spec.granularity != Granularity::PerBlock),
              fn, "LearnableAmax needs a symmetric per-tensor or per-channel spec, got ", spec.str());
  QAT_REQUIRE(observer != ObserverKind::Histogram || spec.granularity == Granularity::PerTensor, fn,
              "the histogram observer is per-tensor, got spec ", spec.str());
  QAT_REQUIRE(warmup_batches >= 1, fn, "warmup_batches must be >= 1, got ", warmup_batches);
}

std::string QuantizerConfig::str() const {
  static const char* kinds[] = {"fake-quant", "lsq", "learnable-amax", "fp8"};
  return spec.str() + " " + kinds[static_cast<int>(kind)];
}

std::shared_ptr<Quantizer> make_quantizer(const QuantizerConfig& c, const Shape& tensor_shape) {
  c.validate();
  c.spec.validate_for(tensor_shape, "make_quantizer");
  Shape params{1};
  if (c.spec.granularity == Granularity::PerChannel) params = Shape{tensor_shape.at(c.spec.axis)};
  if (c.spec.granularity == Granularity::PerBlock) {
    params = tensor_shape;
    const int a = tensor_shape.axis(c.spec.axis, "make_quantizer");
    params[a] = tensor_shape[a] / c.spec.block_size;
  }
  std::shared_ptr<Observer> obs = c.observer == ObserverKind::Histogram
                                      ? std::make_shared<HistogramObserver>(c.spec, c.histogram)
                                      : make_observer(c.observer, c.spec, params);
  switch (c.kind) {
    case QuantizerKind::FakeQuant:
      return std::make_shared<FakeQuantize>(c.spec, obs, params);
    case QuantizerKind::LSQ:
      return std::make_shared<LearnableFakeQuantize>(
          c.spec, obs, params,
          LearnableFakeQuantize::Options{.init = c.init, .warmup_batches = c.warmup_batches});
    case QuantizerKind::LearnableAmax:
      return std::make_shared<LearnableAmaxFakeQuantize>(c.spec, obs, params, c.warmup_batches);
    case QuantizerKind::FP8:
      return std::make_shared<FP8FakeQuantize>(c.spec, obs, params);
  }
  return nullptr;
}

namespace {
QConfig preset(std::string name, std::optional<QuantizerConfig> w, std::optional<QuantizerConfig> a) {
  return QConfig{std::move(name), std::move(w), std::move(a)};
}
}  // namespace

QConfigRegistry::QConfigRegistry() {
  using QK = QuantizerKind;
  const QuantizerConfig w8{.spec = QuantSpec::weight_per_channel(8)};
  const QuantizerConfig a8{.spec = QuantSpec::activation_affine(8)};
  // PyTorch's default QAT qconfig: per-channel symmetric int8 weights and affine uint8
  // activations, both with moving-average observers.
  register_config(preset("int8_default", w8, a8));
  // LSQ: scales learned after a one-batch observer estimate.
  const QuantizerConfig w8_lsq{
      .spec = QuantSpec::weight_per_channel(8), .kind = QK::LSQ, .observer = ObserverKind::MinMax};
  const QuantizerConfig a8_lsq{.spec = QuantSpec::activation_affine(8), .kind = QK::LSQ};
  register_config(preset("int8_lsq", w8_lsq, a8_lsq));
  QuantizerConfig w4_lsq = w8_lsq;
  w4_lsq.spec.bits = 4;
  register_config(preset("int4_lsq", w4_lsq, a8_lsq));
  // PACT-style learnable clipping [-amax, amax] of signed symmetric int8 activations (signed, so
  // that inputs and logits keep their sign), with int8 per-channel weights.
  const QuantizerConfig a8_pact{.spec = QuantSpec{.bits = 8, .is_signed = true, .symmetric = true},
                                .kind = QK::LearnableAmax};
  register_config(preset("int8_pact", w8, a8_pact));
  const QuantizerConfig w_fp8{.spec = QuantSpec::fp8(Format::FP8_E4M3, Granularity::PerChannel, 0),
                              .kind = QK::FP8,
                              .observer = ObserverKind::MinMax};
  const QuantizerConfig a_fp8{.spec = QuantSpec::fp8(Format::FP8_E4M3), .kind = QK::FP8};
  register_config(preset("fp8_e4m3", w_fp8, a_fp8));
  // Weight-only 4-bit, one scale per 32 inputs (per-block along the last axis).
  const QuantizerConfig w4_block{.spec = QuantSpec::weight_per_block(4, 32, -1),
                                 .observer = ObserverKind::MinMax};
  register_config(preset("int4_weight_block32", w4_block, std::nullopt));
}

void QConfigRegistry::register_config(const QConfig& config, bool replace) {
  constexpr const char* fn = "QConfigRegistry::register_config";
  QAT_REQUIRE(!config.name.empty() && config.name != "skip", fn, "invalid config name '", config.name,
              "' (\"skip\" is reserved)");
  QAT_REQUIRE(replace || !configs_.count(config.name), fn, "a config named '", config.name,
              "' exists already (pass replace = true to overwrite it)");
  if (config.weight) config.weight->validate();
  if (config.activation) config.activation->validate();
  configs_[config.name] = config;
}

const QConfig& QConfigRegistry::get(const std::string& name) const {
  auto it = configs_.find(name);
  if (it == configs_.end()) {
    std::string known;
    for (const auto& n : names()) known += (known.empty() ? "" : ", ") + n;
    throw Error("QConfigRegistry::get: no config named '" + name + "' (known: " + known + ")");
  }
  return it->second;
}

bool QConfigRegistry::contains(const std::string& name) const { return configs_.count(name) > 0; }

std::vector<std::string> QConfigRegistry::names() const {
  std::vector<std::string> out;
  for (const auto& [n, c] : configs_) out.push_back(n);
  return out;
}

void QConfigRegistry::require_config(const std::string& config) const {
  if (config != "skip") get(config);  // throws naming the known configs
}

void QConfigRegistry::set_global(const std::string& config) {
  require_config(config);
  global_ = config;
}

void QConfigRegistry::set_module_type(const std::string& type_name, const std::string& config) {
  require_config(config);
  by_type_[type_name] = config;
}

void QConfigRegistry::set_module_glob(const std::string& pattern, const std::string& config) {
  require_config(config);
  QAT_REQUIRE(!pattern.empty(), "QConfigRegistry::set_module_glob", "empty pattern");
  by_glob_.emplace_back(pattern, config);
}

void QConfigRegistry::set_module_name(const std::string& name, const std::string& config) {
  require_config(config);
  by_name_[name] = config;
}

QConfigRegistry::Resolution QConfigRegistry::resolve(const std::string& module_name,
                                                     const std::string& type_name) const {
  if (auto it = by_name_.find(module_name); it != by_name_.end())
    return {it->second, "name " + module_name};
  for (const auto& [pattern, config] : by_glob_)
    if (fnmatch(pattern.c_str(), module_name.c_str(), 0) == 0) return {config, "glob " + pattern};
  if (auto it = by_type_.find(type_name); it != by_type_.end()) return {it->second, "type " + type_name};
  return {global_, "global"};
}

std::vector<std::string> QConfigRegistry::rules() const {
  std::vector<std::string> out;
  for (const auto& [name, config] : by_name_) out.push_back("name " + name);
  for (const auto& [pattern, config] : by_glob_) out.push_back("glob " + pattern);
  for (const auto& [type, config] : by_type_) out.push_back("type " + type);
  return out;
}

}  // namespace qat::quant
