#include "modules/quant/mixed_precision.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>

#include "framework/tensor/error.h"
#include "modules/quant/detail/report_format.h"

namespace qat::quant {

namespace {

constexpr const char* kFn = "quant::mixed_precision";

// A partial assignment of layers 0..l: its size in bits, its summed drop, and how it was built
// (the state of layers 0..l-1 it extends and the row picked for layer l).
struct State {
  double cost = 0, drop = 0;
  std::int64_t parent = -1;
  std::size_t row = 0;
};

}  // namespace

void MixedPrecisionPlan::apply(QConfigRegistry& registry) const {
  for (const LayerChoice& c : layers) registry.set_module_name(c.layer, c.config);
}

std::vector<std::string> MixedPrecisionPlan::rules() const {
  std::vector<std::string> out;
  for (const LayerChoice& c : layers) out.push_back(c.layer + "=" + c.config);
  return out;
}

std::string MixedPrecisionPlan::table() const {
  using detail::fixed;
  std::vector<std::vector<std::string>> cells{
      {"layer", "config", "weights", "bits/weight", "predicted drop"}};
  for (const LayerChoice& c : layers)
    cells.push_back({c.layer, c.config, std::to_string(c.weights), fixed(c.bits_per_weight, 3),
                     fixed(c.predicted_drop, 4)});
  std::ostringstream s;
  s << detail::aligned(cells, 2) << "total: " << weights << " weights at " << fixed(bits_per_weight, 3)
    << " bits per weight (budget " << fixed(budget_bits_per_weight, 3) << "), predicted drop "
    << fixed(predicted_drop, 4) << "\n";
  return s.str();
}

std::string MixedPrecisionPlan::json() const {
  using detail::json_number;
  using detail::json_string;
  std::ostringstream s;
  s << "{\"budget_bits_per_weight\": " << json_number(budget_bits_per_weight)
    << ", \"bits_per_weight\": " << json_number(bits_per_weight)
    << ", \"predicted_drop\": " << json_number(predicted_drop) << ", \"weights\": " << weights
    << ", \"layers\": [";
  for (std::size_t i = 0; i < layers.size(); ++i) {
    const LayerChoice& c = layers[i];
    s << (i ? ", " : "") << "{\"layer\": " << json_string(c.layer)
      << ", \"config\": " << json_string(c.config) << ", \"weights\": " << c.weights
      << ", \"bits_per_weight\": " << json_number(c.bits_per_weight)
      << ", \"predicted_drop\": " << json_number(c.predicted_drop) << "}";
  }
  s << "]}";
  return s.str();
}

MixedPrecisionPlan mixed_precision(const SensitivityTable& table, double budget_bits_per_weight,
                                   const MixedPrecisionOptions& options) {
  QAT_REQUIRE(std::isfinite(budget_bits_per_weight) && budget_bits_per_weight > 0, kFn,
              "budget_bits_per_weight must be finite and > 0, got ", budget_bits_per_weight);
  QAT_REQUIRE(!table.rows.empty(), kFn, "table has no rows");
  const auto drop_of = [&](const SensitivityRow& r) {
    return options.metric == DropMetric::Loss ? r.loss_drop : r.accuracy_drop;
  };

  // Usable rows per layer, and each layer's weight count.
  const std::vector<std::string> layers = table.layers();
  std::vector<std::vector<std::size_t>> rows(layers.size());
  std::vector<std::int64_t> weights(layers.size(), 0);
  std::int64_t total = 0;
  for (std::size_t l = 0; l < layers.size(); ++l) {
    for (std::size_t r = 0; r < table.rows.size(); ++r) {
      const SensitivityRow& row = table.rows[r];
      if (row.layer != layers[l]) continue;
      QAT_REQUIRE(row.weights > 0 && std::isfinite(row.bits_per_weight) && row.bits_per_weight > 0, kFn,
                  "table row ", row.layer, " / ", row.config, " has weights = ", row.weights,
                  " and bits_per_weight = ", row.bits_per_weight);
      QAT_REQUIRE(weights[l] == 0 || weights[l] == row.weights, kFn, "table rows of layer ", row.layer,
                  " disagree on its weight count: ", weights[l], " and ", row.weights);
      weights[l] = row.weights;
      if (row.ok() && !std::isnan(drop_of(row))) rows[l].push_back(r);
    }
    QAT_REQUIRE(!rows[l].empty(), kFn, "layer ", layers[l],
                " has no usable row in the table (every candidate failed)");
    total += weights[l];
  }

  // min_rest[l]: the smallest size of layers l.., for pruning partial assignments that cannot fit.
  std::vector<double> min_rest(layers.size() + 1, 0);
  for (std::size_t l = layers.size(); l-- > 0;) {
    double m = std::numeric_limits<double>::infinity();
    for (std::size_t r : rows[l])
      m = std::min(m, static_cast<double>(weights[l]) * table.rows[r].bits_per_weight);
    min_rest[l] = min_rest[l + 1] + m;
  }
  const double budget = budget_bits_per_weight * static_cast<double>(total);
  const double slack = 1e-9 * budget;  // sums of bits in double: tolerate rounding only
  if (min_rest[0] > budget + slack) {
    std::ostringstream smallest;
    for (std::size_t l = 0; l < layers.size(); ++l) {
      const auto best =
          *std::min_element(rows[l].begin(), rows[l].end(), [&](std::size_t a, std::size_t b) {
            return table.rows[a].bits_per_weight < table.rows[b].bits_per_weight;
          });
      smallest << (l ? ", " : "") << layers[l] << " " << table.rows[best].config << " "
               << detail::fixed(table.rows[best].bits_per_weight, 3);
    }
    QAT_REQUIRE(false, kFn, "budget_bits_per_weight = ", budget_bits_per_weight,
                " is below the smallest size the candidates reach, ",
                detail::fixed(min_rest[0] / static_cast<double>(total), 3), " bits per weight (",
                smallest.str(), ")");
  }

  // Pareto frontier per layer: sorted by cost with strictly decreasing drop.
  std::vector<std::vector<State>> frontier(layers.size());
  std::vector<State> prev{State{}};
  for (std::size_t l = 0; l < layers.size(); ++l) {
    std::vector<State> next;
    for (std::size_t p = 0; p < prev.size(); ++p)
      for (std::size_t r : rows[l]) {
        const SensitivityRow& row = table.rows[r];
        const double cost = prev[p].cost + static_cast<double>(weights[l]) * row.bits_per_weight;
        if (cost + min_rest[l + 1] > budget + slack) continue;
        next.push_back({cost, prev[p].drop + drop_of(row), l ? static_cast<std::int64_t>(p) : -1, r});
      }
    std::sort(next.begin(), next.end(), [](const State& a, const State& b) {
      return a.cost != b.cost ? a.cost < b.cost : a.drop < b.drop;
    });
    std::vector<State> kept;
    for (const State& s : next)
      if (kept.empty() || s.drop < kept.back().drop) kept.push_back(s);
    frontier[l] = kept;
    prev = std::move(kept);
  }
  // Lowest drop: the last (largest, feasible) state of the final frontier.
  MixedPrecisionPlan plan;
  plan.budget_bits_per_weight = budget_bits_per_weight;
  plan.weights = total;
  plan.layers.resize(layers.size());
  std::int64_t at = static_cast<std::int64_t>(frontier.back().size()) - 1;
  QAT_CHECK(at >= 0, "mixed_precision: empty final frontier");
  plan.predicted_drop = frontier.back()[static_cast<std::size_t>(at)].drop;
  plan.bits_per_weight = frontier.back()[static_cast<std::size_t>(at)].cost / static_cast<double>(total);
  for (std::size_t l = layers.size(); l-- > 0;) {
    const State& s = frontier[l][static_cast<std::size_t>(at)];
    const SensitivityRow& row = table.rows[s.row];
    plan.layers[l] = {row.layer, row.config, row.weights, row.bits_per_weight, drop_of(row)};
    at = s.parent;
  }
  return plan;
}

}  // namespace qat::quant
