#pragma once
#include <map>
#include <string>
#include <vector>

#include "framework/nn/module.h"
#include "modules/quant/fuse.h"
#include "modules/quant/qconfig.h"

namespace qat::quant {

struct PrepareOptions {
  /// Fuse Conv2d-BatchNorm2d(-ReLU), Conv2d-ReLU, Linear-BatchNorm1d(-ReLU) and Linear-ReLU runs
  /// (the fused ReLU /
  /// BatchNorm positions become Identity): found in the graph when prepare_qat gets an example
  /// input, else inside Sequential containers by position.
  bool fuse = true;
  /// More runs to fuse, by dotted names (as fuse_modules), on top of the ones found.
  std::vector<FusionGroup> fuse_groups = {};
  /// Registry rules that match no quantizable module are an error instead of a warning.
  bool strict = false;
};

/// One row of prepare_qat's report.
struct PreparedLayer {
  std::string name;       ///< dotted module name, e.g. "net.1"
  std::string from_type;  ///< "Linear", "Conv2d+BatchNorm2d+ReLU", "QuantStub"
  std::string to_type;    ///< "LinearReLU", ... or "(float)" when skipped
  std::string config;     ///< registry config name, or "skip"
  std::string rule;    ///< which rule chose it: "name fc1", "glob features.*", "type Linear", "global"
  std::string weight;  ///< weight quantizer, "float" or "-"
  std::string activation;  ///< output quantizer or "float"
  std::vector<std::string> absorbed;  ///< modules fused into this one (now Identity)
};

struct PrepareReport {
  std::vector<PreparedLayer> layers;
  /// Registry rules ("name fc1", "glob features.*", "type Linear") that chose no module.
  std::vector<std::string> unmatched_rules;
  /// Things a user should look at: float modules left between quantized layers, runs that were
  /// not fused and why, replaced modules still referenced from elsewhere, unmatched rules.
  std::vector<std::string> warnings;
  /// Aligned text table of `layers`, then one "warning: ..." line per warning.
  std::string table() const;
  /// For checkpoint metadata: "qconfig.<layer>" -> "<config> (<rule>)".
  std::map<std::string, std::string> metadata() const;
};

/// A description of every quantizer in `model` for checkpoint metadata:
/// "quant.<dotted name>" -> "<type> <spec>", e.g. "quant.fc1.weight_fake_quant" ->
/// "FakeQuantize int8 symmetric per-channel(axis 0)".
std::map<std::string, std::string> quantization_metadata(nn::Module& model);

/// Swaps every Linear, Conv2d and QuantStub of `model` in place for its QAT version with the
/// quantizers its QConfig asks for (fusing as `options` say), gives functional ops (quant::Add,
/// ...) their output quantizer, and returns which layer got which config. If anything fails
/// (a config that does not fit a layer, e.g. a block size that does not divide its weight; a
/// strict-mode unmatched rule) the error names the layer and the model is left unchanged.
/// Throws if the model was prepared already. Without an example input, fusion happens in
/// Sequential containers only (the report warns about unfused Conv2d/BatchNorm2d siblings
/// elsewhere).
PrepareReport prepare_qat(nn::Module& model, const QConfigRegistry& registry,
                          const PrepareOptions& options = {});

/// The same for any Module tree and forward: the model is traced once on `example_input`
/// (nn::trace) and fusion follows the graph (Conv-BN-ReLU wherever the data flows that way,
/// modules called once). After the swap the model is traced again: if its forward still calls
/// a replaced module (a shared_ptr member kept before prepare; hold children as nn::Child), or
/// calls a quantized layer twice on different inputs, the swap is undone and the error says so.
/// The report flags every float module or op left between quantized ones.
PrepareReport prepare_qat(nn::Module& model, const QConfigRegistry& registry,
                          const Tensor& example_input, const PrepareOptions& options = {});

}  // namespace qat::quant
