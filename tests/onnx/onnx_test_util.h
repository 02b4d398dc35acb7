#pragma once
// Small models and comparisons shared by the ONNX tests.
#include <boost/test/unit_test.hpp>
#include <algorithm>
#include <cmath>
#include <memory>
#include <string>

#include "framework/autograd/grad_mode.h"
#include "framework/nn/graph.h"
#include "framework/optim/sgd.h"
#include "modules/quant/quant.h"
#include "quant/graph_models.h"

namespace qat::test::onnx_models {

using namespace qat::quant;
using qat::test::SmallResNet;
using qat::test::train_on_noise;

inline Tensor example() { return Tensor::zeros(Shape{1, 2, 8, 8}); }

inline Tensor batch(std::int64_t n, std::uint64_t seed) {
  Generator gen(seed);
  return Tensor::uniform(Shape{n, 2, 8, 8}, 0, 1, gen);
}


// stub -> flatten (128) -> linear 64 -> relu -> linear 3 -> dequant: rows long enough for
// blocks of 32.
class SmallMLP : public nn::Module {
 public:
  SmallMLP() : nn::Module("SmallMLP") {}
  Tensor forward(const Tensor& x) override { return dequant_(fc2_(relu_(fc1_(flatten_(quant_(x)))))); }
  nn::Child<> quant_ = register_child("quant", std::make_shared<QuantStub>());
  nn::Child<> flatten_ = register_child("flatten", std::make_shared<nn::Flatten>());
  nn::Child<> fc1_ = register_child("fc1", std::make_shared<nn::Linear>(128, 64));
  nn::Child<> relu_ = register_child("relu", std::make_shared<nn::ReLU>());
  nn::Child<> fc2_ = register_child("fc2", std::make_shared<nn::Linear>(64, 3));
  nn::Child<> dequant_ = register_child("dequant", std::make_shared<DeQuantStub>());
};

// SmallMLP with a BatchNorm1d after fc1: prepare_qat fuses fc1-bn-relu into a LinearBnReLU1d,
// exported with the batch norm folded.
class SmallMLPBn : public SmallMLP {
 public:
  SmallMLPBn() { bn_ = register_child("bn", std::make_shared<nn::BatchNorm1d>(64)); }
  Tensor forward(const Tensor& x) override {
    return dequant_(fc2_(relu_(bn_(fc1_(flatten_(quant_(x)))))));
  }
  nn::Child<> bn_;
};

// A test model prepared with `config` everywhere and trained a little.
template <class M = SmallResNet, class... Args>
std::shared_ptr<M> trained(const std::string& config, Args... args) {
  manual_seed(31);
  auto m = std::make_shared<M>(args...);
  QConfigRegistry reg;
  reg.set_global(config);
  prepare_qat(*m, reg, example());
  train_on_noise(*m, 8, 32);
  return m;
}
inline std::shared_ptr<SmallResNet> trained_resnet(const std::string& config) { return trained(config); }

// Largest |a - b| in units of `step`.
inline double max_steps(const Tensor& a, const Tensor& b, double step) {
  BOOST_REQUIRE(a.shape() == b.shape());
  double m = 0;
  for (std::int64_t i = 0; i < a.numel(); ++i)
    m = std::max(m, std::abs(static_cast<double>(a.data<float>()[i]) - b.data<float>()[i]) / step);
  return m;
}

inline double agreement(const Tensor& a, const Tensor& b) {
  const std::int64_t n = a.size(0), c = a.size(1);
  std::int64_t same = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    const float* pa = a.data<float>() + i * c;
    const float* pb = b.data<float>() + i * c;
    same += std::max_element(pa, pa + c) - pa == std::max_element(pb, pb + c) - pb;
  }
  return static_cast<double>(same) / static_cast<double>(n);
}

inline Tensor eval(nn::Module& m, const Tensor& x) {
  NoGradGuard no_grad;
  m.eval();
  return m(x);
}

// The scale of the quantizer that produces the model's output (the layer before DeQuantStub);
// 0 when that layer has none (weight-only configs: the output is float).
inline double output_step(nn::Module& model, const Tensor& example) {
  const nn::Graph g = nn::trace(model, example);
  int id = g.output;
  while (id >= 0 && g.nodes[static_cast<std::size_t>(id)].type == "DeQuantStub")
    id = g.nodes[static_cast<std::size_t>(id)].inputs.at(0);
  BOOST_REQUIRE(id >= 0);
  auto* layer = dynamic_cast<QatLayer*>(g.nodes[static_cast<std::size_t>(id)].module);
  BOOST_REQUIRE(layer != nullptr);
  const auto& q = layer->activation_fake_quant();
  return q ? q->qparams().scale.data<float>()[0] : 0.0;
}

}  // namespace qat::test::onnx_models
