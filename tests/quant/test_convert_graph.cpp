// convert from the captured graph: any Module tree, functional ops, errors that name the layer.
#include <boost/test/unit_test.hpp>

#include "framework/autograd/grad_mode.h"
#include "framework/io/restore.h"
#include "framework/optim/sgd.h"
#include "quant/graph_models.h"
#include "quant/quant_test_util.h"

using namespace qat;
using namespace qat::quant;
using qat::test::error_of;
using qat::test::SmallResNet;
using qat::test::train_on_noise;

namespace {
Tensor example() { return Tensor::zeros(Shape{1, 2, 8, 8}); }

}  // namespace

BOOST_AUTO_TEST_SUITE(convert_from_graph)

BOOST_AUTO_TEST_CASE(residual_model_converts_and_agrees_with_fake_quant) {
  for (bool adaptive : {false, true}) {
    manual_seed(21);
    SmallResNet qat_model(true, adaptive);
    QConfigRegistry reg;
    prepare_qat(qat_model, reg, example());
    train_on_noise(qat_model, 6, 22);
    SmallResNet int8_model(true, adaptive);
    prepare_qat(int8_model, reg, example());
    io::load_into(int8_model, io::capture(qat_model));
    const ConvertReport r = convert(int8_model, example());
    BOOST_TEST_MESSAGE(r.table());
    BOOST_TEST(int8_model.child("quant")->type_name() == "Quantize");
    BOOST_TEST(int8_model.child("stem")->type_name() == "QuantizedConv2d");
    BOOST_TEST(int8_model.submodule("block.conv2")->type_name() == "QuantizedConv2d");
    BOOST_TEST(int8_model.submodule("block.skip")->type_name() == "QuantizedAddReLU");
    BOOST_TEST(int8_model.child("fc")->type_name() == "QuantizedLinear");
    BOOST_TEST(int8_model.child("dequant")->type_name() == "Dequantize");
    BOOST_TEST(r.notes.empty());
    Generator gen(23);
    const Tensor x = Tensor::uniform(Shape{400, 2, 8, 8}, 0, 1, gen);
    NoGradGuard ng;
    const auto a = qat_model(x).to_vector<float>(), b = int8_model(x).to_vector<float>();
    const float step =
        static_cast<float>(std::dynamic_pointer_cast<QuantizedLinear>(int8_model.child("fc"))->output_quant().scale);
    int agree = 0;
    float diff = 0;
    for (std::size_t i = 0; i < a.size(); i += 3) {
      auto arg = [](const std::vector<float>& v, std::size_t i) {
        return std::max_element(v.begin() + long(i), v.begin() + long(i) + 3) - v.begin();
      };
      agree += arg(a, i) == arg(b, i);
      for (std::size_t k = i; k < i + 3; ++k) diff = std::max(diff, std::abs(a[k] - b[k]));
    }
    BOOST_TEST(agree >= 396, "agreement " << agree << "/400 (adaptive pool " << adaptive << ")");
    // the int8 output stage computes the fake quantizer's float arithmetic: the outputs are the
    // fake-quant model's codes except near a tie the float convolution rounds across
    std::size_t exact = 0;
    for (std::size_t k = 0; k < a.size(); ++k) exact += a[k] == b[k];
    BOOST_TEST_MESSAGE("exact outputs " << exact << " / " << a.size());
    BOOST_TEST(exact >= a.size() - a.size() / 200, "exact outputs " << exact << " / " << a.size());
    // the QAT average pool is fake-quantized on its input's grid (QuantPool), as the int8 one
    BOOST_TEST(diff <= 1.01f * step, "max diff " << diff << " step " << step);
    if (adaptive) BOOST_TEST(qat_model.child("pool")->type_name() == "QuantAdaptiveAvgPool2d");
  }
}

BOOST_AUTO_TEST_CASE(float_ops_on_int8_values_are_refused_naming_them) {
  SmallResNet net(/*quantized_add=*/false, /*adaptive_pool=*/false);
  QConfigRegistry reg;
  prepare_qat(net, reg, example());
  train_on_noise(net, 1, 24);
  const std::string msg = error_of([&] { convert(net, example()); });
  BOOST_TEST(msg ==
                 "convert: op 'add' in (root) > block receives int8 values from 'stem' (ConvBnReLU2d) and has no "
                 "int8 version: use a quantized functional op (quant::Add, quant::Mul through "
                 "nn::Child<quant::Functional>)",
             msg);
  BOOST_TEST(net.child("stem")->type_name() == "ConvBnReLU2d");  // unchanged
  BOOST_TEST(net.child("quant")->type_name() == "QuantStub");
}

BOOST_AUTO_TEST_CASE(misuse_gets_clear_errors) {
  QConfigRegistry reg;
  // never prepared
  SmallResNet plain;
  BOOST_TEST(error_of([&] { convert(plain, example()); }) ==
             "convert: the model has no quantizers: call prepare_qat (then train, or calibrate with "
             "quant::calibrate) before convert");
  // prepared, never trained or calibrated: observers recorded nothing (eval() records nothing)
  SmallResNet fresh(true, false);
  prepare_qat(fresh, reg, example());
  fresh.eval();
  fresh(Tensor::ones(Shape{2, 2, 8, 8}));
  BOOST_TEST(error_of([&] { convert(fresh, example()); }) ==
             "convert: layer 'quant': its output quantizer never observed data (train the model, or "
             "calibrate it with quant::calibrate, before convert)");
  // a non-Sequential model without the graph
  BOOST_TEST(error_of([&] { convert(fresh); }).find("which is not a Sequential: its execution order (and "
                                                   "so its input quantization) is unknown without the "
                                                   "graph; call convert(model, example_input)") !=
             std::string::npos);
  // a quantized layer reading float values (no QuantStub on its path)
  struct NoStub : nn::Module {
    NoStub() : nn::Module("NoStub") {}
    Tensor forward(const Tensor& x) override { return fc_(x); }
    nn::Child<> fc_ = register_child("fc", std::make_shared<nn::Linear>(3, 2));
  } ns;
  prepare_qat(ns, reg, Tensor::zeros(Shape{1, 3}));
  BOOST_TEST(error_of([&] { convert(ns, Tensor::zeros(Shape{1, 3}), {.require_calibrated = false}); }) ==
             "convert: layer 'fc' receives a float input (from the model input); put a QuantStub before it");
}

BOOST_AUTO_TEST_CASE(model_returning_int8_is_noted) {
  nn::Sequential seq(nn::NamedModules{{"quant", std::make_shared<QuantStub>()},
                                      {"fc", std::make_shared<nn::Linear>(3, 2)}});
  QConfigRegistry reg;
  prepare_qat(seq, reg, Tensor::zeros(Shape{1, 3}));
  const ConvertReport r = convert(seq, Tensor::zeros(Shape{1, 3}), {.require_calibrated = false});
  BOOST_REQUIRE(r.notes.size() == 1u);
  BOOST_TEST(r.table().find("note: the model returns int8 values") != std::string::npos);
  BOOST_TEST(seq(Tensor::ones(Shape{1, 3})).dtype() == DType::UInt8);
}

BOOST_AUTO_TEST_SUITE_END()
