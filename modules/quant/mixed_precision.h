#pragma once
// Per-layer formats from a sensitivity table under a size budget: the multiple-choice knapsack
//   minimise  sum_l drop(l, c_l)   subject to   sum_l w_l bits(l, c_l) <= budget * sum_l w_l
// over one candidate c_l per layer (w_l: the layer's weight count), solved exactly.
//
//   const MixedPrecisionPlan plan = quant::mixed_precision(table, 5.0);
//   QConfigRegistry reg;
//   plan.apply(reg);                       // set_module_name(layer, config) per layer
//   quant::prepare_qat(*model, reg, example);
#include <cstdint>
#include <string>
#include <vector>

#include "modules/quant/qconfig.h"
#include "modules/quant/sensitivity.h"

namespace qat::quant {

/// Which measured drop the plan minimises.
enum class DropMetric { Loss, Accuracy };

struct MixedPrecisionOptions {
  DropMetric metric = DropMetric::Loss;
};

struct LayerChoice {
  std::string layer, config;
  std::int64_t weights = 0;
  double bits_per_weight = 0;
  double predicted_drop = 0;  ///< the table's drop (loss or accuracy, as chosen) for this pick
};

struct MixedPrecisionPlan {
  double budget_bits_per_weight = 0;
  double bits_per_weight = 0;       ///< sum_l w_l bits_l / sum_l w_l of the picks (<= the budget)
  double predicted_drop = 0;        ///< sum of the picks' drops
  std::int64_t weights = 0;         ///< sum_l w_l
  std::vector<LayerChoice> layers;  ///< in the table's layer order

  /// registry.set_module_name(layer, config) for every layer.
  void apply(QConfigRegistry& registry) const;
  /// "conv1=int8_default", ... (the examples' --rule syntax).
  std::vector<std::string> rules() const;
  /// Aligned text table of the picks, then the total bits per weight and predicted drop.
  std::string table() const;
  std::string json() const;
};

/// The picks (one row of `table` per layer, rows with an error excluded) with the smallest
/// summed drop whose weight-count-weighted mean bits per weight is at most
/// `budget_bits_per_weight`; ties go to the smaller size. Exact: a dynamic programme over the
/// layers that keeps every Pareto-optimal (size, drop) partial assignment (costs and drops
/// add up, so a dominated partial assignment never completes to a better plan than the one
/// that dominates it). Throws qat::Error naming the function and the argument: a budget that is
/// not finite and > 0, an empty table, a layer without any usable row, and a budget below the
/// smallest reachable size (the message gives that size).
MixedPrecisionPlan mixed_precision(const SensitivityTable& table, double budget_bits_per_weight,
                                   const MixedPrecisionOptions& options = {});

}  // namespace qat::quant
