#pragma once
// Per-layer sensitivity to quantization (the analysis behind AIMET's and ModelOpt's automatic
// mixed precision): each quantizable layer is quantized alone, at each candidate config, with the
// rest of the model in float, calibrated (PTQ) and evaluated on held-out batches against the
// float model.
//
//   auto build = [] { return make_model(); };               // a fresh float model, same names
//   SensitivityTable t = quant::sensitivity(*model, build, calib, held_out,
//                                           {"int8_default", "int4_lsq", "fp8_e4m3"});
//   std::cerr << t.table();                                 // then quant::mixed_precision(t, 5.0)
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "framework/data/dataloader.h"
#include "framework/nn/module.h"
#include "modules/quant/qconfig.h"

namespace qat::quant {

/// Bits per weight of a layer whose weight of `weight_shape` is quantized as `config` says:
/// element bits (the spec's bits; 8 for FP8) plus the shared parameters spread over the weights
/// that share them: one fp32 scale (32 bits) per tensor, per channel (numel / shape[axis]
/// weights) or per block (block_size weights; with double quantization block_scale_bits per block
/// instead), and the zero point (the element bits) per group for an affine spec. A config
/// without a weight quantizer (activation-only) and "skip" keep fp32 weights: 32.
///   int4 per-channel, conv 16x1x5x5: 4 + 32/25 = 5.28;   int4 per-block 32: 4 + 32/32 = 5
double bits_per_weight(const QConfig& config, const Shape& weight_shape);

/// One (layer, candidate config) measurement. Drops are quantized minus float: positive is worse.
struct SensitivityRow {
  std::string layer;       ///< dotted name of the quantizable layer ("conv1")
  std::string config;      ///< registry config name ("int4_lsq")
  std::int64_t weights;    ///< number of weights of the layer
  double bits_per_weight;  ///< as bits_per_weight() counts
  double loss_drop;        ///< mean cross-entropy (quantized) - mean cross-entropy (float)
  double accuracy_drop;    ///< accuracy (float) - accuracy (quantized), in [−1, 1]
  double output_sqnr_db;   ///< 10 log10(sum f^2 / sum (f - q)^2) of the logits over all batches
  std::string error;       ///< why the config does not apply to the layer (then the numbers are NaN)
  bool ok() const { return error.empty(); }
};

struct SensitivityTable {
  double float_loss = 0, float_accuracy = 0;  ///< the float model on the held-out batches
  std::int64_t eval_samples = 0;
  std::vector<SensitivityRow> rows;  ///< layer-major, candidates in the order given
  /// The layers in model order (each appears once).
  std::vector<std::string> layers() const;
  /// Aligned text table: layer, weights, config, bits/weight, loss drop, accuracy drop, SQNR.
  std::string table() const;
  /// {"float_loss": ..., "float_accuracy": ..., "eval_samples": ..., "rows": [{...}]}; NaN as null.
  std::string json() const;
};

struct SensitivityOptions {
  /// Where the candidate names are looked up (user configs may be registered in it); its rules
  /// are ignored: each measurement uses global "skip" plus one name rule.
  QConfigRegistry registry{};
  /// Only these layers (dotted names); empty: every layer with a weight that prepare_qat
  /// quantizes under `registry` as given (its global default and rules).
  std::vector<std::string> layers{};
};

/// Quantizes each layer of `model` alone at each of `candidates` (registry config names), on a
/// copy: `build()` must return a fresh float model of the same architecture (same dotted names);
/// `model`'s parameters and buffers are copied into it, it is prepared with prepare_qat (traced
/// on the first calibration batch), calibrated with calibrate() on `calibration_batches`, and
/// evaluated (eval mode, no gradients) on `eval_batches` against the float model. `model` itself
/// is not changed. A candidate that does not fit a layer (e.g. a block size that does not divide
/// its input) gives a row with `error` set. Throws qat::Error naming the argument for an empty
/// batch list, an unknown candidate, or a layer name that is not a quantizable layer.
SensitivityTable sensitivity(const nn::Module& model, const std::function<nn::ModulePtr()>& build,
                             const std::vector<Tensor>& calibration_batches,
                             const std::vector<data::Batch>& eval_batches,
                             const std::vector<std::string>& candidates,
                             const SensitivityOptions& options = {});

}  // namespace qat::quant
