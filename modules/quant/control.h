#pragma once
// Model-wide switches over the quantizers and batch norms of a model (PyTorch's
// model.apply(torch.ao.quantization.disable_observer) and friends), and post-training
// calibration (PTQ): observe ranges in eval mode, then convert.
//
//   quant::prepare_qat(*model, registry);
//   const auto report = quant::calibrate(*model, batches);   // ranges from data, BN untouched
//   quant::convert(*model);
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "framework/nn/module.h"

namespace qat::quant {

// Each switch acts on the quantizers (or batch norms) inside the modules whose dotted name
// matches `glob` (`*`, `?`, `[...]`, `*` also matching dots; "*" is the whole model, "fc1" the
// quantizers of fc1, "features.*" everything below features), returns how many it touched, and
// throws qat::Error naming the glob when it reaches none.

/// Observers record (in training or calibration) or not.
std::int64_t enable_observers(nn::Module& model, bool on = true, const std::string& glob = "*");
std::int64_t disable_observers(nn::Module& model, const std::string& glob = "*");
/// Fake quantization on or off (off: the quantizer passes its input through).
std::int64_t enable_fake_quant(nn::Module& model, bool on = true, const std::string& glob = "*");
std::int64_t disable_fake_quant(nn::Module& model, const std::string& glob = "*");
/// Batch norm statistics frozen: ConvBn2d::freeze_bn_stats and BatchNorm2d::freeze_stats (the
/// running statistics are used and kept while the model trains). Counts fused layers and plain
/// batch norms; a ConvBn2d's own "bn" counts as its layer.
std::int64_t freeze_bn_stats(nn::Module& model, bool on = true, const std::string& glob = "*");
std::int64_t unfreeze_bn_stats(nn::Module& model, const std::string& glob = "*");
/// Quantizer::freeze_qparams: observers off and learnable scale / zero point / amax not learning.
std::int64_t freeze_qparams(nn::Module& model, bool on = true, const std::string& glob = "*");
std::int64_t unfreeze_qparams(nn::Module& model, const std::string& glob = "*");

/// What calibrate() saw.
struct CalibrationReport {
  std::int64_t batches = 0;
  std::vector<std::string> observed;    ///< dotted names of the quantizers that recorded
  std::vector<std::string> unobserved;  ///< quantizers that saw no data (convert would refuse)
  /// "calibrated on 32 batches: 7 quantizers observed, 0 unobserved" plus the unobserved names.
  std::string str() const;
};

/// Source of calibration batches: fills its argument and returns true, or returns false at the
/// end (e.g. wrapping a DataLoader, so the data set is never copied).
using BatchSource = std::function<bool(Tensor& batch)>;

/// Post-training calibration: runs model(batch) over every batch in eval mode (batch norm uses
/// and keeps its running statistics, dropout is off), without gradients, with fake quantization
/// off and every observer on, inside a CalibrationGuard: each quantizer records the float ranges
/// and sets its qparams from them (learnable ones estimate as in their warm-up). Every training,
/// fake-quant and observer flag is restored afterwards, also when a forward throws.
CalibrationReport calibrate(nn::Module& model, const BatchSource& next);
CalibrationReport calibrate(nn::Module& model, const std::vector<Tensor>& batches);

}  // namespace qat::quant
