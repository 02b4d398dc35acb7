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
  std::string table() const;
};

/// Turns a prepared (and trained) QAT model into an integer inference model, in place
/// (Jacob et al. 2018): QuantStub -> Quantize (float -> uint8), QuantLinear / LinearReLU ->
/// QuantizedLinear, QuantConv2d / ConvReLU2d / ConvBn2d / ConvBnReLU2d -> QuantizedConv2d (batch
/// norm folded: W' = W f, b' = (b - mean) f + beta, f = gamma / sqrt(var + eps)), ReLU ->
/// QuantizedReLU, MaxPool2d -> QuantizedMaxPool2d, Dropout -> Identity, DeQuantStub ->
/// Dequantize. Weights become int8 (symmetric, per channel or per tensor, up to 8 bits), biases
/// int32 at scale s_in * s_w, activations uint8 (8-bit signed specs are stored offset by 128).
///
/// The input quantization of each layer is followed through Sequential containers in
/// execution order. Everything is checked and built first: an unsupported layer or spec (FP8,
/// per-block, > 8 bits, a float layer inside the quantized region, a layer with no output
/// quantizer) throws an error naming the layer and leaves the model unchanged.
ConvertReport convert(nn::Module& model);

}  // namespace qat::quant
