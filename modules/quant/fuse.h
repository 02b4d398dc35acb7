#pragma once
// Module fusion (PyTorch's fuse_modules): Conv2d-BatchNorm2d(-ReLU), Conv2d-ReLU,
// Linear-BatchNorm1d(-ReLU) and Linear-ReLU runs become one layer (ConvBn2d / ConvBnReLU2d /
// ConvReLU2d / LinearBn1d / LinearBnReLU1d / LinearReLU without quantizers,
// float until prepare_qat gives them quantizers); the absorbed modules become nn::Identity, so a
// forward that calls them by name (nn::Child) still runs. prepare_qat finds the runs itself, in
// Sequential containers by position, anywhere in the graph when given an example input; this
// is the explicit form.
#include <string>
#include <vector>

#include "framework/nn/module.h"

namespace qat::quant {

/// Dotted names of modules that run one after the other, e.g. {"conv1", "bn1", "relu1"}.
using FusionGroup = std::vector<std::string>;

/// What one fusion did.
struct FusedGroup {
  FusionGroup names;
  std::string type;  ///< "ConvBnReLU2d", ...
};

/// Fuses each group in place. Patterns: {Conv2d, BatchNorm2d}, {Conv2d, BatchNorm2d, ReLU},
/// {Conv2d, ReLU}, {Linear, BatchNorm1d}, {Linear, BatchNorm1d, ReLU}, {Linear, ReLU}. Everything
/// is checked first (names exist, types match a pattern, no module in two groups, the batch norm
/// over the layer's output channels): on error the model is
/// unchanged and the message names the group and the module.
std::vector<FusedGroup> fuse_modules(nn::Module& model, const std::vector<FusionGroup>& groups);


}  // namespace qat::quant
