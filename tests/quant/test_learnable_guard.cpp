// Learnable quantizers in a diverging training: the scale clamp warns once and counts, NaN
// scales / zero points / amax and non-finite training inputs are refused naming the quantizer,
// and DivergenceGuard stops LSQ / PACT training on bad data or a huge learning rate.
#include <boost/test/unit_test.hpp>
#include <iostream>
#include <sstream>

#include "common/errors.h"
#include "framework/autograd/ops.h"
#include "framework/nn/nn.h"
#include "framework/optim/divergence.h"
#include "framework/optim/sgd.h"
#include "framework/tensor/random.h"
#include "modules/quant/quant.h"
#include "quant/quant_test_util.h"

using namespace qat;
using namespace qat::quant;
using test::error_of;
using test::kInf;
using test::kNaN;

namespace {

// Captures std::cerr while alive.
class CerrCapture {
 public:
  CerrCapture() : old_(std::cerr.rdbuf(buf_.rdbuf())) {}
  ~CerrCapture() { std::cerr.rdbuf(old_); }
  std::string text() const { return buf_.str(); }

 private:
  std::ostringstream buf_;
  std::streambuf* old_;
};

std::int64_t count(const std::string& s, const std::string& what) {
  std::int64_t n = 0;
  for (auto at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++n;
  return n;
}

// A per-channel LSQ weight quantizer (4 channels) after its warm-up batch, in training.
std::unique_ptr<LearnableFakeQuantize> lsq_after_warmup(const QuantSpec& spec) {
  auto q = std::make_unique<LearnableFakeQuantize>(
      spec, std::make_shared<MinMaxObserver>(spec, Shape{4}), Shape{4});
  q->set_label("fc1.weight_fake_quant");
  Generator gen(5);
  q->forward(Tensor::uniform(Shape{4, 6}, -1, 1, gen));
  BOOST_REQUIRE(q->learning_enabled());
  return q;
}

std::shared_ptr<nn::Sequential> mlp(const char* preset) {
  manual_seed(21);
  auto m =
      std::make_shared<nn::Sequential>(nn::NamedModules{{"quant", std::make_shared<QuantStub>()},
                                                        {"fc1", std::make_shared<nn::Linear>(8, 16)},
                                                        {"relu1", std::make_shared<nn::ReLU>()},
                                                        {"fc2", std::make_shared<nn::Linear>(16, 4)},
                                                        {"dequant", std::make_shared<DeQuantStub>()}});
  QConfigRegistry reg;
  reg.set_global(preset);
  prepare_qat(*m, reg);
  return m;
}

Tensor labels() { return Tensor::from_vector<std::int64_t>({0, 1, 2, 3, 0, 1, 2, 3}, Shape{8}); }

}  // namespace

BOOST_AUTO_TEST_SUITE(learnable_guard)

BOOST_AUTO_TEST_CASE(lsq_scale_clamp_warns_once_naming_the_quantizer_and_counts) {
  auto q = lsq_after_warmup(QuantSpec::weight_per_channel(8));
  Generator gen(6);
  const Tensor w = Tensor::uniform(Shape{4, 6}, -1, 1, gen);
  q->scale().data<float>()[2] = -0.003f;  // as an optimizer step past zero leaves it
  std::string first;
  {
    CerrCapture cerr;
    q->forward(w);
    first = cerr.text();
  }
  BOOST_TEST(
      first ==
      "warning: LSQ scale of 'fc1.weight_fake_quant' went non-positive (-0.003 at index 2) and is "
      "clamped to 1.19209e-07; lower the learning rate (further clamps of this quantizer are "
      "counted, not reported)\n");
  BOOST_TEST(q->scale().data<float>()[2] == kScaleEps);
  BOOST_TEST(q->scale_clamps() == 1);
  q->scale().data<float>()[0] = -1;
  q->scale().data<float>()[3] = 1e-9f;  // positive, but below eps: clamped too
  {
    CerrCapture cerr;
    q->forward(w);
    BOOST_TEST(cerr.text().empty());  // once per quantizer
  }
  BOOST_TEST(q->scale_clamps() == 3);
  BOOST_TEST(q->scale().data<float>()[3] == kScaleEps);
  // another quantizer warns for itself: "fell below" for a positive value
  auto other = lsq_after_warmup(QuantSpec::weight_per_channel(8));
  other->set_label("fc2.weight_fake_quant");
  other->scale().data<float>()[1] = 1e-9f;
  CerrCapture cerr;
  other->forward(w);
  BOOST_TEST(
      cerr.text().find("warning: LSQ scale of 'fc2.weight_fake_quant' fell below the minimum (1e-09 "
                       "at index 1) and is clamped to 1.19209e-07") == 0,
      cerr.text());
}

BOOST_AUTO_TEST_CASE(model_total_of_clamps) {
  auto m = mlp("int8_lsq");
  m->train();
  Generator gen(8);
  const Tensor x = Tensor::uniform(Shape{8, 8}, -1, 1, gen);
  m->forward(x);  // warm-up
  BOOST_TEST(learnable_range_clamps(*m) == 0);
  auto* fc1 = dynamic_cast<LearnableFakeQuantize*>(m->submodule("fc1.weight_fake_quant").get());
  BOOST_REQUIRE(fc1 != nullptr);
  fc1->scale().data<float>()[0] = -0.5f;
  fc1->scale().data<float>()[5] = -0.5f;
  CerrCapture cerr;
  m->forward(x);
  BOOST_TEST(count(cerr.text(),
                   "warning: LSQ scale of 'fc1.weight_fake_quant' went non-positive (-0.5 at "
                   "index 0)") == 1,
             cerr.text());
  BOOST_TEST(learnable_range_clamps(*m) == 2);
}

BOOST_AUTO_TEST_CASE(lsq_nan_scale_or_zero_point_is_refused_naming_the_quantizer) {
  const QuantSpec spec = QuantSpec::activation_affine(8);
  LearnableFakeQuantize q(spec, std::make_shared<MinMaxObserver>(spec));
  q.set_label("fc1.activation_post_process_lsq");
  Generator gen(7);
  const Tensor x = Tensor::uniform(Shape{16}, -1, 3, gen);
  q.forward(x);
  q.scale().fill_(kNaN);
  const std::string scale_error =
      "LearnableFakeQuantize 'fc1.activation_post_process_lsq': scale[0] = nan: a diverged training "
      "step (lower the learning rate)";
  BOOST_TEST(error_of([&] { q.forward(x); }) == scale_error);
  BOOST_TEST(error_of([&] { q.qparams(); }) == scale_error);  // convert asks for them
  q.scale().fill_(0.1);
  q.zero_point().fill_(-kInf);
  const std::string zp_error =
      "LearnableFakeQuantize 'fc1.activation_post_process_lsq': zero_point[0] = -inf: a diverged "
      "training step (lower the learning rate)";
  BOOST_TEST(error_of([&] { q.forward(x); }) == zp_error);
  BOOST_TEST(error_of([&] { q.qparams(); }) == zp_error);
  // unnamed: the type alone
  LearnableFakeQuantize bare(spec, std::make_shared<MinMaxObserver>(spec));
  bare.forward(x);
  bare.scale().fill_(kInf);
  BOOST_TEST(error_of([&] { bare.forward(x); }).rfind("LearnableFakeQuantize: scale[0] = inf: ", 0) ==
             0);
  // the functional ops: a non-finite zero point would reach a float -> int cast
  const Tensor s = test::vec({0.1f}), z = test::vec({kNaN});
  BOOST_TEST(error_of([&] { fake_quantize_learnable_per_tensor_affine(x, s, z, 0, 255, 1.0); }) ==
             "fake_quantize_learnable_per_tensor_affine: zero_point must be finite, got nan at index 0");
  const Tensor s2 = test::vec({0.1f, 0.2f}), z2 = test::vec({0, kInf});
  BOOST_TEST(
      error_of([&] {
        fake_quantize_learnable_per_channel_affine(x.view_as_shape(Shape{2, 8}), s2, z2, 0, 0, 255, 1.0);
      }) == "fake_quantize_learnable_per_channel_affine: zero_point must be finite, got inf at index 1");
}

BOOST_AUTO_TEST_CASE(pact_amax_nan_is_refused_and_clamps_warn) {
  QuantSpec spec = QuantSpec::activation_affine(8);
  spec.symmetric = true;
  LearnableAmaxFakeQuantize pact(spec, std::make_shared<MinMaxObserver>(spec));
  pact.set_label("relu1.activation_fake_quant");
  const Tensor x = test::vec({0.0f, 1.0f, 2.0f, 4.0f});
  pact.forward(x);
  pact.amax().fill_(-2);
  {
    CerrCapture cerr;
    pact.forward(x);
    BOOST_TEST(
        cerr.text().find("warning: PACT amax of 'relu1.activation_fake_quant' went non-positive (-2 at "
                         "index 0)") == 0,
        cerr.text());
  }
  BOOST_TEST(pact.amax_clamps() == 1);
  pact.amax().fill_(kNaN);
  const std::string e =
      "LearnableAmaxFakeQuantize 'relu1.activation_fake_quant': amax[0] = nan: a diverged training step "
      "(lower the learning rate)";
  BOOST_TEST(error_of([&] { pact.forward(x); }) == e);
  BOOST_TEST(error_of([&] { pact.qparams(); }) == e);
}

// After the warm-up, NaN / inf would quantize to quant_min / quant_max and vanish from the loss:
// in training they are refused; evaluation keeps PyTorch's mapping.
BOOST_AUTO_TEST_CASE(nonfinite_training_input_after_warmup_is_refused) {
  const QuantSpec spec = QuantSpec::activation_affine(8);
  LearnableFakeQuantize q(spec, std::make_shared<MinMaxObserver>(spec));
  q.set_label("quant.activation_fake_quant");
  Generator gen(9);
  q.forward(Tensor::uniform(Shape{2, 8}, -1, 1, gen));
  Tensor x = Tensor::uniform(Shape{2, 8}, -1, 1, gen);
  x.data<float>()[11] = kNaN;
  BOOST_TEST(
      error_of([&] { q.forward(x); }) ==
      "LearnableFakeQuantize 'quant.activation_fake_quant': input[1, 3] = nan (1 of 16 values are "
      "not finite) in training (NaN / inf data or activations, which quantize to quant_min / "
      "quant_max and would hide from the loss)");
  q.eval();
  BOOST_TEST(std::isfinite(q.forward(x).data<float>()[11]));  // quant_min, as PyTorch
  QuantSpec sym = spec;
  sym.symmetric = true;
  LearnableAmaxFakeQuantize pact(sym, std::make_shared<MinMaxObserver>(sym));
  pact.forward(Tensor::uniform(Shape{2, 8}, 0, 1, gen));
  x.data<float>()[11] = kInf;
  BOOST_TEST(
      error_of([&] { pact.forward(x); }).rfind("LearnableAmaxFakeQuantize: input[1, 3] = inf", 0) == 0);
}

// NaN in a data batch after the warm-up under LSQ / PACT: the guard names it and the step before
// the quantizers see it (without check_input, the first quantizer refuses it through the current guard).
BOOST_AUTO_TEST_CASE(nan_data_after_warmup_stops_training_under_the_guard) {
  for (const char* preset : {"int8_lsq", "int8_pact"}) {
    CerrCapture cerr;  // LSQ scales cross zero even at lr 0.05: one warning each
    BOOST_TEST_CONTEXT(preset) {
      auto m = mlp(preset);
      m->train();
      optim::SGD opt(m->named_parameters(), {.lr = 0.05});
      optim::DivergenceGuard guard(*m, opt);
      Generator gen(10);
      auto train_step = [&](const Tensor& x) {
        opt.zero_grad();
        guard.check_input(x);
        Tensor loss = cross_entropy(m->forward(x), labels());
        guard.check_loss(loss);
        loss.backward();
        guard.check_gradients();
        opt.step();
        guard.end_step();
      };
      for (int i = 0; i < 3; ++i) train_step(Tensor::uniform(Shape{8, 8}, -1, 1, gen));
      Tensor bad = Tensor::uniform(Shape{8, 8}, -1, 1, gen);
      bad.data<float>()[2 * 8 + 5] = kNaN;
      try {
        train_step(bad);
        BOOST_FAIL("no error");
      } catch (const optim::DivergenceError& e) {
        BOOST_TEST(e.step() == 4);
        BOOST_TEST(
            std::string(e.what()) ==
            "divergence at step 4: input[2, 5] = nan in the data (1 of 64 values are not finite)");
      }
      // a loop without check_input: the QuantStub's quantizer refuses the batch, through the guard
      try {
        m->forward(bad);
        BOOST_FAIL("no error");
      } catch (const optim::DivergenceError& e) {
        BOOST_TEST((e.kind() == optim::DivergenceError::Kind::Forward));
        BOOST_TEST(e.tensor() == "quant.activation_post_process");
        const std::string type =
            preset == std::string("int8_lsq") ? "LearnableFakeQuantize" : "LearnableAmaxFakeQuantize";
        BOOST_TEST(
            std::string(e.what()).rfind("divergence at step 4: " + type +
                                            " 'quant.activation_post_process': input[2, 5] = nan (1 "
                                            "of 64 values are not finite) in training",
                                        0) == 0,
            e.what());
      }
    }
  }
}

// A huge learning rate under LSQ (the lr 1e30): the guard stops at the first step, naming
// a parameter or a quantizer state, before anything reaches convert.
BOOST_AUTO_TEST_CASE(huge_learning_rate_under_lsq_stops_at_the_first_step) {
  CerrCapture cerr;  // the scale clamp warnings
  auto m = mlp("int8_lsq");
  m->train();
  optim::SGD opt(m->named_parameters(), {.lr = 1e30});
  optim::DivergenceGuard guard(*m, opt);
  Generator gen(11);
  const std::string e = error_of<optim::DivergenceError>([&] {
    for (int i = 0; i < 5; ++i) {
      opt.zero_grad();
      Tensor loss = cross_entropy(m->forward(Tensor::uniform(Shape{8, 8}, -1, 1, gen)), labels());
      guard.check_loss(loss);
      loss.backward();
      guard.check_gradients();
      opt.step();
      guard.end_step();
    }
  });
  BOOST_TEST(e.rfind("divergence at step ", 0) == 0, e);
  BOOST_TEST(guard.step() <= 2, e);
  BOOST_TEST_MESSAGE(e);
}

// A plain FakeQuantize whose observer is off (frozen qparams, int8_default after
// --freeze-observer-epoch) refuses NaN / inf training input the same way; eval keeps PyTorch's
// mapping to quant_min.
BOOST_AUTO_TEST_CASE(frozen_fake_quantize_refuses_nonfinite_training_input) {
  const QuantSpec spec = QuantSpec::activation_affine(8);
  FakeQuantize q(spec, std::make_shared<MovingAverageMinMaxObserver>(spec));
  q.set_label("fc1.activation_post_process");
  Generator gen(4);
  Tensor x = Tensor::uniform(Shape{2, 8}, -1, 1, gen);
  q.forward(x);
  q.disable_observer();
  x.data<float>()[5] = kNaN;
  BOOST_TEST(error_of([&] { q.forward(x); }) ==
             "FakeQuantize 'fc1.activation_post_process': input[0, 5] = nan (1 of 16 values are not "
             "finite) in training with the observer off (NaN / inf data or activations, which "
             "quantize to quant_min / quant_max and would hide from the loss)");
  q.eval();
  BOOST_TEST(std::isfinite(q.forward(x).data<float>()[5]));
}

BOOST_AUTO_TEST_SUITE_END()
