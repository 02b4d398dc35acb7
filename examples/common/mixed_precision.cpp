#include "examples/common/mixed_precision.h"

#include <CLI/CLI.hpp>

#include "framework/data/dataloader.h"
#include "modules/quant/mixed_precision.h"
#include "modules/quant/qconfig.h"
#include "modules/quant/sensitivity.h"

namespace qat::examples {

void add_mixed_precision_options(CLI::App& app, MixedPrecisionOptions& o) {
  auto* budget =
      app.add_option("--budget-bits", o.budget_bits,
                     "mixed precision: with --load FP32_CHECKPOINT, measure each layer's sensitivity "
                     "to each --mp-candidates config and QAT-train the per-layer configs with the "
                     "smallest predicted loss increase within this many bits per weight (scales "
                     "counted)")
          ->check(CLI::Range(1.0, 32.0));
  app.add_option("--mp-candidates", o.candidates,
                 "with --budget-bits: candidate configs (registry names)")
      ->delimiter(',')
      ->check(CLI::IsMember(quant::QConfigRegistry().names()))
      ->needs(budget)
      ->capture_default_str();
  app.add_option("--mp-calib-batches", o.calib_batches,
                 "with --budget-bits: calibration batches of 64 (start of the training set)")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{100000}))
      ->needs(budget)
      ->capture_default_str();
  app.add_option("--mp-held-out", o.held_out,
                 "with --budget-bits: samples (end of the training set) the drops are measured on")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1000000}))
      ->needs(budget)
      ->capture_default_str();
}

MixedPrecisionResult plan_mixed_precision(const nn::Module& float_model, const ModelFactory& factory,
                                          const std::string& arch, const data::Dataset& train,
                                          const MixedPrecisionOptions& o) {
  const std::int64_t n = train.size();
  const std::int64_t held = std::min(o.held_out, n);
  std::vector<Tensor> calib;
  data::DataLoader head(first(train, std::min(n, o.calib_batches * 64)),
                        {.batch_size = 64, .shuffle = false, .flatten = factory.flatten_input});
  for (const data::Batch& b : head) calib.push_back(b.images);
  const data::Dataset tail{train.images.rows(n - held, n), train.labels.rows(n - held, n),
                           train.num_classes};
  std::vector<data::Batch> eval;
  data::DataLoader tail_loader(tail,
                               {.batch_size = 500, .shuffle = false, .flatten = factory.flatten_input});
  for (const data::Batch& b : tail_loader) eval.push_back(b);

  const quant::SensitivityTable table = quant::sensitivity(
      float_model, [&] { return factory.build(arch); }, calib, eval, o.candidates);
  quant::MixedPrecisionPlan plan;
  try {
    plan = quant::mixed_precision(table, o.budget_bits);
  } catch (const Error& e) {
    throw Error(std::string("--budget-bits: ") + e.what());
  }
  return {plan.rules(), table.table(), plan.table(),
          "{\"sensitivity\": " + table.json() + ", \"plan\": " + plan.json() + "}"};
}

}  // namespace qat::examples
