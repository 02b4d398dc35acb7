#include "modules/quant/qconfig.h"

#include <fnmatch.h>

namespace qat::quant {

void QuantizerConfig::validate() const {
  constexpr const char* fn = "QuantizerConfig";
  spec.validate();
  QAT_REQUIRE((kind == QuantizerKind::FP8) == spec.is_fp8(), fn,
              "kind FP8 goes with FP8 specs "
              "only, got spec ",
              spec.str());
  QAT_REQUIRE((kind == QuantizerKind::MX) == spec.is_microscaled(), fn,
              "kind MX goes with E8M0 / E4M3 block-scaled (MX, NVFP4) specs only, got spec ",
              spec.str());
  QAT_REQUIRE((kind == QuantizerKind::Dynamic) == spec.dynamic, fn,
              "kind Dynamic goes with dynamic specs only, got spec ", spec.str());
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
  static const char* kinds[] = {"fake-quant", "lsq", "learnable-amax", "fp8", "mx", "dynamic"};
  return spec.str() + " " + kinds[static_cast<int>(kind)];
}

std::shared_ptr<Quantizer> make_quantizer(const QuantizerConfig& c, const Shape& tensor_shape) {
  c.validate();
  // Block-scaled and dynamic quantizers keep no per-channel state: x's shape is checked per
  // forward (activation shapes are not known here).
  if (c.kind == QuantizerKind::MX) return std::make_shared<MXFakeQuantize>(c.spec);
  if (c.kind == QuantizerKind::Dynamic) return std::make_shared<DynamicFakeQuantize>(c.spec);
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
    case QuantizerKind::MX:
    case QuantizerKind::Dynamic:
      break;
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
  // PyTorch's default QAT qconfig with full-range activations (as its qnnpack one):
  // per-channel symmetric int8 weights and affine uint8 [0, 255] activations, both with
  // moving-average observers.
  register_config(preset("int8_default", w8, a8));
  // PyTorch's get_default_qat_qconfig("fbgemm") (and "x86"): the same with reduce_range
  // activations, [0, 127] (uint7 affine): one bit of activation resolution for int8 inference
  // that AVX2 / AVX-512 without VNNI multiply in int8 quads (vpmaddubsw, exact in that range).
  const QuantizerConfig a7{.spec = QuantSpec::activation_affine(7)};
  register_config(preset("int8_fbgemm", w8, a7));
  // LSQ: scales learned after a one-batch observer estimate.
  const QuantizerConfig w8_lsq{
      .spec = QuantSpec::weight_per_channel(8), .kind = QK::LSQ, .observer = ObserverKind::MinMax};
  const QuantizerConfig a8_lsq{.spec = QuantSpec::activation_affine(8), .kind = QK::LSQ};
  register_config(preset("int8_lsq", w8_lsq, a8_lsq));
  // Narrower LSQ weights (per channel, int8 LSQ activations): int4_lsq, and int2/3/5/6 as
  // mixed-precision candidates on either side of it.
  for (const int bits : {2, 3, 4, 5, 6}) {
    QuantizerConfig w = w8_lsq;
    w.spec.bits = bits;
    register_config(preset("int" + std::to_string(bits) + "_lsq", w, a8_lsq));
  }
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
  // OCP MX (weights and activations): blocks of 32 over the dimensions from axis 1 (a Linear's
  // inputs, a conv's C x kh x kw), E8M0 scales from each block.
  auto mx = [](Format f) { return QuantizerConfig{.spec = QuantSpec::mx(f, 32, 1), .kind = QK::MX}; };
  register_config(preset("mxfp8", mx(Format::FP8_E4M3), mx(Format::FP8_E4M3)));
  register_config(preset("mxfp6", mx(Format::FP6_E2M3), mx(Format::FP6_E2M3)));
  register_config(preset("mxfp4", mx(Format::FP4_E2M1), mx(Format::FP4_E2M1)));
  register_config(preset("mxint8", mx(Format::Int), mx(Format::Int)));
  // NVFP4: blocks of 16, E4M3 block scales under a per-tensor fp32 scale from each batch.
  const QuantizerConfig nv{.spec = QuantSpec::nvfp4(16, 1), .kind = QK::MX};
  register_config(preset("nvfp4", nv, nv));
  // torchao's 8da4w: int4 symmetric weights per group of 32 inputs, int8 affine activations
  // with a range per row (token) from each batch.
  const QuantizerConfig a8_dyn{.spec = QuantSpec{.bits = 8,
                                                 .is_signed = true,
                                                 .symmetric = false,
                                                 .granularity = Granularity::PerChannel,
                                                 .axis = 0,
                                                 .dynamic = true},
                               .kind = QK::Dynamic};
  register_config(preset("int8_dyn_act_int4_weight", w4_block, a8_dyn));
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
