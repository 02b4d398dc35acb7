// Model-wide switches, post-training calibration and the numeric report.
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <set>

#include "common/errors.h"
#include "framework/autograd/grad_mode.h"
#include "framework/autograd/ops.h"
#include "framework/io/checkpoint.h"
#include "framework/io/restore.h"
#include "framework/nn/nn.h"
#include "framework/optim/sgd.h"
#include "framework/tensor/random.h"
#include "modules/quant/quant.h"

using namespace qat;
using namespace qat::quant;
using test::error_of;

namespace {

// conv-[bn]-relu, pool, conv-relu, flatten, linear between stubs; input (N, 2, 8, 8).
nn::ModulePtr cnn(bool bn) {
  auto net = std::make_shared<nn::Sequential>();
  net->push_back("quant", std::make_shared<QuantStub>());
  net->push_back("conv1", std::make_shared<nn::Conv2d>(2, 6, 3, Conv2dParams{.padding = {1, 1}}));
  if (bn) net->push_back("bn1", std::make_shared<nn::BatchNorm2d>(6));
  net->push_back("relu1", std::make_shared<nn::ReLU>());
  net->push_back("pool", std::make_shared<nn::MaxPool2d>(2));
  net->push_back("conv2", std::make_shared<nn::Conv2d>(6, 8, 3, Conv2dParams{.padding = {1, 1}}));
  net->push_back("relu2", std::make_shared<nn::ReLU>());
  net->push_back("flatten", std::make_shared<nn::Flatten>());
  net->push_back("fc", std::make_shared<nn::Linear>(8 * 4 * 4, 3));
  net->push_back("dequant", std::make_shared<DeQuantStub>());
  return net;
}

Tensor input(std::uint64_t seed, std::int64_t n = 32) {
  Generator gen(seed);
  return Tensor::uniform(Shape{n, 2, 8, 8}, 0, 1, gen);
}

// A few SGD steps on random data, so that weights and batch-norm statistics move.
void train(nn::Module& model, std::uint64_t seed) {
  Generator gen(seed);
  optim::SGD opt(model.named_parameters(), {.lr = 0.05, .momentum = 0.9});
  model.train();
  for (int step = 0; step < 20; ++step) {
    Tensor x = Tensor::uniform(Shape{16, 2, 8, 8}, 0, 1, gen);
    std::vector<std::int64_t> y(16);
    for (auto& v : y) v = static_cast<std::int64_t>(gen.below(3));
    opt.zero_grad();
    cross_entropy(model.forward(x), Tensor::from_vector<std::int64_t>(y, Shape{16})).backward();
    opt.step();
  }
  model.eval();
}

// A trained float model and a prepared copy with the same weights and statistics.
struct ModelPair {
  nn::ModulePtr float_model, qat_model;
};
ModelPair trained_pair(bool bn, const QConfigRegistry& reg = {}) {
  manual_seed(3);
  ModelPair p{cnn(bn), cnn(bn)};
  train(*p.float_model, 4);
  io::load_into(*p.qat_model, io::capture(*p.float_model));
  prepare_qat(*p.qat_model, reg);
  return p;
}

std::vector<Quantizer*> quantizers(nn::Module& model) {
  std::vector<Quantizer*> out;
  for (auto& [name, m] : model.named_modules())
    if (auto* q = dynamic_cast<Quantizer*>(m)) out.push_back(q);
  return out;
}

double logit_sqnr(nn::Module& a, nn::Module& b, const Tensor& x) {
  NoGradGuard ng;
  a.eval();
  b.eval();
  return sqnr_db(a.forward(x), b.forward(x));
}

}  // namespace

BOOST_AUTO_TEST_SUITE(switches)

// quant stub 1 + conv1, conv2, fc 2 each = 7 quantizers.
BOOST_AUTO_TEST_CASE(observer_and_fake_quant_switches_count_what_they_touch) {
  nn::ModulePtr m = cnn(true);
  prepare_qat(*m, QConfigRegistry{});
  BOOST_TEST(disable_observers(*m) == 7);
  for (Quantizer* q : quantizers(*m)) BOOST_TEST(!q->observer_enabled());
  BOOST_TEST(enable_observers(*m, true, "conv1") == 2);
  auto conv1 = std::dynamic_pointer_cast<QatLayer>(m->child("conv1"));
  BOOST_TEST(conv1->weight_fake_quant()->observer_enabled());
  BOOST_TEST(
      !std::dynamic_pointer_cast<QatLayer>(m->child("fc"))->weight_fake_quant()->observer_enabled());
  BOOST_TEST(disable_fake_quant(*m, "conv?") == 4);
  BOOST_TEST(!conv1->activation_fake_quant()->fake_quant_enabled());
  BOOST_TEST(std::dynamic_pointer_cast<QuantStub>(m->child("quant"))->quantizer()->fake_quant_enabled());
  BOOST_TEST(disable_fake_quant(*m, "*.weight_fake_quant") == 3);
  BOOST_TEST(enable_fake_quant(*m) == 7);
  for (Quantizer* q : quantizers(*m)) BOOST_TEST(q->fake_quant_enabled());

  const std::string e = error_of([&] { disable_observers(*m, "features.*"); });
  BOOST_TEST(e.find("disable_observers") != std::string::npos, e);
  BOOST_TEST(e.find("'features.*'") != std::string::npos, e);
  nn::ModulePtr plain = cnn(false);
  BOOST_TEST(error_of([&] { enable_fake_quant(*plain); }).find("matches no quantizer") !=
             std::string::npos);
}

BOOST_AUTO_TEST_CASE(frozen_batch_norm_survives_train_and_keeps_its_statistics) {
  manual_seed(1);
  nn::ModulePtr m = cnn(true);
  auto bn = std::dynamic_pointer_cast<nn::BatchNorm2d>(m->child("bn1"));
  BOOST_TEST(freeze_bn_stats(*m) == 1);
  m->train();
  const auto mean = bn->running_mean().to_vector<float>();
  m->forward(input(2));
  BOOST_TEST(bn->is_training());
  BOOST_TEST(bn->running_mean().to_vector<float>() == mean, boost::test_tools::per_element());
  BOOST_TEST(unfreeze_bn_stats(*m, "bn*") == 1);
  m->forward(input(2));
  BOOST_TEST(bn->running_mean().to_vector<float>() != mean);

  nn::ModulePtr p = cnn(true);
  prepare_qat(*p, QConfigRegistry{});
  BOOST_TEST(freeze_bn_stats(*p, true, "conv1") == 1);  // the fused layer, its "bn" counted once
  auto layer = std::dynamic_pointer_cast<ConvBn2d>(p->child("conv1"));
  BOOST_TEST(layer->bn_frozen());
  p->train();
  BOOST_TEST(!layer->bn()->is_training());
  BOOST_TEST(unfreeze_bn_stats(*p) == 1);
  BOOST_TEST(!layer->bn_frozen());
  const std::string e = error_of([&] { freeze_bn_stats(*p, true, "conv2"); });
  BOOST_TEST(e.find("'conv2'") != std::string::npos, e);
}

BOOST_AUTO_TEST_CASE(frozen_qparams_neither_observe_nor_learn) {
  QConfigRegistry reg;
  reg.set_global("int8_lsq");
  nn::ModulePtr m = cnn(false);
  prepare_qat(*m, reg);
  m->train();
  m->forward(input(5, 8));  // warm-up: LSQ quantizers now learn
  auto fc = std::dynamic_pointer_cast<QatLayer>(m->child("fc"));
  auto* lsq = dynamic_cast<LearnableFakeQuantize*>(fc->activation_fake_quant().get());
  BOOST_REQUIRE(lsq != nullptr);
  BOOST_TEST(lsq->learning_enabled());
  BOOST_TEST(freeze_qparams(*m) == 7);
  const float scale = lsq->scale().item();
  optim::SGD opt(m->named_parameters(), {.lr = 0.5});
  opt.zero_grad();
  sum(m->forward(input(6, 8))).backward();
  opt.step();
  BOOST_TEST(!lsq->learning_enabled());
  BOOST_TEST(!lsq->observer_enabled());
  BOOST_TEST(!lsq->scale().requires_grad());
  BOOST_TEST(lsq->scale().item() == scale);
  BOOST_TEST(unfreeze_qparams(*m, "fc") == 2);
  BOOST_TEST(lsq->learning_enabled());

  reg.set_global("int8_pact");
  nn::ModulePtr a = cnn(false);
  prepare_qat(*a, reg);
  auto* pact = dynamic_cast<LearnableAmaxFakeQuantize*>(
      std::dynamic_pointer_cast<QatLayer>(a->child("conv1"))->activation_fake_quant().get());
  BOOST_REQUIRE(pact != nullptr);
  BOOST_TEST(freeze_qparams(*a, true, "conv1") == 2);
  a->train();
  a->forward(input(5, 8));
  BOOST_TEST(pact->amax().item() == 1.0f);  // not estimated
  BOOST_TEST(!pact->amax().requires_grad());
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(calibration)

BOOST_AUTO_TEST_CASE(calibrating_in_eval_records_ranges_and_restores_every_flag) {
  ModelPair p = trained_pair(true);
  nn::Module& m = *p.qat_model;
  auto conv1 = std::dynamic_pointer_cast<ConvBn2d>(m.child("conv1"));
  conv1->activation_fake_quant()->disable_fake_quant();  // a flag that must come back as it was
  m.train();
  const auto mean = conv1->bn()->running_mean().to_vector<float>();
  const auto var = conv1->bn()->running_var().to_vector<float>();
  const std::int64_t tracked = conv1->bn()->buffer("num_batches_tracked").data<std::int64_t>()[0];
  for (Quantizer* q : quantizers(m)) BOOST_TEST(!q->calibrated());

  const CalibrationReport r = calibrate(m, {input(1), input(2), input(3)});
  BOOST_TEST(r.batches == 3);
  BOOST_TEST(r.observed.size() == 7u);
  BOOST_TEST(r.unobserved.empty(), r.str());
  for (Quantizer* q : quantizers(m)) BOOST_TEST(q->calibrated());
  BOOST_TEST(conv1->bn()->running_mean().to_vector<float>() == mean, boost::test_tools::per_element());
  BOOST_TEST(conv1->bn()->running_var().to_vector<float>() == var, boost::test_tools::per_element());
  BOOST_TEST(conv1->bn()->buffer("num_batches_tracked").data<std::int64_t>()[0] == tracked);
  for (auto& [name, mod] : m.named_modules()) BOOST_TEST(mod->is_training(), name);
  for (Quantizer* q : quantizers(m)) {
    BOOST_TEST(q->observer_enabled());
    BOOST_TEST(q->fake_quant_enabled() == (q != conv1->activation_fake_quant().get()));
  }
  // The stub's range is the input's: uniform [0, 1) over three batches.
  const QParams q = std::dynamic_pointer_cast<QuantStub>(m.child("quant"))->quantizer()->qparams();
  BOOST_TEST(q.scale.item() > 0.9f / 255);
  BOOST_TEST(q.scale.item() < 1.1f / 255);
}

BOOST_AUTO_TEST_CASE(eval_without_calibration_records_nothing) {
  ModelPair p = trained_pair(false);
  p.qat_model->eval();
  NoGradGuard ng;
  p.qat_model->forward(input(1));
  for (Quantizer* q : quantizers(*p.qat_model)) BOOST_TEST(!q->calibrated());
}

BOOST_AUTO_TEST_CASE(zero_batches_report_every_quantizer_unobserved) {
  ModelPair p = trained_pair(true);
  const CalibrationReport r = calibrate(*p.qat_model, std::vector<Tensor>{});
  BOOST_TEST(r.batches == 0);
  BOOST_TEST(r.observed.empty());
  const std::set<std::string> names(r.unobserved.begin(), r.unobserved.end());
  BOOST_TEST(names.size() == 7u);
  BOOST_TEST(names.count("quant.activation_post_process") == 1u);
  BOOST_TEST(names.count("fc.weight_fake_quant") == 1u);
  BOOST_TEST(r.str().find("unobserved: conv1.activation_post_process") != std::string::npos, r.str());
}

BOOST_AUTO_TEST_CASE(flags_are_restored_when_a_batch_fails) {
  ModelPair p = trained_pair(false);
  p.qat_model->train();
  const std::string e = error_of([&] {
    calibrate(*p.qat_model, {input(1), Tensor::zeros(Shape{2, 3, 8, 8})});
  });
  BOOST_TEST(e != "(no error)");
  for (auto& [name, mod] : p.qat_model->named_modules()) BOOST_TEST(mod->is_training(), name);
  for (Quantizer* q : quantizers(*p.qat_model)) BOOST_TEST(q->fake_quant_enabled());
  BOOST_TEST(!calibrating());
  BOOST_TEST(error_of([&] { calibrate(*p.float_model, {input(1)}); }).find("prepare_qat") !=
             std::string::npos);
}

// PTQ end to end: calibrated with a batch source, converted, int8 logits close to float.
BOOST_AUTO_TEST_CASE(calibrated_then_converted_model_is_close_to_float) {
  for (const char* config : {"int8_default", "int8_lsq"}) {
    QConfigRegistry reg;
    reg.set_global(config);
    ModelPair p = trained_pair(true, reg);
    int n = 0;
    const CalibrationReport r = calibrate(*p.qat_model, [&](Tensor& batch) {
      if (n == 8) return false;
      batch = input(100 + n++);
      return true;
    });
    BOOST_TEST(r.batches == 8);
    BOOST_TEST(r.unobserved.empty(), r.str());
    if (std::string(config) == "int8_lsq") {  // estimated as in the warm-up, still not learning
      auto* lsq = dynamic_cast<LearnableFakeQuantize*>(
          std::dynamic_pointer_cast<QatLayer>(p.qat_model->child("fc"))->activation_fake_quant().get());
      BOOST_REQUIRE(lsq != nullptr);
      BOOST_TEST(!lsq->learning_enabled());
      BOOST_TEST(lsq->buffer("warmup_seen").data<std::int64_t>()[0] == 0);
      BOOST_TEST(lsq->scale().item() != 1.0f);
    }
    const Tensor x = input(7, 200);
    const double qat_db = logit_sqnr(*p.float_model, *p.qat_model, x);
    convert(*p.qat_model);
    const double int8_db = logit_sqnr(*p.float_model, *p.qat_model, x);
    BOOST_TEST(qat_db > 25.0, config << " fake-quant logits SQNR " << qat_db);
    BOOST_TEST(int8_db > 25.0, config << " int8 logits SQNR " << int8_db);
  }
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(numeric_report)

BOOST_AUTO_TEST_CASE(qat_and_int8_against_float) {
  ModelPair p = trained_pair(true);
  calibrate(*p.qat_model, {input(1), input(2)});
  const Tensor x = input(9, 64);
  p.qat_model->train();
  const NumericReport qat = compare(*p.float_model, *p.qat_model, x);
  BOOST_TEST(p.qat_model->is_training());  // flags restored
  BOOST_REQUIRE(qat.layers.size() == 4u);
  const std::vector<std::string> names = {"quant", "conv1", "conv2", "fc"};
  const std::vector<std::string> points = {"quant", "relu1", "relu2", "fc"};
  for (std::size_t i = 0; i < 4; ++i) {
    const LayerNumerics& l = qat.layers[i];
    BOOST_TEST(l.name == names[i]);
    BOOST_TEST(l.float_point == points[i]);
    BOOST_TEST(std::isfinite(l.activation_sqnr_db), l.name);
    BOOST_TEST(l.activation_sqnr_db > 25.0, l.name << " " << l.activation_sqnr_db);
    BOOST_TEST(l.scale > 0.0);
    BOOST_TEST(l.saturation >= 0.0);
    BOOST_TEST(l.saturation < 0.02, l.name << " " << l.saturation);
    if (i == 0) {
      BOOST_TEST(std::isnan(l.weight_sqnr_db));
    } else {
      BOOST_TEST(std::isfinite(l.weight_sqnr_db), l.name);
      BOOST_TEST(l.weight_sqnr_db > 30.0, l.name << " " << l.weight_sqnr_db);
      BOOST_TEST(l.weight_scale_min <= l.weight_scale_max);
    }
  }
  BOOST_TEST(qat.layers[1].type == "ConvBnReLU2d");

  nn::ModulePtr int8 = cnn(true);
  prepare_qat(*int8, QConfigRegistry{});
  io::load_into(*int8, io::capture(*p.qat_model));
  convert(*int8);
  const NumericReport q8 = compare(*p.float_model, *int8, x);
  BOOST_REQUIRE(q8.layers.size() == 4u);
  for (std::size_t i = 0; i < 4; ++i) {
    const LayerNumerics &a = qat.layers[i], &b = q8.layers[i];
    BOOST_TEST(b.name == a.name);
    BOOST_TEST(b.float_point == a.float_point);
    BOOST_TEST(std::fabs(b.activation_sqnr_db - a.activation_sqnr_db) < 3.0,
               a.name << " int8 " << b.activation_sqnr_db << " qat " << a.activation_sqnr_db);
    if (i > 0)
      BOOST_TEST(std::fabs(b.weight_sqnr_db - a.weight_sqnr_db) < 1.0,
                 a.name << " int8 " << b.weight_sqnr_db << " qat " << a.weight_sqnr_db);
    BOOST_TEST(b.scale == a.scale, boost::test_tools::tolerance(1e-6));
  }
  BOOST_TEST(q8.layers[1].type == "QuantizedConv2d");

  const std::string js = q8.json();
  for (const std::string& n : names)
    BOOST_TEST(js.find("\"name\": \"" + n + "\"") != std::string::npos, js);
  const std::string t = qat.table();
  BOOST_TEST(t.find("relu1") != std::string::npos, t);
  BOOST_TEST(std::count(t.begin(), t.end(), '\n') == 5);
}

// With fake quantization off the QAT model computes what the float model does: +inf dB, and the
// calibration batch itself never saturates.
BOOST_AUTO_TEST_CASE(identical_layers_give_infinite_sqnr) {
  ModelPair p = trained_pair(false);
  const Tensor x = input(9, 16);
  calibrate(*p.qat_model, {x});
  disable_fake_quant(*p.qat_model);
  const NumericReport r = compare(*p.float_model, *p.qat_model, x);
  BOOST_REQUIRE(r.layers.size() == 4u);
  for (const LayerNumerics& l : r.layers) {
    BOOST_TEST(std::isinf(l.activation_sqnr_db), l.name << " " << l.activation_sqnr_db);
    if (l.name != "quant") BOOST_TEST(std::isinf(l.weight_sqnr_db), l.name);
    // ranges from 0 (input, ReLU) are exact; fc's is shifted by the zero point's rounding (its
    // extremes, at most 2 of 16 x 3 values)
    BOOST_TEST(l.saturation <= (l.name == "fc" ? 2.0 / 48 : 0.0), l.name << " " << l.saturation);
  }
  BOOST_TEST(r.json().find("\"activation_sqnr_db\": \"inf\"") != std::string::npos);
  // twice the range: the stub saturates about half of the input
  const NumericReport s = compare(*p.float_model, *p.qat_model, mul(x, 2.0));
  BOOST_TEST(s.layers[0].saturation > 0.4);
  BOOST_TEST(s.layers[0].saturation < 0.6);
}

BOOST_AUTO_TEST_CASE(hooks_are_removed_also_on_errors) {
  ModelPair p = trained_pair(false);
  calibrate(*p.qat_model, {input(1)});
  // hook handles count up: every handle compare() takes lies between h0 and the next one
  auto handle = [&] {
    const std::int64_t h =
        p.qat_model->register_forward_hook([](nn::Module&, const std::vector<Tensor>&, Tensor&) {});
    p.qat_model->remove_hook(h);
    return h;
  };
  auto none_left = [&](std::int64_t from, std::int64_t to) {
    for (nn::Module* model : {p.float_model.get(), p.qat_model.get()})
      for (auto& [name, m] : model->named_modules())
        for (std::int64_t h = from + 1; h < to; ++h)
          BOOST_TEST(!m->remove_hook(h), name << " hook " << h);
  };
  std::int64_t h0 = handle();
  compare(*p.float_model, *p.qat_model, input(2));
  std::int64_t h1 = handle();
  BOOST_TEST(h1 - h0 > 4);  // compare took hooks ...
  none_left(h0, h1);        // ... and gave them back
  p.qat_model->train();
  const std::string e = error_of([&] {
    compare(*p.float_model, *p.qat_model, Tensor::zeros(Shape{2, 3, 8, 8}));
  });
  BOOST_TEST(p.qat_model->is_training());
  BOOST_TEST(e != "(no error)");
  none_left(h1, handle());
  BOOST_TEST(error_of([&] { compare(*p.float_model, *p.float_model, input(1)); }) != "(no error)");
  BOOST_TEST(error_of([&] {
               compare(*p.float_model, *cnn(false), input(1));
             }).find("no quantized layers") != std::string::npos);
}

BOOST_AUTO_TEST_SUITE_END()
