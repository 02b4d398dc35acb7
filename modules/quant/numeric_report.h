#pragma once
// Per-layer numerics of a quantized model against its float original (PyTorch's Numeric Suite
// compare_model_outputs / compare_weights in one table): weight and activation SQNR, qparams and
// how much of the float activation falls outside the quantized range.
#include <string>
#include <vector>

#include "framework/nn/module.h"

namespace qat::quant {

/// One quantized layer. NaN marks what does not apply (a stub has no weight).
struct LayerNumerics {
  std::string name;         ///< dotted name in the quantized model ("conv1")
  std::string type;         ///< its type ("ConvBnReLU2d", "QuantizedConv2d", "QuantStub")
  std::string float_point;  ///< float module whose output is compared ("relu1" after fused conv-bn-relu)
  /// 10 log10(sum w^2 / sum (w - w_q)^2) of the float weight (BN-folded: W gamma / sqrt(var +
  /// eps) when a batch norm is fused) against the fake-quantized or dequantized int8 weight.
  double weight_sqnr_db;
  /// The same for the layer's output (int8: dequantized) against the float output at float_point.
  double activation_sqnr_db;
  double scale, zero_point;  ///< output qparams (per tensor; int8: as stored, uint8)
  double weight_scale_min, weight_scale_max;
  /// Fraction of the float activation outside [(qmin - zp) s, (qmax - zp) s].
  double saturation;
};

struct NumericReport {
  std::vector<LayerNumerics> layers;
  /// Aligned text table, one row per layer.
  std::string table() const;
  /// {"layers": [{"name": ..., "weight_sqnr_db": ..., ...}]}; NaN as null, +inf as "inf".
  std::string json() const;
};

/// Runs `batch` through both models (eval mode, no gradients; training flags restored and hooks
/// removed afterwards, also on errors) and compares every quantized layer of `quant_model` (QAT
/// layers, QuantStub and other modules with an output quantizer; int8 layers and Quantize)
/// with `float_model`, the same architecture before prepare_qat (same dotted names). The float
/// point of a layer is found by tracing `quant_model`: its output followed through the
/// nn::Identity modules that fusion left in place of a batch norm or ReLU.
NumericReport compare(nn::Module& float_model, nn::Module& quant_model, const Tensor& batch);

}  // namespace qat::quant
