#pragma once
// What a checkpoint of a quantized model records about its quantization, and the load hints that
// use it (io::kLoadHintKey, io::set_load_hint).
#include <map>
#include <string>
#include <vector>

#include "framework/nn/module.h"
#include "modules/quant/prepare.h"

namespace qat::quant {

/// Checkpoint metadata for a model prepared by prepare_qat (`report` is what it returned):
///   "quant.<quantizer>" -> "<type> <spec>"      (quantization_metadata)
///   "qconfig.<layer>"   -> "<config> (<rule>)"  (PrepareReport::metadata)
///   "load.hint"         -> "the checkpoint holds a QAT model (int8_default on 5 layers, int8_lsq
///                           on 1): call prepare_qat with the same registry before loading"
/// With `converted`, `model` is the QAT model an int8 checkpoint was converted from, and the hint
/// asks for prepare_qat then convert. Empty for an unprepared model (no quantizer, empty report).
/// Also registers the load hints below.
std::map<std::string, std::string> checkpoint_metadata(nn::Module& model, const PrepareReport& report,
                                                       bool converted = false);

/// "int8_default on 5 layers, int8_lsq on 1": how many layers use each config, most used first;
/// skipped layers are not counted.
std::string config_counts(const std::vector<std::string>& configs);

/// Registers (once) modules/quant's io::set_load_hint, which load_into consults on a strict load
/// with missing or unexpected tensors:
/// - a float checkpoint (no "quant.*" metadata) into a model with quantizers whose state is
///   missing: "the model is prepared for QAT but the checkpoint holds a float model: load it
///   before prepare_qat, or load with strict=false to keep fresh quantizer state";
/// - a QAT checkpoint without "load.hint" (written before it existed) into a model without
///   quantizers: the hint built from its "qconfig.*" metadata.
/// Registers the load check too (io::set_load_check): every "quant.<quantizer>" metadata entry must
/// name a known quantizer kind and a spec QuantSpec::parse accepts, and match the model's
/// quantizer of that name when it has one.
/// And the upgrade (io::set_load_upgrade) of int8 checkpoints written before the float bias: the
/// int32 bias q of a QuantizedLinear / QuantizedConv2d becomes the float q s_in s_w[o].
/// Every program that includes this header has them registered before main().
bool register_load_hints();

inline const bool kLoadHintsRegistered = register_load_hints();

}  // namespace qat::quant
