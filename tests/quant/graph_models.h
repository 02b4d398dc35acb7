#pragma once
// Custom (non-Sequential) models for the graph-based prepare / convert tests.
#include "framework/autograd/ops.h"
#include "framework/nn/nn.h"
#include "framework/optim/sgd.h"
#include "framework/tensor/random.h"
#include "modules/quant/quant.h"

namespace qat::test {

/// conv-bn-relu-conv-bn, then the skip add (a quantized functional op, or a float `+`).
class ResBlock : public nn::Module {
 public:
  ResBlock(std::int64_t c, bool quantized_add) : nn::Module("ResBlock"), quantized_add_(quantized_add) {}
  Tensor forward(const Tensor& x) override {
    const Tensor h = bn2_(conv2_(relu1_(bn1_(conv1_(x)))));
    return quantized_add_ ? skip_(x, h) : relu(add(x, h));
  }

  bool quantized_add_;
  nn::Child<> conv1_ =
      register_child("conv1", std::make_shared<nn::Conv2d>(4, 4, 3, Conv2dParams{.padding = {1, 1}}));
  nn::Child<> bn1_ = register_child("bn1", std::make_shared<nn::BatchNorm2d>(4));
  nn::Child<> relu1_ = register_child("relu1", std::make_shared<nn::ReLU>());
  nn::Child<> conv2_ =
      register_child("conv2", std::make_shared<nn::Conv2d>(4, 4, 3, Conv2dParams{.padding = {1, 1}}));
  nn::Child<> bn2_ = register_child("bn2", std::make_shared<nn::BatchNorm2d>(4));
  nn::Child<quant::Functional> skip_ =
      register_child<quant::Functional>("skip", std::make_shared<quant::AddReLU>());
};

/// stub -> conv-bn-relu stem -> residual block -> pool -> flatten (op) -> fc -> dequant.
class SmallResNet : public nn::Module {
 public:
  explicit SmallResNet(bool quantized_add = true, bool adaptive_pool = true)
      : nn::Module("SmallResNet") {
    block_ = register_child("block", std::make_shared<ResBlock>(4, quantized_add));
    pool_ = register_child(
        "pool", adaptive_pool ? nn::ModulePtr(std::make_shared<nn::AdaptiveAvgPool2d>(Pair{2, 2}))
                              : nn::ModulePtr(std::make_shared<nn::MaxPool2d>(4)));
    fc_ = register_child("fc", std::make_shared<nn::Linear>(16, 3));
    dequant_ = register_child("dequant", std::make_shared<quant::DeQuantStub>());
  }
  Tensor forward(const Tensor& x) override {
    Tensor h = relu_(bn_(stem_(quant_(x))));
    h = block_(h);
    return dequant_(fc_(flatten(pool_(h))));
  }

  nn::Child<> quant_ = register_child("quant", std::make_shared<quant::QuantStub>());
  nn::Child<> stem_ =
      register_child("stem", std::make_shared<nn::Conv2d>(2, 4, 3, Conv2dParams{.padding = {1, 1}}));
  nn::Child<> bn_ = register_child("bn", std::make_shared<nn::BatchNorm2d>(4));
  nn::Child<> relu_ = register_child("relu", std::make_shared<nn::ReLU>());
  nn::Child<> block_, pool_, fc_, dequant_;
};

/// A few SGD steps on random batches (default [16, 2, 8, 8] in [0, 1), 3 classes; `batch` and
/// `classes` change that, `lo` the lower end of the values), in training mode (observers,
/// learnable qparams and batch-norm statistics move, as in real training); ends in eval mode.
inline void train_on_noise(nn::Module& model, int steps, std::uint64_t seed,
                           const Shape& batch = Shape{16, 2, 8, 8}, std::int64_t classes = 3,
                           double lo = 0) {
  Generator gen(seed);
  optim::SGD opt(model.named_parameters(), {.lr = 0.05, .momentum = 0.9});
  model.train();
  const std::int64_t n = batch[0];
  for (int s = 0; s < steps; ++s) {
    const Tensor x = Tensor::uniform(batch, lo, 1, gen);
    std::vector<std::int64_t> y(static_cast<std::size_t>(n));
    for (auto& v : y) v = static_cast<std::int64_t>(gen.below(static_cast<std::uint64_t>(classes)));
    opt.zero_grad();
    cross_entropy(model(x), Tensor::from_vector<std::int64_t>(y, Shape{n})).backward();
    opt.step();
  }
  model.eval();
}

}  // namespace qat::test
