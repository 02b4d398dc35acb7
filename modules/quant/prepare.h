#pragma once
#include <map>
#include <string>
#include <vector>

#include "framework/nn/module.h"
#include "modules/quant/qconfig.h"

namespace qat::quant {

struct PrepareOptions {
  /// Fuse Conv2d-BatchNorm2d(-ReLU), Conv2d-ReLU and Linear-ReLU runs inside Sequential
  /// containers (the fused ReLU / BatchNorm positions become Identity).
  bool fuse = true;
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
};

struct PrepareReport {
  std::vector<PreparedLayer> layers;
  /// Aligned text table of `layers`.
  std::string table() const;
  /// For checkpoint metadata: "qconfig.<layer>" -> "<config> (<rule>)".
  std::map<std::string, std::string> metadata() const;
};

/// A description of every quantizer in `model` for checkpoint metadata:
/// "quant.<dotted name>" -> "<type> <spec>", e.g. "quant.fc1.weight_fake_quant" ->
/// "FakeQuantize int8 symmetric per-channel(axis 0)".
std::map<std::string, std::string> quantization_metadata(nn::Module& model);

/// Swaps every Linear, Conv2d and QuantStub of `model` in place for its QAT version with the
/// quantizers its QConfig asks for (fusing as `options` say), and returns which layer got
/// which config. All replacements are built first: if any layer's config does not fit (e.g. a
/// block size that does not divide its weight), the error names the layer and the model is left
/// unchanged. Throws if the model was prepared already.
PrepareReport prepare_qat(nn::Module& model, const QConfigRegistry& registry,
                          const PrepareOptions& options = {});

}  // namespace qat::quant
