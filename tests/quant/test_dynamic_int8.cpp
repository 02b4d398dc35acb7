// Dynamic int8 inference (DynamicQuantizedLinear, int8_dynamic.h): the grouped GEMM against its
// scalar reference bit for bit on every CPU path (odd sizes, every group shape, extreme codes,
// strides, threads), a hand-computed value, convert of int8_dyn_act_int4_weight models (Sequential
// and graph paths) against the fake-quant model, checkpoints round trip, hostile values, refusals,
// and a model trained on Fashion-MNIST whose int8 predictions match the QAT model's.
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <filesystem>
#include <random>
#include <vector>

#include "common/errors.h"
#include "common/isa.h"
#include "framework/autograd/grad_mode.h"
#include "framework/autograd/ops.h"
#include "framework/data/dataloader.h"
#include "framework/data/idx.h"
#include "framework/io/checkpoint.h"
#include "framework/io/restore.h"
#include "framework/nn/nn.h"
#include "framework/optim/sgd.h"
#include "framework/tensor/parallel.h"
#include "framework/tensor/random.h"
#include "modules/quant/dynamic_quantized_linear.h"
#include "modules/quant/int8_dynamic.h"
#include "modules/quant/quant.h"
#include "quant/graph_models.h"

using namespace qat;
using namespace qat::quant;
using namespace qat::test;
namespace tt = boost::test_tools;

BOOST_AUTO_TEST_SUITE(dynamic_int8)

BOOST_AUTO_TEST_CASE(reference_by_hand) {
  // x codes {130, 120, 128} with zp 128 -> {2, -8, 0}; w {3, -1, 5}; groups of 2:
  // acc0 = 2*3 + (-8)(-1) = 14, acc1 = 0; y = (14 * 0.5 + 0 * 0.25) * 0.1 + 1 = 1.7
  const std::uint8_t x[] = {130, 120, 128};
  const std::int32_t zp[] = {128};
  const float rs[] = {0.1f}, ws[] = {0.5f, 0.25f}, bias[] = {1.0f};
  const std::int8_t w[] = {3, -1, 5};
  float y = 0, want = (14.0f * 0.5f + 0.0f * 0.25f) * 0.1f + 1.0f;
  int8::linear_dynamic_reference(x, 1, 3, 3, zp, rs, w, ws, 1, 2, bias, false, &y, 1);
  BOOST_TEST(y == want);
  for_each_int8_isa([&](cpu::Isa) {
    const int8::GroupedWeights p = int8::pack_grouped(w, ws, 1, 3, 2);
    float yk = 0;
    int8::linear_dynamic(x, 1, 3, zp, rs, p, bias, false, &yk, 1);
    BOOST_TEST(yk == want);
    float neg = 0;
    const float nbias[] = {-2.0f};
    int8::linear_dynamic(x, 1, 3, zp, rs, p, nbias, true, &neg, 1);  // relu
    BOOST_TEST(neg == 0.0f);
  });
  BOOST_TEST(error_of([&] { int8::pack_grouped(w, ws, 1, 3, 4); }).find("group 4 is not in [1") !=
             std::string::npos);
}

BOOST_AUTO_TEST_CASE(kernel_matches_reference_on_every_path) {
  std::mt19937 gen(7);
  auto uni = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(gen); };
  struct Case {
    std::int64_t M, K, O, group;
    bool extreme;
  };
  const Case cases[] = {{1, 1, 1, 1, false},
                        {5, 31, 17, 31, false},
                        {7, 33, 15, 32, false},
                        {13, 100, 33, 3, false},
                        {25, 67, 16, 67, true},
                        {9, 64, 40, 32, true},
                        {17, 96, 48, 32, false},
                        {3, 200, 5, 7, false},
                        // each tail tile height (1, 2, 4 rows) after whole tiles of 6 (AVX2) or 8
                        {2, 40, 20, 8, false},
                        {10, 50, 33, 16, false},
                        {4, 64, 16, 32, true},
                        {14, 33, 17, 11, false}};
  for (const Case& c : cases)
    for (int relu = 0; relu < 2; ++relu) {
      BOOST_TEST_CONTEXT("M " << c.M << " K " << c.K << " O " << c.O << " group " << c.group << " relu "
                              << relu) {
        const std::int64_t ldx = c.K + 3, ldy = c.O + 2, groups = (c.K + c.group - 1) / c.group;
        std::vector<std::uint8_t> x(c.M * ldx);
        for (auto& v : x) v = static_cast<std::uint8_t>(c.extreme ? (uni(0, 1) ? 255 : 0) : uni(0, 255));
        std::vector<std::int8_t> w(c.O * c.K);
        for (auto& v : w)
          v = static_cast<std::int8_t>(c.extreme ? (uni(0, 1) ? 127 : -128) : uni(-8, 7));
        std::vector<std::int32_t> zp(c.M);
        std::vector<float> rs(c.M), ws(c.O * groups), bias(c.O);
        for (auto& v : zp) v = c.extreme ? (uni(0, 1) ? 0 : 255) : uni(0, 255);
        for (auto& v : rs) v = std::ldexp(1.0f + uni(0, 1000) / 1000.0f, uni(-12, 0));
        for (auto& v : ws) v = std::ldexp(1.0f + uni(0, 1000) / 1000.0f, uni(-10, -2));
        for (auto& v : bias) v = uni(-1000, 1000) / 100.0f;
        std::vector<float> want(c.M * ldy, -7.0f);
        int8::linear_dynamic_reference(x.data(), c.M, c.K, ldx, zp.data(), rs.data(), w.data(),
                                       ws.data(), c.O, c.group, relu ? bias.data() : nullptr, relu != 0,
                                       want.data(), ldy);
        for_each_int8_isa([&](cpu::Isa) {
          const int8::GroupedWeights p = int8::pack_grouped(w.data(), ws.data(), c.O, c.K, c.group);
          for (int threads : {1, 2}) {
            set_num_threads(threads);
            std::vector<float> got(c.M * ldy, -7.0f);  // the gaps between rows stay untouched
            int8::linear_dynamic(x.data(), c.M, ldx, zp.data(), rs.data(), p,
                                 relu ? bias.data() : nullptr, relu != 0, got.data(), ldy);
            BOOST_TEST(got == want, tt::per_element());
          }
          set_num_threads(1);
        });
      }
    }
}

namespace {
nn::ModulePtr mlp(std::int64_t in = 64, std::int64_t hidden = 64) {
  return std::make_shared<nn::Sequential>(
      nn::NamedModules{{"quant", std::make_shared<QuantStub>()},
                       {"fc1", std::make_shared<nn::Linear>(in, hidden)},
                       {"relu1", std::make_shared<nn::ReLU>()},
                       {"fc2", std::make_shared<nn::Linear>(hidden, 32)},
                       {"relu2", std::make_shared<nn::ReLU>()},
                       {"fc3", std::make_shared<nn::Linear>(32, 10)},
                       {"dequant", std::make_shared<DeQuantStub>()}});
}
void train_random(nn::Module& model, std::uint64_t seed) {
  test::train_on_noise(model, 10, seed, Shape{16, 64}, 10, -1);
}
double max_abs_diff(const Tensor& a, const Tensor& b) {
  const auto va = a.to_vector<float>(), vb = b.to_vector<float>();
  double m = 0;
  for (std::size_t i = 0; i < va.size(); ++i) m = std::max(m, std::fabs(double(va[i]) - vb[i]));
  return m;
}
}  // namespace

BOOST_AUTO_TEST_CASE(convert_matches_fake_quant_and_round_trips) {
  // global 8da4w; fc2 static int8 (its input dynamic, its output static: fc3 reads uint8)
  for (bool graph : {false, true}) {
    BOOST_TEST_CONTEXT((graph ? "graph" : "sequential")) {
      QConfigRegistry reg;
      reg.set_global("int8_dyn_act_int4_weight");
      reg.set_module_name("fc2", "int8_default");
      manual_seed(41);
      nn::ModulePtr model = mlp();
      const Tensor example = Tensor::zeros(Shape{1, 64});
      if (graph)
        prepare_qat(*model, reg, example);
      else
        prepare_qat(*model, reg);
      train_random(*model, 42);
      Generator gen(43);
      const Tensor x = Tensor::uniform(Shape{37, 64}, -1.5, 1.5, gen);
      NoGradGuard ng;
      const Tensor want = model->forward(x);
      const ConvertReport rep = graph ? convert(*model, example) : convert(*model);
      const std::string table = rep.table();
      BOOST_TEST(table.find("DynamicQuantizedLinear") != std::string::npos, table);
      BOOST_TEST(table.find("DynamicQuantDequant") != std::string::npos, table);
      BOOST_TEST(model->child("fc1")->type_name() == "DynamicQuantizedLinear");
      BOOST_TEST(model->child("fc2")->type_name() == "DynamicQuantizedLinear");
      const Tensor got = model->forward(x);
      BOOST_TEST(got.dtype() == DType::Float32);
      // float summation order only: far below one output step (logits ~1, 8-bit steps ~1e-2)
      BOOST_TEST(max_abs_diff(got, want) < 2e-2, max_abs_diff(got, want));
      const Tensor am = argmax(got, 1), bm = argmax(want, 1);
      std::int64_t same = 0;
      for (std::int64_t i = 0; i < 37; ++i)
        same += am.data<std::int64_t>()[i] == bm.data<std::int64_t>()[i];
      BOOST_TEST(same >= 36);
      // checkpoint round trip into the structure convert builds without calibration
      const io::Checkpoint ckpt = io::capture(*model);
      nn::ModulePtr fresh = mlp();
      prepare_qat(*fresh, reg);
      convert(*fresh, ConvertOptions{.require_calibrated = false});
      io::load_into(*fresh, io::from_bytes(io::to_bytes(ckpt)));
      fresh->eval();
      BOOST_TEST(fresh->forward(x).to_vector<float>() == got.to_vector<float>(), tt::per_element());
      // every path gives the same bits
      for_each_int8_isa([&](cpu::Isa) {
        BOOST_TEST(model->forward(x).to_vector<float>() == got.to_vector<float>(), tt::per_element());
      });
    }
  }
}

BOOST_AUTO_TEST_CASE(hostile_values_and_refusals) {
  QConfigRegistry reg;
  reg.set_global("int8_dyn_act_int4_weight");
  manual_seed(51);
  nn::ModulePtr model = mlp();
  prepare_qat(*model, reg);
  train_random(*model, 52);
  convert(*model);
  const io::Checkpoint good = io::capture(*model);
  auto load_with = [&](const std::string& name, std::int64_t index, double value) {
    io::Checkpoint bad = good;
    for (auto& [n, t] : bad.tensors)
      if (n == name) {
        t = t.clone();
        if (t.dtype() == DType::Int8)
          t.data<std::int8_t>()[index] = static_cast<std::int8_t>(value);
        else
          t.data<float>()[index] = static_cast<float>(value);
      }
    return error_of([&] { io::load_into(*model, io::from_bytes(io::to_bytes(bad))); });
  };
  std::string e = load_with("fc1.weight", 5, 100);  // not an int4 code
  BOOST_TEST(e.find("fc1.weight[5] = 100: not an int4 weight code in [-8, 7]") != std::string::npos, e);
  e = load_with("fc2.weight_scale", 1, 0);
  BOOST_TEST(e.find("fc2.weight_scale[1] = 0") != std::string::npos, e);
  e = load_with("fc3.bias", 2, std::nan(""));
  BOOST_TEST(e.find("fc3.bias[2]") != std::string::npos, e);
  // constructor errors name the argument and the shape
  DynamicQuantizedLinear::Options opt;
  opt.group = 32;
  opt.weight_bits = 4;
  e = error_of([&] {
    DynamicQuantizedLinear(Tensor::zeros(Shape{4, 64}, DType::Int8), Tensor::ones(Shape{4, 3}), Tensor(),
                           opt);
  });
  BOOST_TEST(e.find("weight_scale must be (4, 2)") != std::string::npos, e);
  DynamicQuantizedLinear uint8_only(Tensor::zeros(Shape{4, 64}, DType::Int8), Tensor::ones(Shape{4, 2}),
                                    Tensor(), opt);
  e = error_of([&] { uint8_only.forward(Tensor::zeros(Shape{2, 64})); });
  BOOST_TEST(e.find("converted for a uint8 input") != std::string::npos, e);
  e = error_of([&] { uint8_only.forward(Tensor::zeros(Shape{2, 63})); });
  BOOST_TEST(e.find("does not end in in_features = 64") != std::string::npos, e);

  // a conv with the config is refused by name; so is a ReLU between a dynamic output and a Linear
  auto cnn = std::make_shared<nn::Sequential>(
      nn::NamedModules{{"quant", std::make_shared<QuantStub>()},
                       {"conv", std::make_shared<nn::Conv2d>(1, 4, 3)},
                       {"flatten", std::make_shared<nn::Flatten>()},
                       {"fc", std::make_shared<nn::Linear>(4 * 6 * 6, 10)},
                       {"dequant", std::make_shared<DeQuantStub>()}});
  QConfigRegistry creg;  // the conv reads the stub's dynamically quantized output
  creg.set_module_name("quant", "int8_dyn_act_int4_weight");
  prepare_qat(*cnn, creg);
  {
    NoGradGuard ng;
    cnn->train();
    cnn->forward(Tensor::zeros(Shape{2, 1, 8, 8}));
  }
  e = error_of([&] { convert(*cnn); });
  BOOST_TEST(
      e.find("layer 'conv' (QuantConv2d) reads a dynamically quantized input") != std::string::npos, e);
  auto relu_between =
      std::make_shared<nn::Sequential>(nn::NamedModules{{"quant", std::make_shared<QuantStub>()},
                                                        {"fc1", std::make_shared<nn::Linear>(64, 32)},
                                                        {"drop", std::make_shared<nn::Dropout>(0.1)},
                                                        {"relu", std::make_shared<nn::ReLU>()},
                                                        {"fc2", std::make_shared<nn::Linear>(32, 10)},
                                                        {"dequant", std::make_shared<DeQuantStub>()}});
  prepare_qat(*relu_between, reg);
  train_random(*relu_between, 53);
  e = error_of([&] { convert(*relu_between); });
  BOOST_TEST(e.find("layer 'relu' (ReLU) reads dynamically quantized values") != std::string::npos, e);
}

// Fashion-MNIST, an MLP 784-64-10 under int8_dyn_act_int4_weight (fc1: 784 inputs are no whole
// number of groups of 32, so int8 per-channel weights with the same dynamic activations), 1 epoch
// on 4000 images: the converted model's predictions on 2000 test images against the QAT model's.
BOOST_AUTO_TEST_CASE(trained_model_predictions_match) {
  if (!std::filesystem::exists(data::kFashionMnistDir)) {
    BOOST_TEST_MESSAGE("skipped: no Fashion-MNIST at " << data::kFashionMnistDir);
    return;
  }
  auto first = [](const data::Dataset& d, std::int64_t n) {
    return data::Dataset{d.images.rows(0, n), d.labels.rows(0, n), d.num_classes};
  };
  const data::Dataset train = first(data::load_fashion_mnist(data::kFashionMnistDir, true), 4000);
  const data::Dataset test = first(data::load_fashion_mnist(data::kFashionMnistDir, false), 2000);
  manual_seed(61);
  auto model =
      std::make_shared<nn::Sequential>(nn::NamedModules{{"quant", std::make_shared<QuantStub>()},
                                                        {"fc1", std::make_shared<nn::Linear>(784, 64)},
                                                        {"relu1", std::make_shared<nn::ReLU>()},
                                                        {"fc2", std::make_shared<nn::Linear>(64, 10)},
                                                        {"dequant", std::make_shared<DeQuantStub>()}});
  QConfigRegistry reg;
  reg.set_global("int8_dyn_act_int4_weight");
  QConfig w8 = reg.get("int8_dyn_act_int4_weight");
  w8.name = "int8_dyn_act_int8_weight";
  w8.weight = reg.get("int8_default").weight;
  reg.register_config(w8);
  reg.set_module_name("fc1", "int8_dyn_act_int8_weight");
  prepare_qat(*model, reg);
  optim::SGD opt(model->named_parameters(), {.lr = 0.05, .momentum = 0.9});
  data::DataLoader loader(train, {.batch_size = 64, .seed = 0, .flatten = true});
  model->train();
  for (const data::Batch& b : loader) {
    opt.zero_grad();
    cross_entropy(model->forward(b.images), b.labels).backward();
    opt.step();
  }
  model->eval();
  NoGradGuard ng;
  data::DataLoader tl(test, {.batch_size = 2000, .shuffle = false, .flatten = true});
  data::Batch b;
  BOOST_REQUIRE(tl.next(b));
  const Tensor qat_logits = model->forward(b.images);
  convert(*model);
  const Tensor int8_logits = model->forward(b.images);
  const Tensor pa = argmax(qat_logits, 1), pb = argmax(int8_logits, 1);
  std::int64_t same = 0, correct_qat = 0, correct_int8 = 0;
  for (std::int64_t i = 0; i < 2000; ++i) {
    const auto label = b.labels.data<std::int64_t>()[i];
    same += pa.data<std::int64_t>()[i] == pb.data<std::int64_t>()[i];
    correct_qat += pa.data<std::int64_t>()[i] == label;
    correct_int8 += pb.data<std::int64_t>()[i] == label;
  }
  // the logits leave through the dynamic output quantizer: differences come in its steps (the
  // row's scale); the float summation order moves at most a few values across a rounding edge
  const QParams out = dynamic_qparams(qat_logits, reg.get("int8_dyn_act_int4_weight").activation->spec);
  double diff = 0, steps = 0;
  std::int64_t moved = 0;
  for (std::int64_t i = 0; i < 2000; ++i)
    for (std::int64_t c = 0; c < 10; ++c) {
      const double d = std::fabs(double(qat_logits.data<float>()[i * 10 + c]) -
                                 int8_logits.data<float>()[i * 10 + c]);
      diff = std::max(diff, d);
      steps = std::max(steps, d / out.scale.data<float>()[i]);
      moved += d > 1e-3 * out.scale.data<float>()[i];
    }
  BOOST_TEST_MESSAGE("8da4w MLP: QAT acc " << correct_qat / 2000.0 << ", int8 acc "
                                           << correct_int8 / 2000.0 << ", agreement " << same / 2000.0
                                           << ", max logit diff " << diff << " (" << steps
                                           << " output steps), " << moved
                                           << " of 20000 logits differ by more than 1e-3 steps");
  BOOST_TEST(correct_qat > 1400);  // trained (chance is 200)
  BOOST_TEST(same >= 1998);
  BOOST_TEST(steps < 1.1, steps);  // one step of the output quantizer (its scale may move too)
  BOOST_TEST(moved <= 20, moved);
}

BOOST_AUTO_TEST_SUITE_END()
