#pragma once
// Internals of convert shared by the Sequential walk (convert.cpp) and the graph path
// (convert_graph.cpp).
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "framework/nn/module.h"
#include "modules/quant/quantized_layers.h"

namespace qat::quant {
class Quantizer;
class QatLayer;
class BnFoldedLayer;

namespace detail {

/// Quantization of the value flowing; nullopt: float.
using Flow = std::optional<ActivationQuant>;

/// RAII: ConvertOptions::require_calibrated for the convert call running on this thread.
class RequireCalibrated {
 public:
  explicit RequireCalibrated(bool on);
  ~RequireCalibrated();
  RequireCalibrated(const RequireCalibrated&) = delete;
  RequireCalibrated& operator=(const RequireCalibrated&) = delete;

 private:
  bool prev_;
};

/// A Conv-BN / Linear-BN layer's batch norm folded into the weight (running statistics):
///   W' = W f, b' = (b - mean) f + beta, f = gamma / sqrt(running_var + eps)
struct Folded {
  Tensor weight, bias;
};
Folded fold(const BnFoldedLayer& layer);

/// An activation quantizer's 8-bit grid as uint8 storage (signed codes shift by 128); throws
/// naming layer `who` if there is none, it never observed data, or its spec has no int8 form.
ActivationQuant activation_quant(const std::shared_ptr<Quantizer>& q, const std::string& who);
/// The int8 layer for QAT layer `layer` whose input is quantized as `in`, and its output's
/// quantization (batch norm folded, weight int8, bias float).
std::pair<nn::ModulePtr, ActivationQuant> int8_layer(const QatLayer& layer, const ActivationQuant& in,
                                                     const std::string& who);
/// Throws unless the model holds quantizers (naming an int8 layer if it is converted already).
void require_prepared(nn::Module& model);

}  // namespace detail
}  // namespace qat::quant
