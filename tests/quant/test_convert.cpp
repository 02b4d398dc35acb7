// Integer inference: the fixed-point arithmetic, convert(), and quantized checkpoints.
#include <unistd.h>

#include <boost/test/unit_test.hpp>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "common/errors.h"
#include "common/isa.h"
#include "framework/autograd/grad_mode.h"
#include "framework/autograd/ops.h"
#include "framework/io/checkpoint.h"
#include "framework/io/restore.h"
#include "framework/nn/nn.h"
#include "framework/optim/sgd.h"
#include "framework/tensor/random.h"
#include "modules/quant/int8_kernels.h"
#include "modules/quant/quant.h"

using namespace qat;
using namespace qat::quant;
using test::error_of;
namespace tt = boost::test_tools;

namespace {
nn::ModulePtr mlp() {
  return std::make_shared<nn::Sequential>(
      nn::NamedModules{{"quant", std::make_shared<QuantStub>()},
                       {"fc1", std::make_shared<nn::Linear>(16, 32)},
                       {"relu1", std::make_shared<nn::ReLU>()},
                       {"fc2", std::make_shared<nn::Linear>(32, 4)},
                       {"dequant", std::make_shared<DeQuantStub>()}});
}

nn::ModulePtr cnn(bool bn) {
  auto net = std::make_shared<nn::Sequential>();
  net->push_back("quant", std::make_shared<QuantStub>());
  net->push_back("conv1", std::make_shared<nn::Conv2d>(2, 6, 3, Conv2dParams{.padding = {1, 1}}));
  if (bn) net->push_back("bn1", std::make_shared<nn::BatchNorm2d>(6));
  net->push_back("relu1", std::make_shared<nn::ReLU>());
  net->push_back("pool", std::make_shared<nn::MaxPool2d>(2));
  net->push_back(
      "conv2", std::make_shared<nn::Conv2d>(6, 8, 3, Conv2dParams{.stride = {2, 2}, .padding = {1, 1}}));
  net->push_back("relu2", std::make_shared<nn::ReLU>());
  net->push_back("flatten", std::make_shared<nn::Flatten>());
  net->push_back("fc", std::make_shared<nn::Linear>(8 * 2 * 2, 3));
  net->push_back("dequant", std::make_shared<DeQuantStub>());
  return net;
}

// Trains a prepared model for a few SGD steps on random data so that observers and weights move.
void train(nn::Module& model, const Shape& input, std::int64_t classes, std::uint64_t seed) {
  Generator gen(seed);
  optim::SGD opt(model.named_parameters(), {.lr = 0.05, .momentum = 0.9});
  model.train();
  for (int step = 0; step < 30; ++step) {
    Tensor x = Tensor::uniform(input, 0, 1, gen);
    std::vector<std::int64_t> y(input[0]);
    for (auto& v : y) v = static_cast<std::int64_t>(gen.below(classes));
    opt.zero_grad();
    cross_entropy(model.forward(x), Tensor::from_vector<std::int64_t>(y, Shape{input[0]})).backward();
    opt.step();
  }
  model.eval();
}

// A converted copy of `model` (through an in-memory checkpoint, as the examples do).
nn::ModulePtr converted(const nn::Module& model, const std::function<nn::ModulePtr()>& build,
                        const QConfigRegistry& reg) {
  nn::ModulePtr copy = build();
  prepare_qat(*copy, reg);
  io::load_into(*copy, io::capture(model));
  convert(*copy);
  return copy;
}

double agreement(nn::Module& a, nn::Module& b, const Tensor& x, double* max_diff) {
  NoGradGuard ng;
  const Tensor ya = a.forward(x), yb = b.forward(x);
  const Tensor pa = argmax(ya, 1), pb = argmax(yb, 1);
  std::int64_t same = 0;
  for (std::int64_t i = 0; i < pa.numel(); ++i)
    same += pa.data<std::int64_t>()[i] == pb.data<std::int64_t>()[i];
  *max_diff = 0;
  for (std::int64_t i = 0; i < ya.numel(); ++i)
    *max_diff = std::max(*max_diff, double(std::fabs(ya.data<float>()[i] - yb.data<float>()[i])));
  return double(same) / double(pa.numel());
}
}  // namespace

BOOST_AUTO_TEST_SUITE(int8_arithmetic)

// round(x * M) by the fixed-point path equals the exact product rounded once (ties away from
// zero), for multipliers across many binades; M itself is within 2^-31 relative of the real one.
BOOST_AUTO_TEST_CASE(fixed_point_multiplier_matches_exact_rounding) {
  Generator gen(1);
  int checked = 0;
  for (int trial = 0; trial < 20000; ++trial) {
    const double m = std::ldexp(0.5 + 0.5 * gen.uniform(), -static_cast<int>(gen.below(20)));
    const auto x = static_cast<std::int32_t>(static_cast<std::int64_t>(gen.below(1u << 24)) - (1 << 23));
    const int8::Multiplier q = int8::quantize_multiplier(m);
    BOOST_REQUIRE(q.m0 >= (1 << 30));
    const long double fixed = static_cast<long double>(q.m0) * std::ldexp(1.0L, q.shift - 31);
    BOOST_REQUIRE(std::fabs(static_cast<double>(fixed / m - 1)) < 1e-9);
    const long double exact = x * fixed;  // 64-bit mantissa: exact
    const long double want = std::copysign(std::floor(std::fabs(exact) + 0.5L), exact);
    if (int8::multiply_by_quantized_multiplier(x, q) != static_cast<std::int32_t>(want)) {
      BOOST_ERROR("x " << x << " m " << m);
      break;
    }
    ++checked;
  }
  BOOST_TEST(checked == 20000);
  BOOST_TEST(int8::quantize_multiplier(0.0).m0 == 0);
  BOOST_TEST(int8::multiply_by_quantized_multiplier(1000, int8::quantize_multiplier(0.25)) == 250);
  BOOST_TEST(int8::multiply_by_quantized_multiplier(-6, int8::quantize_multiplier(0.25)) ==
             -2);  // -1.5 -> -2
}

BOOST_AUTO_TEST_CASE(linear_kernel_by_hand) {
  // x = [10, 20] (zero point 10), w = [[1, -2], [3, 4]], s_in s_w = 0.5, bias [2.5, -3.5],
  // s_out 1, out zp 100
  const std::uint8_t x[] = {10, 20};
  const std::int8_t w[] = {1, -2, 3, 4};
  const std::int32_t sums[] = {-1, 7};
  const float scale[] = {0.5f, 0.5f}, bias[] = {2.5f, -3.5f};
  std::uint8_t y[2];
  int8::linear_u8s8(x, 1, 2, 10, w, sums, 2, {scale, bias, 1.0f, 100, 0, 255}, y);
  // acc0 = (0)(1) + (10)(-2) = -20 -> -10 + 2.5 = -7.5 -> -8 (half to even) -> 92;
  // acc1 = 40 -> 20 - 3.5 = 16.5 -> 16 -> 116
  BOOST_TEST(int(y[0]) == 92);
  BOOST_TEST(int(y[1]) == 116);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(convert_models)

BOOST_AUTO_TEST_CASE(mlp_int8_agrees_with_fake_quant) {
  for (const char* preset :
       {"int8_default", "int8_fbgemm", "int8_lsq", "int4_lsq", "int3_lsq", "int2_lsq", "int8_pact"}) {
    manual_seed(3);
    QConfigRegistry reg;
    reg.set_global(preset);
    nn::ModulePtr model = mlp();
    prepare_qat(*model, reg);
    train(*model, Shape{32, 16}, 4, 4);
    nn::ModulePtr q = converted(*model, mlp, reg);
    BOOST_TEST(q->child("fc1")->type_name() == "QuantizedLinear");
    Generator gen(5);
    const Tensor x = Tensor::uniform(Shape{2000, 16}, 0, 1, gen);
    double diff = 0;
    const double agree = agreement(*model, *q, x, &diff);
    // random labels leave many near-ties between the top two logits, where a one-code
    // difference flips the prediction; trained on real data the agreement is >= 99.9%
    BOOST_TEST(agree >= 0.99, preset << " agreement " << agree);
    const float out_scale = static_cast<float>(
        std::dynamic_pointer_cast<QuantizedLinear>(q->child("fc2"))->output_quant().scale);
    BOOST_TEST(diff <= 2.01 * out_scale,
               preset << " max logit difference " << diff << " vs step " << out_scale);
  }
}

// int8_fbgemm (activations in [0, 127]) runs the narrow int8 kernels (vpmaddubsw on AVX2 /
// AVX-512): the same bytes on every path.
BOOST_AUTO_TEST_CASE(cnn_with_folded_batch_norm_agrees) {
  for (const char* preset : {"int8_default", "int8_fbgemm"})
    for (bool bn : {false, true}) {
      manual_seed(6);
      QConfigRegistry reg;
      reg.set_global(preset);
      nn::ModulePtr model = cnn(bn);
      prepare_qat(*model, reg);
      train(*model, Shape{16, 2, 8, 8}, 3, 7);
      auto build = [bn] { return cnn(bn); };
      nn::ModulePtr q = converted(*model, build, reg);
      BOOST_TEST(q->child("conv1")->type_name() == "QuantizedConv2d");
      BOOST_TEST(q->child("pool")->type_name() == "QuantizedMaxPool2d");
      Generator gen(8);
      const Tensor x = Tensor::uniform(Shape{1000, 2, 8, 8}, 0, 1, gen);
      double diff = 0;
      const double agree = agreement(*model, *q, x, &diff);
      BOOST_TEST(agree >= 0.995, preset << (bn ? " cnn-bn" : " cnn") << " agreement " << agree);
      NoGradGuard ng;
      const auto want = q->forward(x).to_vector<float>();
      qat::test::for_each_int8_isa(
          [&](cpu::Isa) { BOOST_TEST(q->forward(x).to_vector<float>() == want); });
    }
}

// convert keeps conv -> relu -> pool -> conv -> relu -> flatten -> fc channels-last: the same
// output bytes as the NCHW layers on every path (odd batch, BN folded or not).
BOOST_AUTO_TEST_CASE(channels_last_region_is_bit_identical_to_nchw) {
  for (bool bn : {false, true}) {
    manual_seed(16);
    QConfigRegistry reg;
    nn::ModulePtr q = cnn(bn);
    prepare_qat(*q, reg);
    train(*q, Shape{16, 2, 8, 8}, 3, 17);
    convert(*q);
    auto conv1 = std::dynamic_pointer_cast<QuantizedConv2d>(q->child("conv1"));
    auto conv2 = std::dynamic_pointer_cast<QuantizedConv2d>(q->child("conv2"));
    auto pool = std::dynamic_pointer_cast<QuantizedMaxPool2d>(q->child("pool"));
    auto fc = std::dynamic_pointer_cast<QuantizedLinear>(q->child("fc"));
    BOOST_TEST((!conv1->input_channels_last() && conv1->output_channels_last()));
    BOOST_TEST((conv2->input_channels_last() && conv2->output_channels_last()));
    BOOST_TEST(pool->channels_last());
    BOOST_TEST(fc->input_channels_last() == 8);
    Generator gen(18);
    const Tensor x = Tensor::uniform(Shape{37, 2, 8, 8}, 0, 1, gen);
    NoGradGuard ng;
    qat::test::for_each_int8_isa([&](cpu::Isa) {
      conv1->set_layout(false, true);
      conv2->set_layout(true, true);
      pool->set_channels_last(true);
      fc->set_input_channels_last(8);
      const auto fast = q->forward(x).to_vector<float>();
      conv1->set_layout(false, false);
      conv2->set_layout(false, false);
      pool->set_channels_last(false);
      fc->set_input_channels_last(0);
      const auto plain = q->forward(x).to_vector<float>();
      BOOST_TEST(fast == plain, tt::per_element());
    });
  }
}

BOOST_AUTO_TEST_CASE(unsupported_models_are_refused_and_left_unchanged) {
  QConfigRegistry reg;
  auto with_avg =
      std::make_shared<nn::Sequential>(nn::NamedModules{{"quant", std::make_shared<QuantStub>()},
                                                        {"conv", std::make_shared<nn::Conv2d>(1, 2, 3)},
                                                        {"bn", std::make_shared<nn::BatchNorm2d>(2)},
                                                        {"dequant", std::make_shared<DeQuantStub>()}});
  prepare_qat(*with_avg, reg, PrepareOptions{.fuse = false});
  BOOST_TEST(
      error_of([&] { convert(*with_avg, {.require_calibrated = false}); }) ==
      "convert: layer 'bn' (BatchNorm2d) inside the quantized region has no int8 version; end the "
      "region with a DeQuantStub before it");
  BOOST_TEST(with_avg->child("conv")->type_name() == "QuantConv2d");  // unchanged

  auto no_stub =
      std::make_shared<nn::Sequential>(nn::NamedModules{{"fc", std::make_shared<nn::Linear>(4, 2)}});
  prepare_qat(*no_stub, reg);
  BOOST_TEST(error_of([&] { convert(*no_stub); }) ==
             "convert: layer 'fc' receives a float input; put a QuantStub before it");

  QConfigRegistry fp8;
  fp8.set_global("fp8_e4m3");
  nn::ModulePtr m = mlp();
  prepare_qat(*m, fp8);
  BOOST_TEST(error_of([&] {
               convert(*m, {.require_calibrated = false});
             }).find("is not supported by the int8 backend") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(quantized_layers_check_their_input) {
  QConfigRegistry reg;
  nn::ModulePtr model = mlp();
  prepare_qat(*model, reg);
  train(*model, Shape{8, 16}, 4, 9);
  convert(*model);
  const Tensor wrong = Tensor::zeros(Shape{2, 16}, DType::UInt8).set_quant_info({0.5, 3});
  const std::string msg = error_of([&] { model->child("fc1")->forward(wrong); });
  BOOST_TEST(msg.find("QuantizedLinear: input is quantized with scale=0.5, zero_point=3 but the layer "
                      "was converted for") == 0,
             msg);
  BOOST_TEST(error_of([&] {
               model->child("fc1")->forward(Tensor::zeros(Shape{2, 16}));
             }).find("expects a quantized uint8 input") != std::string::npos);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(quantized_checkpoints)

BOOST_AUTO_TEST_CASE(int8_checkpoint_round_trip_and_size) {
  manual_seed(10);
  QConfigRegistry reg;
  auto build = [] { return cnn(true); };
  nn::ModulePtr model = build();
  prepare_qat(*model, reg);
  train(*model, Shape{16, 2, 8, 8}, 3, 11);
  nn::ModulePtr q = converted(*model, build, reg);
  const auto dir =
      std::filesystem::temp_directory_path() / ("qat_test_convert_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "model.int8").string();
  io::Checkpoint ckpt = io::capture(*q);
  ckpt.metadata["kind"] = "int8";
  io::save(ckpt, path);
  // a fresh prepared + converted model (untrained qparams) takes the file strictly
  nn::ModulePtr fresh = build();
  prepare_qat(*fresh, reg);
  BOOST_TEST(error_of([&] { convert(*build()); }) ==
             "convert: the model has no quantizers: call prepare_qat (then train, or calibrate with "
             "quant::calibrate) before convert");
  BOOST_TEST(error_of([&] { convert(*fresh); }) ==
             "convert: layer 'quant': its output quantizer never observed data (train the model, or "
             "calibrate it with quant::calibrate, before convert)");
  convert(*fresh, {.require_calibrated = false});
  BOOST_TEST(error_of([&] { convert(*fresh); }).find("the model is converted already") !=
             std::string::npos);
  io::load_into(*fresh, path);
  Generator gen(12);
  const Tensor x = Tensor::uniform(Shape{50, 2, 8, 8}, 0, 1, gen);
  NoGradGuard ng;
  BOOST_TEST(fresh->forward(x).to_vector<float>() == q->forward(x).to_vector<float>(),
             tt::per_element());
  // int8 weights: smaller than the float checkpoint of the same network (this
  // toy network is mostly qparams and names; the examples' models measure about 0.25x)
  const std::size_t fp32_bytes = io::to_bytes(io::capture(*build())).size();
  BOOST_TEST(io::to_bytes(io::capture(*q)).size() < fp32_bytes);
  std::filesystem::remove_all(dir);
}

// A checkpoint written before the float output stage holds each int8 layer's bias as int32 q at
// s_in s_w[o]: load_into turns it into the float bias q s_in s_w[o]; without the scales it stays a
// dtype mismatch.
BOOST_AUTO_TEST_CASE(int32_bias_of_older_checkpoints_is_upgraded) {
  auto make = [] {
    const Tensor ws = Tensor::full(Shape{2}, 0.25, DType::Float32);
    return std::make_shared<nn::Sequential>(
        nn::NamedModules{{"fc", std::make_shared<QuantizedLinear>(
                                    Tensor::zeros(Shape{2, 3}, DType::Int8), ws, Tensor::zeros(Shape{2}),
                                    QuantInfo{0.5, 3}, ActivationQuant{{0.1, 10}, 0, 255}, false)}});
  };
  auto model = make();
  io::Checkpoint old = io::capture(*model);
  for (auto& [name, t] : old.tensors)
    if (name == "fc.bias") {
      t = Tensor::empty(Shape{2}, DType::Int32);
      t.data<std::int32_t>()[0] = 12;
      t.data<std::int32_t>()[1] = -7;
    }
  io::load_into(*model, io::from_bytes(io::to_bytes(old)));
  const auto& fc = dynamic_cast<const QuantizedLinear&>(*model->child("fc"));
  BOOST_TEST((fc.bias().dtype() == DType::Float32));
  BOOST_TEST(fc.bias().data<float>()[0] == 1.5f);     // 12 x 0.5 x 0.25
  BOOST_TEST(fc.bias().data<float>()[1] == -0.875f);  // -7 x 0.5 x 0.25
  // a float bias that is not finite, or beyond the int32 accumulator's room, is refused by name
  io::Checkpoint bad = io::capture(*model);
  for (auto& [name, t] : bad.tensors)
    if (name == "fc.bias") t = Tensor::from_vector<float>({std::nanf(""), 1e30f}, Shape{2});
  const std::string msg = error_of([&] { io::load_into(*make(), bad); });
  BOOST_TEST(msg.find("fc.bias[0] = nan") != std::string::npos, msg);
  BOOST_TEST(
      msg.find("fc.bias[1] = 1.00000002e+30: 8.00000012e+30 accumulator units") != std::string::npos,
      msg);
  std::erase_if(old.tensors, [](const auto& nt) { return nt.first == "fc.weight_scale"; });
  BOOST_TEST(error_of([&] { io::load_into(*make(), old); }).find("fc.bias") != std::string::npos);
}

// The demo MLP (784-256-128-10): the int8 checkpoint is at most 0.3x the float one.
BOOST_AUTO_TEST_CASE(int8_checkpoint_is_small) {
  auto build = [] {
    return std::make_shared<nn::Sequential>(
        nn::NamedModules{{"quant", std::make_shared<QuantStub>()},
                         {"fc1", std::make_shared<nn::Linear>(784, 256)},
                         {"relu1", std::make_shared<nn::ReLU>()},
                         {"fc2", std::make_shared<nn::Linear>(256, 128)},
                         {"relu2", std::make_shared<nn::ReLU>()},
                         {"fc3", std::make_shared<nn::Linear>(128, 10)},
                         {"dequant", std::make_shared<DeQuantStub>()}});
  };
  nn::ModulePtr q = build();
  QConfigRegistry reg;
  prepare_qat(*q, reg);
  convert(*q, {.require_calibrated = false});
  const double ratio =
      double(io::to_bytes(io::capture(*q)).size()) / double(io::to_bytes(io::capture(*build())).size());
  BOOST_TEST_MESSAGE("int8 / fp32 checkpoint size: " << ratio);
  BOOST_TEST(ratio <= 0.3);
}

// Every quantizer module type round-trips through memory and files: identical outputs after load.
BOOST_AUTO_TEST_CASE(qat_checkpoint_round_trip_for_every_quantizer) {
  QConfigRegistry reg;
  QuantizerConfig hist{.spec = QuantSpec::activation_affine(8), .observer = ObserverKind::Histogram};
  reg.register_config(QConfig{"hist", QuantizerConfig{.spec = QuantSpec::weight_per_channel(8)}, hist});
  QConfig block{"block", QuantizerConfig{.spec = QuantSpec::weight_per_block(4, 8, -1, 8)},
                QuantizerConfig{.spec = QuantSpec::activation_affine(8)}};
  reg.register_config(block);
  for (const char* preset :
       {"int8_default", "int8_lsq", "int4_lsq", "int8_pact", "fp8_e4m3", "hist", "block"}) {
    for (bool through_file : {false, true}) {
      manual_seed(13);
      reg.set_global(preset);
      nn::ModulePtr model = mlp();
      prepare_qat(*model, reg);
      train(*model, Shape{16, 16}, 4, 14);
      io::Checkpoint ckpt = io::capture(*model);
      nn::ModulePtr copy = mlp();
      prepare_qat(*copy, reg);
      if (through_file) {
        const std::string path =
            (std::filesystem::temp_directory_path() / ("qat_rt_" + std::to_string(::getpid()) + ".ckpt"))
                .string();
        io::save(ckpt, path);
        io::load_into(*copy, path);
        std::filesystem::remove(path);
      } else {
        io::load_into(*copy, io::from_bytes(io::to_bytes(ckpt, {.archive = io::ArchiveKind::Xml})));
      }
      copy->eval();
      Generator gen(15);
      const Tensor x = Tensor::uniform(Shape{20, 16}, 0, 1, gen);
      NoGradGuard ng;
      BOOST_TEST(copy->forward(x).to_vector<float>() == model->forward(x).to_vector<float>(),
                 tt::per_element());
    }
  }
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(analysis)

BOOST_AUTO_TEST_CASE(quantize_dequantize_equal_fake_quant) {
  Generator gen(20);
  const Tensor x = Tensor::uniform(Shape{6, 40}, -3, 5, gen);
  for (const QuantSpec& spec : {QuantSpec::activation_affine(8), QuantSpec::weight_per_channel(8),
                                QuantSpec::weight_per_channel(12), QuantSpec::activation_affine(10),
                                QuantSpec::weight_per_block(4, 8, -1)}) {
    MinMaxObserver obs(spec, param_shape(spec, x.shape()));
    obs.forward(x);
    const QParams q = obs.calculate_qparams();
    const Tensor codes = quantize(x, q, spec);
    BOOST_TEST((codes.dtype() == storage_dtype(spec)));
    BOOST_TEST(
        dequantize(codes, q, spec).to_vector<float>() == fake_quantize(x, q, spec).to_vector<float>(),
        tt::per_element());
    // every value inside the range is within the error bound
    const Tensor fq = fake_quantize(x, q, spec);
    double worst = 0;
    for (std::int64_t i = 0; i < x.numel(); ++i)
      worst = std::max(worst, double(std::fabs(x.data<float>()[i] - fq.data<float>()[i])));
    BOOST_TEST(worst <= error_bound(q) * (1 + 1e-6), spec.str());
  }
  BOOST_TEST((storage_dtype(QuantSpec::activation_affine(12)) == DType::Int32));
  const QuantSpec u8 = QuantSpec::activation_affine(8);
  const QParams q{Tensor::full(Shape{1}, 0.5, DType::Float32), Tensor::full(Shape{1}, 10, DType::Int32)};
  const Tensor c = quantize(Tensor::from_vector<float>({0.0f, 1.25f, -100.f, 1000.f}, Shape{4}), q, u8);
  BOOST_TEST(c.to_vector<std::uint8_t>() == (std::vector<std::uint8_t>{10, 12, 0, 255}),
             tt::per_element());
  BOOST_TEST(c.quant_info().zero_point == 10);
}

BOOST_AUTO_TEST_CASE(error_measures) {
  const QuantSpec spec = QuantSpec::activation_affine(8);
  const QParams q{Tensor::full(Shape{1}, 0.5, DType::Float32), Tensor::zeros(Shape{1}, DType::Int32)};
  // x = [0.1, 0.5, 0.8] -> [0, 0.5, 1.0]: errors 0.1, 0, 0.2
  const Tensor x = Tensor::from_vector<float>({0.1f, 0.5f, 0.8f}, Shape{3});
  BOOST_TEST(quantization_mse(x, q, spec) == (0.01 + 0.04) / 3, tt::tolerance(1e-6));
  BOOST_TEST(error_bound(q) == 0.25);
  BOOST_TEST(std::isinf(sqnr_db(x, x)));
  // uniform data on [0, 1]: E[x^2] = 1/3 over noise variance step^2 / 12, step = 1/255
  Generator gen(21);
  const Tensor u = Tensor::uniform(Shape{100000}, 0, 1, gen);
  MinMaxObserver obs(spec);
  obs.forward(u);
  NoGradGuard ng;
  const double sqnr = sqnr_db(u, fake_quantize(u, obs.calculate_qparams(), spec));
  BOOST_TEST(sqnr == 10 * std::log10(4.0 * 255 * 255), tt::tolerance(0.005));
  BOOST_TEST(compression_ratio(QuantSpec::weight_per_channel(8), Shape{256, 784}) ==
                 256.0 * 784 * 32 / (256.0 * 784 * 8 + 256 * 32),
             tt::tolerance(1e-12));
  BOOST_TEST(compression_ratio(QuantSpec::weight_per_block(4, 32, -1, 8), Shape{256, 768}) ==
                 256.0 * 768 * 32 / (256.0 * 768 * 4 + 256 * 24 * 8 + 32),
             tt::tolerance(1e-12));
}

BOOST_AUTO_TEST_SUITE_END()
