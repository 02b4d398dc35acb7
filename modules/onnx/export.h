#pragma once
// ONNX export of a prepared (trained or calibrated) QAT model in the QDQ form that deployment
// runtimes (ONNX Runtime, TensorRT, OpenVINO) turn into integer kernels: every fake quantizer
// becomes a QuantizeLinear -> DequantizeLinear pair with its scale and zero point. Library
// qat::onnx (protobuf + the ONNX schema of Debian's libonnx-dev); built when both are found.
#include <cstdint>
#include <string>
#include <vector>

#include "framework/nn/module.h"

namespace qat::quant {

struct OnnxExportOptions {
  /// Weights as quantized initializers (int8 / int4 / fp8 codes) read through
  /// DequantizeLinear, instead of float weights through QuantizeLinear -> DequantizeLinear:
  /// the same values, a file about 4x smaller.
  bool int8_weights = false;
  /// Opset of the default domain; 0 picks the lowest that expresses the model: 13 (int8 /
  /// uint8), 19 (FP8 E4M3 / E5M2), 21 (int4 / uint4, int16 / uint16, per-block scales).
  int opset = 0;
  /// The first dimension of the input and output is the symbolic "N" (any batch size).
  bool dynamic_batch = true;
  std::string input_name = "input";
  std::string output_name = "output";
};

/// One exported module call or op.
struct OnnxExportedLayer {
  std::string name;  ///< dotted module name, or "op 'add' in block1"
  std::string type;  ///< our type (QuantConv2d, ConvBnReLU2d, ReLU, ...)
  std::string onnx;  ///< the ONNX ops written, e.g. "Conv Relu QuantizeLinear DequantizeLinear"
};

struct OnnxExportReport {
  int opset = 0;
  std::int64_t bytes = 0;  ///< size of the serialized model
  std::vector<OnnxExportedLayer> layers;
  /// What the file does differently from the QAT model, if anything (e.g. a narrow-range
  /// activation clamps one step lower in ONNX's QuantizeLinear).
  std::vector<std::string> notes;
  /// Aligned table of `layers`, then one "note: ..." line per note.
  std::string table() const;
};

/// The QDQ ONNX model of a prepared QAT model, traced once on `example_input` (nn::trace, any
/// module tree): QuantStub -> Q/DQ of the input; QAT Linear / Conv layers -> Gemm / Conv on
/// fake-quantized weights with per-channel (axis) or per-block Q/DQ, batch norm of ConvBn
/// layers folded into the conv, fused ReLU as Relu, the output quantizer as Q/DQ; functional
/// ops (quant::Add, AddReLU, Mul, Cat) -> Add / Relu / Mul / Concat with Q/DQ on the output;
/// ReLU, MaxPool2d, Flatten and reshapes on quantized values keep their input's Q/DQ, average
/// pools prepared as QuantPool re-quantize on their input's grid; float modules and ops
/// (Linear, Conv2d, BatchNorm2d, add, mul, matmul, ...) are written in float. The model is not
/// changed. Throws qat::Error, naming the layer, for a model never prepared, converted already,
/// with a quantizer that never observed data, a module or op with no ONNX form, or a spec no
/// opset expresses (or not the requested one).
std::string to_onnx(nn::Module& model, const Tensor& example_input, const OnnxExportOptions& options = {},
                    OnnxExportReport* report = nullptr);

/// to_onnx, written to `path` atomically (a temporary file renamed over it): on any error no
/// file is left and an existing file at `path` is untouched.
OnnxExportReport export_onnx(nn::Module& model, const Tensor& example_input, const std::string& path,
                             const OnnxExportOptions& options = {});

}  // namespace qat::quant
