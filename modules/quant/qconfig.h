#pragma once
// What to quantize and how: QuantizerConfig (one tensor), QConfig (a layer's weight and
// activation), and QConfigRegistry (named presets plus per-layer rules) that prepare_qat reads.
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "modules/quant/histogram_observer.h"
#include "modules/quant/learnable_quantizer.h"
#include "modules/quant/mx_quantizer.h"
#include "modules/quant/quantizer.h"

namespace qat::quant {

enum class QuantizerKind {
  FakeQuant,      ///< FakeQuantize: observer-driven qparams, straight-through gradient
  LSQ,            ///< LearnableFakeQuantize
  LearnableAmax,  ///< LearnableAmaxFakeQuantize (PACT)
  FP8,            ///< FP8FakeQuantize (spec.format FP8_*)
  MX,             ///< MXFakeQuantize (OCP MX or NVFP4 block scales, spec.is_microscaled())
  Dynamic,        ///< DynamicFakeQuantize (spec.dynamic: qparams from each batch)
};

/// How one tensor (a weight or an activation) is quantized.
struct QuantizerConfig {
  QuantSpec spec;
  QuantizerKind kind = QuantizerKind::FakeQuant;
  ObserverKind observer = ObserverKind::MovingAverage;
  HistogramObserver::Options histogram{};        ///< for ObserverKind::Histogram
  LearnableInit init = LearnableInit::Observer;  ///< LSQ
  std::int64_t warmup_batches = 1;               ///< LSQ and LearnableAmax

  /// Throws qat::Error naming the field if the combination is invalid.
  void validate() const;
  std::string str() const;  // "int8 symmetric per-channel(axis 0) lsq"
};

/// A layer's quantization: weight and output activation configs; either may be absent
/// (weight-only or activation-only quantization).
struct QConfig {
  std::string name;
  std::optional<QuantizerConfig> weight;
  std::optional<QuantizerConfig> activation;
};

/// The quantizer module for a tensor of shape `tensor_shape` (weight shape, or the activation
/// shape with an unknown batch dimension: only the spec's axis must be right).
std::shared_ptr<Quantizer> make_quantizer(const QuantizerConfig& config, const Shape& tensor_shape);

/// Named QConfigs plus rules saying which layer gets which. Precedence: exact module name >
/// glob (`*`, `?`, `[...]`, first match in the order added) > module type > global default.
/// The reserved name "skip" keeps a layer in float.
///
///   QConfigRegistry reg;                      // presets, global "int8_default"
///   reg.set_global("int8_lsq");
///   reg.set_module_glob("features.*", "int8_default");
///   reg.set_module_name("classifier", "skip");
class QConfigRegistry {
 public:
  /// Registers the presets: int8_default, int8_lsq, int{2,3,4,5,6}_lsq, int8_pact, fp8_e4m3,
  /// int4_weight_block32, mxfp8, mxfp6, mxfp4, mxint8, nvfp4, int8_dyn_act_int4_weight; the
  /// global default is int8_default.
  QConfigRegistry();

  /// Adds a user config; throws if the name exists (unless `replace`) or is "skip".
  void register_config(const QConfig& config, bool replace = false);
  const QConfig& get(const std::string& name) const;
  bool contains(const std::string& name) const;
  /// Registered names (presets included), sorted.
  std::vector<std::string> names() const;

  void set_global(const std::string& config);
  void set_module_type(const std::string& type_name, const std::string& config);
  void set_module_glob(const std::string& pattern, const std::string& config);
  void set_module_name(const std::string& name, const std::string& config);

  struct Resolution {
    std::string config;  ///< a registered name, or "skip"
    std::string rule;    ///< "name fc1", "glob features.*", "type Linear", "global"
  };
  /// Which config a module gets, and by which rule.
  Resolution resolve(const std::string& module_name, const std::string& type_name) const;
  /// Every name, glob and type rule, labelled as Resolution::rule labels them ("name fc1", ...).
  std::vector<std::string> rules() const;

 private:
  void require_config(const std::string& config) const;

  std::map<std::string, QConfig> configs_;
  std::string global_ = "int8_default";
  std::map<std::string, std::string> by_type_, by_name_;
  std::vector<std::pair<std::string, std::string>> by_glob_;
};

}  // namespace qat::quant
