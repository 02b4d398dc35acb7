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

/// What flows between layers: int8 values with their quantization (`q`), or float values, which
/// the next layer quantizes on the fly with `dynamic` when that is set (a dynamic activation
/// quantizer produced them: DynamicQuantizedLinear reads them).
struct Flow {
  std::optional<ActivationQuant> q;
  std::optional<QuantSpec> dynamic;
  Flow() = default;
  Flow(std::nullopt_t) {}
  Flow(const ActivationQuant& a) : q(a) {}
  static Flow dynamic_spec(const QuantSpec& spec) {
    Flow f;
    f.dynamic = spec;
    return f;
  }
  /// int8 values
  explicit operator bool() const { return q.has_value(); }
  bool has_value() const { return q.has_value(); }
  const ActivationQuant& operator*() const { return *q; }
  void reset() { *this = Flow(); }
};

/// RAII: ConvertOptions::require_calibrated for the convert call running on this thread.
class RequireCalibrated {
 public:
  explicit RequireCalibrated(bool on);
  ~RequireCalibrated();
  /// Whether the convert running on this thread requires calibrated quantizers.
  static bool active();
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

/// Refuses a tensor holding NaN / inf, naming layer `who`, the tensor (`what` + `note`) and the value.
void require_finite(const Tensor& t, const std::string& who, const char* what, const char* note);
/// An activation quantizer's 8-bit grid as uint8 storage (signed codes shift by 128); throws
/// naming layer `who` if there is none, it never observed data, or its spec has no int8 form.
ActivationQuant activation_quant(const std::shared_ptr<Quantizer>& q, const std::string& who);
/// The int8 layer for QAT layer `layer` whose input is quantized as `in`, and its output's
/// quantization (batch norm folded, weight int8, bias float).
std::pair<nn::ModulePtr, ActivationQuant> int8_layer(const QatLayer& layer, const ActivationQuant& in,
                                                     const std::string& who);
/// Whether QAT layer `layer` takes the dynamic int8 path (DynamicQuantizedLinear): its input is
/// dynamically quantized, its output quantizer is dynamic, or its weight has a scale per block of
/// inputs.
bool needs_dynamic(const QatLayer& layer, const Flow& in);
/// The DynamicQuantizedLinear for `layer` reading `in`, and its output flow; throws naming `who`
/// for a convolution or a spec without an int8 form.
std::pair<nn::ModulePtr, Flow> dynamic_layer(const QatLayer& layer, const Flow& in,
                                             const std::string& who);
/// The flow a dynamic activation quantizer produces (its spec checked, naming `who`).
Flow dynamic_flow(const std::shared_ptr<Quantizer>& q, const std::string& who);
/// Whether `q` is a dynamic activation quantizer.
bool is_dynamic(const std::shared_ptr<Quantizer>& q);

/// Throws unless the model holds quantizers (naming an int8 layer if it is converted already).
void require_prepared(nn::Module& model);

}  // namespace detail
}  // namespace qat::quant
