// Sensitivity analysis (one layer quantized at a time) and the mixed-precision knapsack.
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <functional>

#include "common/errors.h"
#include "framework/io/restore.h"
#include "framework/nn/nn.h"
#include "framework/tensor/random.h"
#include "modules/quant/quant.h"

using namespace qat;
using namespace qat::quant;
using test::error_of;
namespace tt = boost::test_tools;

namespace {

nn::ModulePtr small_cnn() {
  auto net = std::make_shared<nn::Sequential>();
  net->push_back("quant", std::make_shared<QuantStub>());
  net->push_back("conv1", std::make_shared<nn::Conv2d>(2, 6, 3, Conv2dParams{.padding = {1, 1}}));
  net->push_back("bn1", std::make_shared<nn::BatchNorm2d>(6));
  net->push_back("relu1", std::make_shared<nn::ReLU>());
  net->push_back("pool", std::make_shared<nn::MaxPool2d>(2));
  net->push_back("flatten", std::make_shared<nn::Flatten>());
  net->push_back("fc", std::make_shared<nn::Linear>(6 * 4 * 4, 3));
  net->push_back("dequant", std::make_shared<DeQuantStub>());
  return net;
}

data::Batch batch(std::uint64_t seed, std::int64_t n = 16) {
  Generator gen(seed);
  Tensor labels = Tensor::empty(Shape{n}, DType::Int64);
  for (std::int64_t i = 0; i < n; ++i) labels.data<std::int64_t>()[i] = i % 3;
  return {Tensor::uniform(Shape{n, 2, 8, 8}, 0, 1, gen), labels};
}

SensitivityRow row(const std::string& layer, const std::string& config, std::int64_t weights,
                   double bits, double loss_drop) {
  return {layer, config, weights, bits, loss_drop, loss_drop / 10, 0.0, ""};
}

// Every assignment, for comparison with the knapsack: the lowest drop within the budget.
double brute_force(const SensitivityTable& t, double budget) {
  const auto layers = t.layers();
  std::vector<std::vector<const SensitivityRow*>> rows(layers.size());
  std::int64_t total = 0;
  for (std::size_t l = 0; l < layers.size(); ++l) {
    for (const auto& r : t.rows)
      if (r.layer == layers[l] && r.ok()) rows[l].push_back(&r);
    total += rows[l].front()->weights;
  }
  double best = INFINITY;
  std::function<void(std::size_t, double, double)> go = [&](std::size_t l, double cost, double drop) {
    if (l == layers.size()) {
      if (cost <= budget * static_cast<double>(total) * (1 + 1e-12)) best = std::min(best, drop);
      return;
    }
    for (const auto* r : rows[l])
      go(l + 1, cost + static_cast<double>(r->weights) * r->bits_per_weight, drop + r->loss_drop);
  };
  go(0, 0, 0);
  return best;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(quant_sensitivity)

BOOST_AUTO_TEST_CASE(bits_per_weight_counts_scales) {
  const QConfigRegistry reg;
  // int4 per-channel: 4 + 32 / (1*5*5) for a 16x1x5x5 conv weight; 4 + 32/1568 for the fc.
  BOOST_TEST(bits_per_weight(reg.get("int4_lsq"), Shape{16, 1, 5, 5}) == 4 + 32.0 / 25,
             tt::tolerance(1e-12));
  BOOST_TEST(bits_per_weight(reg.get("int4_lsq"), Shape{10, 1568}) == 4 + 32.0 / 1568,
             tt::tolerance(1e-12));
  BOOST_TEST(bits_per_weight(reg.get("int8_default"), Shape{10, 64}) == 8.5, tt::tolerance(1e-12));
  BOOST_TEST(bits_per_weight(reg.get("fp8_e4m3"), Shape{10, 64}) == 8.5, tt::tolerance(1e-12));
  // int4 per block of 32 with an fp32 scale each: 5 bits.
  BOOST_TEST(bits_per_weight(reg.get("int4_weight_block32"), Shape{10, 64}) == 5.0,
             tt::tolerance(1e-12));
  // double quantization: 8-bit block scales -> 4 + 8/32
  QConfig dq{"dq", QuantizerConfig{.spec = QuantSpec::weight_per_block(4, 32, -1, 8)}, std::nullopt};
  BOOST_TEST(bits_per_weight(dq, Shape{10, 64}) == 4.25, tt::tolerance(1e-12));
  // affine per-tensor int8 weights: scale and an 8-bit zero point for the whole tensor
  QConfig affine{"affine",
                 QuantizerConfig{.spec = QuantSpec{.bits = 8, .is_signed = true, .symmetric = false}},
                 std::nullopt};
  BOOST_TEST(bits_per_weight(affine, Shape{10, 4}) == 8 + 40.0 / 40, tt::tolerance(1e-12));
  BOOST_TEST(bits_per_weight(QConfig{"act_only", std::nullopt, reg.get("int8_default").activation},
                             Shape{10, 4}) == 32.0);
}

BOOST_AUTO_TEST_CASE(mixed_precision_known_optimum) {
  // Equal layers, 8 or 4 bits; a budget of 6 bits allows one int8 layer: the most sensitive (a).
  SensitivityTable t;
  t.rows = {row("a", "int8", 100, 8, 0.0), row("a", "int4", 100, 4, 1.0), row("b", "int8", 100, 8, 0.0),
            row("b", "int4", 100, 4, 0.1), row("c", "int8", 100, 8, 0.0), row("c", "int4", 100, 4, 0.2)};
  const MixedPrecisionPlan p = mixed_precision(t, 6.0);
  BOOST_TEST(p.rules() == (std::vector<std::string>{"a=int8", "b=int4", "c=int4"}), tt::per_element());
  BOOST_TEST(p.predicted_drop == 0.3, tt::tolerance(1e-12));
  BOOST_TEST(p.bits_per_weight == 16.0 / 3, tt::tolerance(1e-12));
  // Greedy by the largest saving fails here: the big layer's int8 saves the most (0.5) but
  // fills the room (1200 bits above all-int4); the two small int8 layers save 0.7.
  SensitivityTable g;
  g.rows = {row("big", "int8", 300, 8, 0.0), row("big", "int4", 300, 4, 0.5),
            row("s1", "int8", 100, 8, 0.0),  row("s1", "int4", 100, 4, 0.35),
            row("s2", "int8", 100, 8, 0.0),  row("s2", "int4", 100, 4, 0.35)};
  const MixedPrecisionPlan q = mixed_precision(g, 6.4);
  BOOST_TEST(q.rules() == (std::vector<std::string>{"big=int4", "s1=int8", "s2=int8"}),
             tt::per_element());
  BOOST_TEST(q.predicted_drop == 0.5, tt::tolerance(1e-12));
  // Accuracy as the metric: row() sets accuracy_drop = loss_drop / 10.
  BOOST_TEST(mixed_precision(t, 6.0, {.metric = DropMetric::Accuracy}).predicted_drop == 0.03,
             tt::tolerance(1e-12));
  // A generous budget takes the lowest drop everywhere; ties go to the smaller size.
  SensitivityTable tie;
  tie.rows = {row("a", "int8", 10, 8, 0.0), row("a", "fp8", 10, 8.5, 0.0), row("a", "int4", 10, 4, 0.0)};
  BOOST_TEST(mixed_precision(tie, 32).rules() == (std::vector<std::string>{"a=int4"}),
             tt::per_element());
}

BOOST_AUTO_TEST_CASE(mixed_precision_matches_brute_force_and_respects_budget) {
  Generator gen(7);
  for (int trial = 0; trial < 40; ++trial) {
    SensitivityTable t;
    const char* names[] = {"int8", "fp8", "int4", "block32", "int2"};
    for (int l = 0; l < 5; ++l) {
      const auto w = static_cast<std::int64_t>(10 + 1000 * gen.uniform());
      for (int c = 0; c < 5; ++c)
        t.rows.push_back(
            row("layer" + std::to_string(l), names[c], w, 2 + 7 * gen.uniform(), gen.uniform()));
    }
    const double budget = 3 + 5 * gen.uniform();
    const double best = brute_force(t, budget);
    if (std::isinf(best)) {
      BOOST_CHECK_THROW(mixed_precision(t, budget), Error);
      continue;
    }
    const MixedPrecisionPlan p = mixed_precision(t, budget);
    BOOST_TEST(p.predicted_drop == best, tt::tolerance(1e-12));
    BOOST_TEST(p.bits_per_weight <= budget * (1 + 1e-12));
    double cost = 0, drop = 0;
    for (const auto& c : p.layers) {
      cost += static_cast<double>(c.weights) * c.bits_per_weight;
      drop += c.predicted_drop;
    }
    BOOST_TEST(cost / static_cast<double>(p.weights) == p.bits_per_weight, tt::tolerance(1e-12));
    BOOST_TEST(drop == p.predicted_drop, tt::tolerance(1e-12));
  }
}

BOOST_AUTO_TEST_CASE(mixed_precision_errors) {
  SensitivityTable t;
  t.rows = {row("a", "int8", 100, 8.5, 0.0), row("a", "int4", 100, 4.5, 1.0),
            row("b", "int8", 300, 8.5, 0.0), row("b", "int4", 300, 4.5, 0.1)};
  BOOST_TEST(error_of([&] { mixed_precision(t, 4.0); }) ==
             "quant::mixed_precision: budget_bits_per_weight = 4 is below the smallest size the "
             "candidates reach, 4.500 bits per weight (a int4 4.500, b int4 4.500)");
  BOOST_TEST(error_of([&] { mixed_precision(t, 0.0); }) ==
             "quant::mixed_precision: budget_bits_per_weight must be finite and > 0, got 0");
  BOOST_TEST(error_of([&] { mixed_precision(SensitivityTable{}, 5.0); }) ==
             "quant::mixed_precision: table has no rows");
  // Rows that failed are never picked; a layer where every row failed is an error.
  t.rows[1].error = "block size 32 does not divide 5";
  BOOST_TEST(mixed_precision(t, 8.5).rules() == (std::vector<std::string>{"a=int8", "b=int8"}),
             tt::per_element());
  t.rows[0].error = "no";
  BOOST_TEST(error_of([&] { mixed_precision(t, 8.5); }) ==
             "quant::mixed_precision: layer a has no usable row in the table (every candidate failed)");
}

BOOST_AUTO_TEST_CASE(sensitivity_on_a_small_cnn) {
  manual_seed(3);
  nn::ModulePtr model = small_cnn();
  const io::Checkpoint before = io::capture(*model);
  const std::vector<Tensor> calib = {batch(1).images, batch(2).images};
  const std::vector<data::Batch> held_out = {batch(3), batch(4)};
  const std::vector<std::string> candidates = {"int8_default", "int4_lsq", "int4_weight_block32",
                                               "skip"};
  const SensitivityTable t = sensitivity(*model, small_cnn, calib, held_out, candidates);
  BOOST_TEST(t.layers() == (std::vector<std::string>{"conv1", "fc"}), tt::per_element());
  BOOST_REQUIRE_EQUAL(t.rows.size(), 8u);
  BOOST_TEST(t.eval_samples == 32);
  const auto at = [&](const std::string& layer, const std::string& config) {
    for (const auto& r : t.rows)
      if (r.layer == layer && r.config == config) return r;
    BOOST_FAIL("no row " << layer << " " << config);
    return SensitivityRow{};
  };
  // conv1's weight (6, 2, 3, 3): blocks of 32 along the last axis do not fit; the fc's do.
  BOOST_TEST(!at("conv1", "int4_weight_block32").ok());
  BOOST_TEST(at("fc", "int4_weight_block32").ok());
  BOOST_TEST(at("fc", "int4_weight_block32").bits_per_weight == 5.0);
  BOOST_TEST(at("conv1", "int4_lsq").bits_per_weight == 4 + 32.0 / 18, tt::tolerance(1e-12));
  BOOST_TEST(at("fc", "skip").bits_per_weight == 32.0);
  BOOST_TEST(at("fc", "skip").loss_drop == 0.0);
  for (const std::string layer : {"conv1", "fc"}) {
    // 4 more bits: about 24 dB more SQNR at the logits; both are finite and positive.
    BOOST_TEST(at(layer, "int8_default").output_sqnr_db > at(layer, "int4_lsq").output_sqnr_db + 10);
    BOOST_TEST(at(layer, "int4_lsq").output_sqnr_db > 0);
    BOOST_TEST(std::abs(at(layer, "int8_default").loss_drop) <
               std::abs(at(layer, "int4_lsq").loss_drop) + 1e-3);
  }
  // The model itself is untouched: same structure (no QAT layers) and state.
  for (const auto& [name, m] : model->named_modules())
    BOOST_TEST(name.find("fake_quant") == std::string::npos);
  BOOST_TEST(io::to_bytes(io::capture(*model)) == io::to_bytes(before));
  // text and JSON
  BOOST_TEST(t.table().find("conv1  int4_lsq") != std::string::npos);
  BOOST_TEST(t.json().find("\"layer\": \"fc\", \"config\": \"int4_weight_block32\", \"weights\": 288, "
                           "\"bits_per_weight\": 5") != std::string::npos);
  // The plan under 5 bits: every layer at 4-bit (conv1 int4_lsq 5.78 only fits next to the fc's
  // cheaper pick), and it applies as registry rules.
  const MixedPrecisionPlan p = mixed_precision(t, 5.0);
  BOOST_TEST(p.bits_per_weight <= 5.0);
  QConfigRegistry reg;
  p.apply(reg);
  for (const auto& c : p.layers) BOOST_TEST(reg.resolve(c.layer, "Conv2d").config == c.config);
}

BOOST_AUTO_TEST_CASE(sensitivity_errors) {
  nn::ModulePtr model = small_cnn();
  const std::vector<Tensor> calib = {batch(1).images};
  const std::vector<data::Batch> held_out = {batch(3)};
  BOOST_TEST(
      error_of([&] {
        sensitivity(*model, small_cnn, calib, held_out, {"int3"});
      }).rfind("quant::sensitivity: candidate 'int3' is not a registered config (fp8_e4m3, ", 0) == 0);
  BOOST_TEST(error_of([&] { sensitivity(*model, small_cnn, {}, held_out, {"int8_default"}); }) ==
             "quant::sensitivity: calibration_batches is empty");
  BOOST_TEST(error_of([&] { sensitivity(*model, small_cnn, calib, {}, {"int8_default"}); }) ==
             "quant::sensitivity: eval_batches is empty");
  BOOST_TEST(error_of([&] {
               sensitivity(*model, small_cnn, calib, held_out, {"int8_default"}, {.layers = {"relu1"}});
             }) ==
             "quant::sensitivity: options.layers: 'relu1' is not a quantizable layer with a weight");
}

BOOST_AUTO_TEST_SUITE_END()
