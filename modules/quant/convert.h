#pragma once
#include <string>
#include <vector>

#include "framework/nn/module.h"

namespace qat::quant {

/// One row of convert()'s report.
struct ConvertedLayer {
  std::string name, from_type, to_type;
};

struct ConvertReport {
  std::vector<ConvertedLayer> layers;
  std::vector<std::string> notes;  ///< e.g. the model returns int8 values
  /// Aligned table of `layers`, then one "note: ..." line per note.
  std::string table() const;
};

struct ConvertOptions {
  /// Every quantizer must have observed data (trained or calibrated). false builds the int8
  /// structure from fresh quantizers, for loading an int8 checkpoint into it.
  bool require_calibrated = true;
};

/// Turns a prepared (and trained) QAT model into an integer inference model, in place
/// (Jacob et al. 2018): QuantStub -> Quantize (float -> uint8), QuantLinear / LinearReLU /
/// LinearBn1d / LinearBnReLU1d -> QuantizedLinear, QuantConv2d / ConvReLU2d / ConvBn2d / ConvBnReLU2d ->
/// QuantizedConv2d (batch norm folded: W' = W f, b' = (b - mean) f + beta, f = gamma / sqrt(var + eps)),
/// ReLU -> QuantizedReLU, MaxPool2d -> QuantizedMaxPool2d, Dropout -> Identity, DeQuantStub ->
/// Dequantize. Weights become int8 (symmetric, per channel or per tensor, up to 8 bits), biases
/// stay float (added in the float output stage), activations uint8 (8-bit signed specs are stored offset
/// by 128).
///
/// The input quantization of each layer is followed through Sequential containers in
/// execution order. Everything is checked and built first: an unsupported layer or spec (FP8,
/// per-block, > 8 bits, a float layer inside the quantized region, a layer with no output
/// quantizer) throws an error naming the layer and leaves the model unchanged.
/// Throws, naming the layer, when a quantizer never observed data (an untrained or uncalibrated
/// model), and when the model was never prepared (or is converted already).
ConvertReport convert(nn::Module& model, const ConvertOptions& options = {});

/// The same for any Module tree and forward function: the model is traced once on
/// `example_input` (nn::trace) and the quantization of every value follows the data flow, through
/// branches, skips and reused modules. QuantStub starts a quantized region, DeQuantStub ends it;
/// QAT layers, functional ops (quant::Add, ...) and pass-through modules (ReLU, MaxPool2d,
/// Dropout, Flatten, Identity, reshape ops) get int8 versions; a float module or op reading int8
/// values, a QAT layer reading float values, or a module called on differently quantized inputs
/// is an error naming it, and the model is left unchanged.
ConvertReport convert(nn::Module& model, const Tensor& example_input,
                      const ConvertOptions& options = {});

}  // namespace qat::quant
