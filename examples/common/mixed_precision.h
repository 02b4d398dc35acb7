#pragma once
// --budget-bits for the example programs: sensitivity of the float model (one layer quantized at a
// time, modules/quant/sensitivity.h), then the per-layer configs that minimise the predicted loss
// increase under the bits-per-weight budget (modules/quant/mixed_precision.h), as --rule rules.
#include <string>
#include <vector>

#include "examples/common/app.h"
#include "framework/data/dataset.h"

namespace CLI {
class App;
}

namespace qat::examples {

struct MixedPrecisionOptions {
  double budget_bits = 0;  ///< --budget-bits; 0: off
  std::vector<std::string> candidates{"int8_default", "int6_lsq", "int5_lsq", "int4_lsq", "int3_lsq", "int2_lsq"};
  std::int64_t calib_batches = 8;  ///< batches of 64 from the start of the training set
  std::int64_t held_out = 2000;    ///< samples from the end of the training set
  bool enabled() const { return budget_bits > 0; }
};

/// Registers --budget-bits, --mp-candidates, --mp-calib-batches and --mp-held-out.
void add_mixed_precision_options(CLI::App& app, MixedPrecisionOptions& options);

struct MixedPrecisionResult {
  std::vector<std::string> rules;  ///< "conv1=int8_default", ... (--rule syntax)
  std::string table, plan;         ///< printable sensitivity table and chosen plan
  std::string json;                ///< {"sensitivity": {...}, "plan": {...}}
};

/// Sensitivity of `float_model` (trained, architecture `arch` of `factory`) on `train`, then the
/// plan under options.budget_bits. Throws qat::Error (naming --budget-bits) when it cannot be met.
MixedPrecisionResult plan_mixed_precision(const nn::Module& float_model, const ModelFactory& factory,
                                          const std::string& arch, const data::Dataset& train,
                                          const MixedPrecisionOptions& options);

}  // namespace qat::examples
