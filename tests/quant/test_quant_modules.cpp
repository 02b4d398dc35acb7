// The QAT layers, the learnable quantizer modules, the config registry and prepare_qat.
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <cstring>

#include "common/errors.h"
#include "framework/autograd/ops.h"
#include "framework/nn/nn.h"
#include "framework/optim/sgd.h"
#include "framework/tensor/parallel.h"
#include "framework/tensor/random.h"
#include "framework/tensor/storage.h"
#include "modules/quant/fake_quant.h"
#include "modules/quant/quant.h"

using namespace qat;
using namespace qat::quant;
using test::error_of;
namespace tt = boost::test_tools;

namespace {
std::shared_ptr<nn::Sequential> mlp() {
  return std::make_shared<nn::Sequential>(
      nn::NamedModules{{"quant", std::make_shared<QuantStub>()},
                       {"fc1", std::make_shared<nn::Linear>(8, 16)},
                       {"relu1", std::make_shared<nn::ReLU>()},
                       {"fc2", std::make_shared<nn::Linear>(16, 4)},
                       {"dequant", std::make_shared<DeQuantStub>()}});
}

std::vector<std::string> types(nn::Module& m) {
  std::vector<std::string> out;
  for (auto& [n, c] : m.named_children()) out.push_back(c->type_name());
  return out;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(qconfig_registry)

BOOST_AUTO_TEST_CASE(presets_and_precedence) {
  QConfigRegistry reg;
  for (const char* name :
       {"int8_default", "int8_lsq", "int4_lsq", "int8_pact", "fp8_e4m3", "int4_weight_block32"})
    BOOST_TEST(reg.contains(name), name);
  BOOST_TEST(reg.get("int8_default").weight->spec == QuantSpec::weight_per_channel(8));
  BOOST_TEST(reg.get("int8_default").activation->spec == QuantSpec::activation_affine(8));
  for (const int bits : {2, 3, 4, 5, 6}) {
    const QConfig& c = reg.get("int" + std::to_string(bits) + "_lsq");
    BOOST_TEST(c.weight->spec.bits == bits);
    BOOST_TEST((c.weight->kind == QuantizerKind::LSQ && c.activation->kind == QuantizerKind::LSQ));
    BOOST_TEST((c.weight->spec.granularity == Granularity::PerChannel));
  }
  BOOST_TEST(!reg.get("int4_weight_block32").activation.has_value());

  BOOST_TEST(reg.resolve("features.0", "Conv2d").config == "int8_default");
  BOOST_TEST(reg.resolve("features.0", "Conv2d").rule == "global");
  reg.set_module_type("Conv2d", "int8_lsq");
  BOOST_TEST(reg.resolve("features.0", "Conv2d").rule == "type Conv2d");
  reg.set_module_glob("features.*", "int4_lsq");
  BOOST_TEST(reg.resolve("features.0", "Conv2d").config == "int4_lsq");  // glob beats type
  reg.set_module_glob("features.0", "fp8_e4m3");  // a later glob: the first match wins
  BOOST_TEST(reg.resolve("features.0", "Conv2d").config == "int4_lsq");
  reg.set_module_name("features.0", "skip");  // exact beats glob
  BOOST_TEST(reg.resolve("features.0", "Conv2d").config == "skip");
  BOOST_TEST(reg.resolve("features.0", "Conv2d").rule == "name features.0");
  BOOST_TEST(reg.resolve("head", "Linear").config == "int8_default");
}

BOOST_AUTO_TEST_CASE(user_configs_and_errors) {
  QConfigRegistry reg;
  QConfig mine{"w6a8", QuantizerConfig{.spec = QuantSpec::weight_per_channel(6)},
               QuantizerConfig{.spec = QuantSpec::activation_affine(8)}};
  reg.register_config(mine);
  BOOST_TEST(reg.get("w6a8").weight->spec.bits == 6);
  BOOST_TEST(error_of([&] { reg.register_config(mine); }) ==
             "QConfigRegistry::register_config: a config named 'w6a8' exists already (pass replace = "
             "true to overwrite it)");
  reg.register_config(mine, /*replace=*/true);
  BOOST_TEST(error_of([&] {
               reg.register_config(QConfig{"skip", {}, {}});
             }).find("reserved") != std::string::npos);
  const std::string unknown = error_of([&] { reg.set_global("int3"); });
  BOOST_TEST(unknown.find("no config named 'int3'") != std::string::npos);
  BOOST_TEST(unknown.find("int8_default") != std::string::npos);
  QConfig bad{"bad", QuantizerConfig{.spec = QuantSpec::weight_per_channel(17)}, {}};
  BOOST_TEST(error_of([&] { reg.register_config(bad); }) ==
             "QuantSpec: bits must be in [2, 16] for integer formats, got 17");
  QConfig mismatch{
      "mm", QuantizerConfig{.spec = QuantSpec::weight_per_channel(8), .kind = QuantizerKind::FP8}, {}};
  BOOST_TEST(error_of([&] { reg.register_config(mismatch); }).find("kind FP8") != std::string::npos);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(prepare)

BOOST_AUTO_TEST_CASE(swaps_fuses_and_keeps_parameter_handles) {
  manual_seed(1);
  auto model = mlp();
  const Tensor w1 = model->child("fc1")->parameter("weight");
  QConfigRegistry reg;
  const PrepareReport report = prepare_qat(*model, reg);
  const std::vector<std::string> expect{"QuantStub", "LinearReLU", "Identity", "QuantLinear",
                                        "DeQuantStub"};
  BOOST_TEST(types(*model) == expect, tt::per_element());
  BOOST_TEST(model->child("fc1")->parameter("weight").is_same(w1));
  BOOST_TEST(report.layers.size() == 3u);
  BOOST_TEST(report.layers[1].name == "fc1");
  BOOST_TEST(report.layers[1].from_type == "Linear+ReLU");
  BOOST_TEST(report.layers[1].to_type == "LinearReLU");
  BOOST_TEST(report.layers[1].rule == "global");
  BOOST_TEST(report.table().find("fc2    Linear       QuantLinear") != std::string::npos);
  // checkpoint-friendly names, PyTorch-style
  std::vector<std::string> buffers;
  for (auto& [n, t] : model->named_buffers()) buffers.push_back(n);
  for (const char* n : {"quant.activation_post_process.scale", "fc1.weight_fake_quant.zero_point",
                        "fc1.weight_fake_quant.activation_post_process.min_val",
                        "fc2.activation_post_process.fake_quant_enabled"})
    BOOST_TEST((std::find(buffers.begin(), buffers.end(), n) != buffers.end()), n);
  auto q = std::dynamic_pointer_cast<QuantLinear>(model->child("fc1"));
  BOOST_TEST(q->weight_fake_quant()->label() == "fc1.weight_fake_quant");
  BOOST_TEST(q->weight_fake_quant()->observer()->label() ==
             "fc1.weight_fake_quant.activation_post_process");
  BOOST_TEST(
      error_of([&] { prepare_qat(*model, reg); }) ==
      "prepare_qat: module 'quant' is an already prepared QuantStub (the model was prepared before)");
}

BOOST_AUTO_TEST_CASE(nan_input_names_the_observer) {
  auto model = mlp();
  QConfigRegistry reg;
  prepare_qat(*model, reg);
  Tensor x = Tensor::zeros(Shape{2, 8});
  x.data<float>()[3] = std::nanf("");
  BOOST_TEST(error_of([&] { model->forward(x); }) ==
             "MovingAverageMinMaxObserver 'quant.activation_post_process.activation_post_process': "
             "observed NaN or Inf in an input of shape [2, 8] (a diverged training step or bad data)");
}

namespace {
// The same observers as types the per-row path does not know: FakeQuantize takes its general
// path (observe, calculate_qparams, fake_quantize) with them.
struct GeneralMovingAverage : MovingAverageMinMaxObserver {
  using MovingAverageMinMaxObserver::MovingAverageMinMaxObserver;
};
struct GeneralMinMax : MinMaxObserver {
  using MinMaxObserver::MinMaxObserver;
};

std::vector<float> values_of(const Tensor& t) {
  return std::vector<float>(t.data<float>(), t.data<float>() + t.numel());
}
std::vector<std::int32_t> ints_of(const Tensor& t) {
  return std::vector<std::int32_t>(t.data<std::int32_t>(), t.data<std::int32_t>() + t.numel());
}
// Bitwise equality (signed zeros and NaN payloads included).
bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}
}  // namespace

// FakeQuantize observes and quantizes a weight's rows block by block (observe_rows): the same
// output, straight-through mask, statistics and qparams as the general path, bit for bit, for
// both observers, rows of a multiple of 8 or not, one and two threads; a NaN row leaves
// everything as it was; a range too wide for float32 fails as fake_quantize does.
BOOST_AUTO_TEST_CASE(weight_rows_observed_and_quantized_in_one_pass) {
  struct Case {
    std::int64_t rows, cols;
    bool moving, symmetric;
    int threads;
  };
  const Case cases[] = {{3, 16, true, true, 1},   {5, 17, true, true, 2},    {37, 200, false, true, 1},
                        {9, 64, true, false, 1},  {256, 784, true, true, 2}, {256, 784, false, false, 2},
                        {130, 520, true, true, 2}};
  const int threads = get_num_threads();
  for (const Case& c : cases) {
    BOOST_TEST_CONTEXT("[" << c.rows << ", " << c.cols << "] moving " << c.moving << " symmetric "
                           << c.symmetric << " threads " << c.threads) {
      set_num_threads(c.threads);
      QuantSpec spec = QuantSpec::weight_per_channel(8);
      spec.symmetric = c.symmetric;
      const Shape ps{c.rows};
      std::shared_ptr<Observer> fused_obs, general_obs;
      if (c.moving) {
        fused_obs = std::make_shared<MovingAverageMinMaxObserver>(spec, ps);
        general_obs = std::make_shared<GeneralMovingAverage>(spec, ps);
      } else {
        fused_obs = std::make_shared<MinMaxObserver>(spec, ps);
        general_obs = std::make_shared<GeneralMinMax>(spec, ps);
      }
      BOOST_TEST(fused_obs->merge(nullptr, nullptr, nullptr, nullptr, 0));
      BOOST_TEST(!general_obs->merge(nullptr, nullptr, nullptr, nullptr, 0));
      FakeQuantize fused(spec, fused_obs, ps), general(spec, general_obs, ps);
      fused.train(), general.train();
      Generator gen(static_cast<std::uint64_t>(c.rows * 1000 + c.cols));
      const Shape shape{c.rows, c.cols};
      Tensor w = Tensor::uniform(shape, -1, 1, gen);
      for (std::int64_t j = 0; j < c.cols; ++j) w.data<float>()[c.cols + j] = 0.0f;  // row 1: zeros
      w.data<float>()[c.cols + 1] = -0.0f;
      for (int step = 0; step < 3; ++step) {
        // the weight grows past the (moving) range: clipped elements, mask bits 0
        Tensor wf = mul(w, 1.0 + 0.5 * step).detach();
        Tensor wg = wf.clone();
        wf.requires_grad_(), wg.requires_grad_();
        const Tensor yf = fused.forward(wf), yg = general.forward(wg);
        BOOST_TEST(same_bits(values_of(yf), values_of(yg)));
        const Tensor g = Tensor::uniform(shape, 0.5, 1, gen);
        sum(mul(yf, g)).backward();
        sum(mul(yg, g)).backward();
        BOOST_TEST(same_bits(values_of(wf.grad()), values_of(wg.grad())));
        BOOST_TEST(same_bits(values_of(fused_obs->min_val()), values_of(general_obs->min_val())));
        BOOST_TEST(same_bits(values_of(fused_obs->max_val()), values_of(general_obs->max_val())));
        BOOST_TEST(same_bits(values_of(fused.scale()), values_of(general.scale())));
        BOOST_TEST(ints_of(fused.zero_point()) == ints_of(general.zero_point()), tt::per_element());
        if (step == 2 && c.moving) {  // the lagging range clips: the mask has zeros
          std::int64_t clipped = 0;
          for (float v : values_of(wf.grad())) clipped += v == 0.0f;
          BOOST_TEST(clipped > 0);
        }
      }
      // a NaN in the last row: the observer's error, and nothing changed
      const auto min_before = values_of(fused_obs->min_val());
      const auto scale_before = values_of(fused.scale());
      const auto zp_before = ints_of(fused.zero_point());
      Tensor bad = w.clone();
      bad.data<float>()[bad.numel() - 1] = std::nanf("");
      BOOST_TEST(error_of([&] { fused.forward(bad); }) == error_of([&] { general.forward(bad); }));
      BOOST_TEST(same_bits(values_of(fused_obs->min_val()), min_before));
      BOOST_TEST(same_bits(values_of(fused.scale()), scale_before));
      BOOST_TEST(ints_of(fused.zero_point()) == zp_before, tt::per_element());
      // a corrupt state (min > max) in a row of the second thread's share: calculate_qparams's
      // error, as on the general path (no exception may leave an OpenMP thread)
      if (c.moving && c.rows >= 256) {
        for (Observer* o : {fused_obs.get(), general_obs.get()}) {
          o->min_val().data<float>()[200] = 10.0f;
          o->max_val().data<float>()[200] = -10.0f;
        }
        const std::string e = error_of([&] { fused.forward(w); });
        BOOST_TEST(e == error_of([&] { general.forward(w); }));
        BOOST_TEST(e.find("calculate_qparams: min ") == 0, e);
        BOOST_TEST(same_bits(values_of(fused_obs->min_val()), values_of(general_obs->min_val())));
      }
    }
  }
  set_num_threads(threads);
  // asymmetric, a range wider than float32: an infinite scale, refused as fake_quantize does
  QuantSpec spec = QuantSpec::weight_per_channel(8);
  spec.symmetric = false;
  FakeQuantize fused(spec, std::make_shared<MinMaxObserver>(spec, Shape{2}), Shape{2});
  FakeQuantize general(spec, std::make_shared<GeneralMinMax>(spec, Shape{2}), Shape{2});
  fused.train(), general.train();
  Tensor huge = Tensor::zeros(Shape{2, 16});
  huge.data<float>()[0] = -3e38f, huge.data<float>()[1] = 3e38f;
  const std::string e = error_of([&] { fused.forward(huge); });
  BOOST_TEST(e == error_of([&] { general.forward(huge); }));
  BOOST_TEST(e.find("fake_quantize: scale must be positive and finite, got inf at index 0") == 0);
}

BOOST_AUTO_TEST_CASE(skip_no_fuse_and_nested_modules) {
  auto model = mlp();
  QConfigRegistry reg;
  reg.set_module_name("fc2", "skip");
  prepare_qat(*model, reg, PrepareOptions{.fuse = false});
  const std::vector<std::string> expect{"QuantStub", "QuantLinear", "ReLU", "Linear", "DeQuantStub"};
  BOOST_TEST(types(*model) == expect, tt::per_element());

  auto outer = std::make_shared<nn::Sequential>();
  outer->push_back("body", mlp());
  outer->push_back("head", std::make_shared<nn::Linear>(4, 2));
  QConfigRegistry reg2;
  reg2.set_module_glob("body.*", "int4_lsq");
  const PrepareReport r = prepare_qat(*outer, reg2);
  BOOST_TEST(outer->submodule("body.fc1")->type_name() == "LinearReLU");
  auto head = std::find_if(r.layers.begin(), r.layers.end(), [](auto& l) { return l.name == "head"; });
  BOOST_REQUIRE(head != r.layers.end());
  BOOST_TEST(head->config == "int8_default");
  auto fc1 = std::dynamic_pointer_cast<QuantLinear>(outer->submodule("body.fc1"));
  BOOST_TEST(fc1->weight_fake_quant()->spec().bits == 4);
  BOOST_TEST(fc1->weight_fake_quant()->type_name() == "LearnableFakeQuantize");
}

BOOST_AUTO_TEST_CASE(a_config_that_does_not_fit_leaves_the_model_unchanged) {
  auto model = std::make_shared<nn::Sequential>(nn::NamedModules{
      {"fc1", std::make_shared<nn::Linear>(64, 8)}, {"fc2", std::make_shared<nn::Linear>(8, 4)}});
  QConfigRegistry reg;
  reg.set_global("int4_weight_block32");  // fc1: 64 inputs fit, fc2: 8 do not
  BOOST_TEST(error_of([&] { prepare_qat(*model, reg); }) ==
             "prepare_qat: layer 'fc2' (Linear), config 'int4_weight_block32' (global): make_quantizer: "
             "QuantSpec block_size 32 does not divide dimension -1 (8) of shape [4, 8]");
  const std::vector<std::string> expect{"Linear", "Linear"};
  BOOST_TEST(types(*model) == expect, tt::per_element());
  reg.set_module_name("fc2", "int8_default");
  prepare_qat(*model, reg);
  auto fc1 = std::dynamic_pointer_cast<QuantLinear>(model->child("fc1"));
  BOOST_TEST((fc1->weight_fake_quant()->spec().granularity == Granularity::PerBlock));
  BOOST_TEST(!fc1->activation_fake_quant());  // weight-only config
}

BOOST_AUTO_TEST_CASE(conv_bn_relu_fusion) {
  auto model =
      std::make_shared<nn::Sequential>(nn::NamedModules{{"conv", std::make_shared<nn::Conv2d>(2, 4, 3)},
                                                        {"bn", std::make_shared<nn::BatchNorm2d>(4)},
                                                        {"relu", std::make_shared<nn::ReLU>()},
                                                        {"conv2", std::make_shared<nn::Conv2d>(4, 4, 1)},
                                                        {"relu2", std::make_shared<nn::ReLU>()}});
  QConfigRegistry reg;
  prepare_qat(*model, reg);
  const std::vector<std::string> expect{"ConvBnReLU2d", "Identity", "Identity", "ConvReLU2d",
                                        "Identity"};
  BOOST_TEST(types(*model) == expect, tt::per_element());
  BOOST_TEST(model->submodule("conv.bn")->type_name() == "BatchNorm2d");
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(qat_layers)

BOOST_AUTO_TEST_CASE(quant_linear_matches_manual_fake_quant) {
  manual_seed(2);
  nn::Linear lin(8, 5);
  QConfigRegistry reg;
  const QConfig& c = reg.get("int8_default");
  QuantLinear q(lin, make_quantizer(*c.weight, lin.weight().shape()),
                make_quantizer(*c.activation, Shape{1, 5}), true);
  Generator gen(3);
  Tensor x = Tensor::uniform(Shape{6, 8}, -1, 1, gen);
  Tensor y = q.forward(x);
  // manual: per-channel symmetric weight qparams from the first (moving-average) observation
  const QParams wq = q.weight_fake_quant()->qparams();
  for (std::int64_t o = 0; o < 5; ++o) {
    float amax = 0;
    for (std::int64_t i = 0; i < 8; ++i)
      amax = std::max(amax, std::fabs(lin.weight().data<float>()[o * 8 + i]));
    BOOST_TEST(wq.scale.data<float>()[o] == amax / 127.5f);
    BOOST_TEST(wq.zero_point.data<std::int32_t>()[o] == 0);
  }
  Tensor w_fq = fake_quantize(lin.weight(), wq, QuantSpec::weight_per_channel(8));
  Tensor pre = relu(linear(x, w_fq, lin.bias()));
  Tensor expect =
      fake_quantize(pre, q.activation_fake_quant()->qparams(), QuantSpec::activation_affine(8));
  BOOST_TEST(y.to_vector<float>() == expect.to_vector<float>(), tt::per_element());
  // gradients reach the float weight through the straight-through estimator
  sum(y).backward();
  BOOST_TEST(lin.weight().grad().defined());
  BOOST_TEST(lin.bias().grad().defined());
}

BOOST_AUTO_TEST_CASE(eval_mode_never_moves_qparams) {
  auto fq = std::make_shared<FakeQuantize>(
      QuantSpec::activation_affine(8),
      std::make_shared<MovingAverageMinMaxObserver>(QuantSpec::activation_affine(8)));
  Generator gen(4);
  fq->forward(Tensor::uniform(Shape{100}, 0, 1, gen));
  const float scale = fq->scale().item();
  fq->eval();
  fq->forward(Tensor::uniform(Shape{100}, 0, 50, gen));
  BOOST_TEST(fq->scale().item() == scale);
  fq->train();
  fq->disable_observer();
  fq->forward(Tensor::uniform(Shape{100}, 0, 50, gen));
  BOOST_TEST(fq->scale().item() == scale);
  fq->disable_fake_quant();
  Tensor x = Tensor::uniform(Shape{10}, 0, 1, gen);
  BOOST_TEST(fq->forward(x).is_same(x));
}

BOOST_AUTO_TEST_CASE(conv_bn_folds_to_conv_then_bn) {
  manual_seed(5);
  nn::Conv2d conv(3, 4, 3, Conv2dParams{.padding = {1, 1}});
  auto bn = std::make_shared<nn::BatchNorm2d>(4);
  bn->weight().copy_(Tensor::from_vector<float>({0.5f, 1.5f, -2.0f, 1.0f}, Shape{4}));
  bn->running_var().copy_(Tensor::from_vector<float>({0.5f, 2.0f, 1.0f, 3.0f}, Shape{4}));
  nn::BatchNorm2d ref_bn(4);  // an independent copy of the batch norm's state
  ref_bn.weight().copy_(bn->weight());
  ref_bn.running_var().copy_(bn->running_var());
  QConfigRegistry reg;
  const QConfig& c = reg.get("int8_default");
  auto wq = make_quantizer(*c.weight, conv.weight().shape());
  ConvBn2d fused(conv, bn, wq, nullptr, /*fused_relu=*/true);
  wq->disable_fake_quant();  // float math: conv(x, W f) / f + b == conv(x, W) + b
  Generator gen(6);
  Tensor x = Tensor::uniform(Shape{2, 3, 5, 5}, -1, 1, gen);
  Tensor y = fused.forward(x);
  Tensor expect = relu(ref_bn.forward(conv2d(x, conv.weight(), conv.bias(), conv.params())));
  auto a = y.to_vector<float>(), b = expect.to_vector<float>();
  for (std::size_t i = 0; i < a.size(); ++i) BOOST_TEST(a[i] == b[i], tt::tolerance(2e-4f));
  auto rm = bn->running_mean().to_vector<float>(), rr = ref_bn.running_mean().to_vector<float>();
  for (std::size_t i = 0; i < rm.size(); ++i) BOOST_TEST(rm[i] == rr[i], tt::tolerance(1e-4f));
  // frozen statistics stay frozen, also across train()
  fused.freeze_bn_stats();
  fused.train();
  BOOST_TEST(!bn->is_training());
  const auto frozen = bn->running_mean().to_vector<float>();
  fused.forward(x);
  BOOST_TEST(bn->running_mean().to_vector<float>() == frozen, tt::per_element());
  fused.update_bn_stats();
  BOOST_TEST(bn->is_training());
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(learnable_quantizers)

BOOST_AUTO_TEST_CASE(lsq_warms_up_then_learns) {
  const QuantSpec spec = QuantSpec::activation_affine(8);
  LearnableFakeQuantize lsq(spec, std::make_shared<MinMaxObserver>(spec));
  BOOST_TEST(!lsq.learning_enabled());
  BOOST_TEST(!lsq.scale().requires_grad());
  Generator gen(7);
  Tensor x = Tensor::uniform(Shape{64}, -1, 3, gen);
  lsq.forward(x);
  BOOST_TEST(lsq.learning_enabled());
  BOOST_TEST(!lsq.observer_enabled());
  BOOST_TEST(lsq.scale().requires_grad());
  BOOST_TEST(lsq.zero_point().requires_grad());  // affine: zero point learned too
  const QParams q = calculate_qparams(lsq.observer()->min_val(), lsq.observer()->max_val(), spec);
  BOOST_TEST(lsq.scale().item() == q.scale.item());
  Tensor xr = x.detach();
  xr.requires_grad_(true);
  sum(lsq.forward(xr) * 2.0).backward();
  BOOST_TEST(lsq.scale().grad().defined());
  BOOST_TEST(lsq.zero_point().grad().defined());
  BOOST_TEST(xr.grad().defined());
}

BOOST_AUTO_TEST_CASE(lsq_init_and_symmetric_zero_point) {
  const QuantSpec spec = QuantSpec::weight_per_channel(4);
  LearnableFakeQuantize lsq(spec, std::make_shared<MinMaxObserver>(spec, Shape{2}), Shape{2},
                            {.init = LearnableInit::LSQ});
  Tensor w = Tensor::from_vector<float>({1, -1, 2, -2, 0.5f, 0.5f, -0.5f, 0.5f}, Shape{2, 4});
  lsq.forward(w);
  // scale = 2 mean(|w|) / sqrt(qmax), qmax = 7
  BOOST_TEST(lsq.scale().data<float>()[0] == static_cast<float>(2 * 1.5 / std::sqrt(7.0)),
             tt::tolerance(1e-6f));
  BOOST_TEST(lsq.scale().data<float>()[1] == static_cast<float>(2 * 0.5 / std::sqrt(7.0)),
             tt::tolerance(1e-6f));
  BOOST_TEST(!lsq.zero_point().requires_grad());
  BOOST_TEST(lsq.qparams().zero_point.data<std::int32_t>()[0] == 0);
}

BOOST_AUTO_TEST_CASE(learnable_amax_starts_at_the_range_then_learns) {
  QuantSpec spec = QuantSpec::activation_affine(8);
  spec.symmetric = true;
  LearnableAmaxFakeQuantize pact(spec, std::make_shared<MinMaxObserver>(spec));
  Tensor x = Tensor::from_vector<float>({0.0f, 1.0f, 2.0f, 4.0f}, Shape{4});
  pact.forward(x);
  BOOST_TEST(pact.amax().item() == 4.0);
  BOOST_TEST(pact.amax().requires_grad());
  BOOST_TEST(pact.qparams().scale.item() == 4.0f / 255.0f);
  pact.amax().fill_(2.0);
  sum(pact.forward(x)).backward();
  BOOST_TEST(pact.amax().grad().item() == 2.0);  // x = 2 and x = 4 are at or above amax
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(qat_training)

// A QAT MLP on a separable synthetic problem learns, for each preset that applies to it, and
// in steady state a training step takes every buffer from the pool.
BOOST_AUTO_TEST_CASE(presets_train_and_steady_state_allocates_nothing) {
  for (const char* preset : {"int8_default", "int8_lsq", "int4_lsq", "int8_pact", "fp8_e4m3"}) {
    manual_seed(11);
    Generator gen(12);
    auto model = mlp();
    QConfigRegistry reg;
    reg.set_global(preset);
    prepare_qat(*model, reg);
    optim::SGD opt(model->named_parameters(), {.lr = 0.1, .momentum = 0.9});
    Tensor x = Tensor::uniform(Shape{32, 8}, -1, 1, gen);
    std::vector<std::int64_t> y(32);
    for (int i = 0; i < 32; ++i)
      y[i] = (x.data<float>()[i * 8] > 0 ? 1 : 0) + (x.data<float>()[i * 8 + 1] > 0 ? 2 : 0);
    const Tensor labels = Tensor::from_vector<std::int64_t>(y, Shape{32});
    double first = 0, last = 0;
    std::uint64_t fresh_before = 0;
    for (int step = 0; step < 150; ++step) {
      if (step == 100) fresh_before = CachingAllocator::cpu().stats().fresh_allocations;
      opt.zero_grad();
      Tensor loss = cross_entropy(model->forward(x), labels);
      loss.backward();
      opt.step();
      (step == 0 ? first : last) = loss.item();
    }
    BOOST_TEST(last < 0.5 * first, preset << ": loss " << first << " -> " << last);
    BOOST_TEST(CachingAllocator::cpu().stats().fresh_allocations == fresh_before, preset);
  }
}

BOOST_AUTO_TEST_SUITE_END()
