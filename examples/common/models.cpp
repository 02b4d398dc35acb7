#include "examples/common/models.h"

#include "framework/nn/nn.h"
#include "modules/quant/functional.h"
#include "modules/quant/stubs.h"

namespace qat::examples {

namespace {

const Conv2dParams kPad1{.padding = {1, 1}};

// relu(x + bn2(conv2(relu(bn1(conv1(x)))))), the skip add quantized as one op.
class ResidualBlock : public nn::Module {
 public:
  explicit ResidualBlock(std::int64_t c)
      : nn::Module("ResidualBlock"),
        conv1_(register_child("conv1", std::make_shared<nn::Conv2d>(c, c, 3, kPad1, false))),
        bn1_(register_child("bn1", std::make_shared<nn::BatchNorm2d>(c))),
        relu1_(register_child("relu1", std::make_shared<nn::ReLU>())),
        conv2_(register_child("conv2", std::make_shared<nn::Conv2d>(c, c, 3, kPad1, false))),
        bn2_(register_child("bn2", std::make_shared<nn::BatchNorm2d>(c))),
        add_relu_(register_child<quant::Functional>("add_relu", std::make_shared<quant::AddReLU>())) {}

  Tensor forward(const Tensor& x) override {
    const Tensor h = relu1_(bn1_(conv1_(x)));
    return add_relu_(x, bn2_(conv2_(h)));
  }

 private:
  nn::Child<> conv1_, bn1_, relu1_, conv2_, bn2_;
  nn::Child<quant::Functional> add_relu_;
};

class ResNet : public nn::Module {
 public:
  ResNet()
      : nn::Module("ResNet"),
        quant_(register_child("quant", std::make_shared<quant::QuantStub>())),
        stem_(register_child("stem", std::make_shared<nn::Conv2d>(1, 16, 3, kPad1, false))),
        stem_bn_(register_child("stem_bn", std::make_shared<nn::BatchNorm2d>(16))),
        stem_relu_(register_child("stem_relu", std::make_shared<nn::ReLU>())),
        pool_(register_child("pool", std::make_shared<nn::MaxPool2d>(2))),
        block1_(register_child("block1", std::make_shared<ResidualBlock>(16))),
        down_(register_child("down", std::make_shared<nn::Conv2d>(
                                         16, 32, 3, Conv2dParams{.stride = {2, 2}, .padding = {1, 1}}, false))),
        down_bn_(register_child("down_bn", std::make_shared<nn::BatchNorm2d>(32))),
        down_relu_(register_child("down_relu", std::make_shared<nn::ReLU>())),
        block2_(register_child("block2", std::make_shared<ResidualBlock>(32))),
        gap_(register_child("gap", std::make_shared<nn::AdaptiveAvgPool2d>(Pair{1, 1}))),
        fc_(register_child("fc", std::make_shared<nn::Linear>(32, 10))),
        dequant_(register_child("dequant", std::make_shared<quant::DeQuantStub>())) {}

  Tensor forward(const Tensor& x) override {
    Tensor h = pool_(stem_relu_(stem_bn_(stem_(quant_(x)))));  // 16 x 14 x 14
    h = block1_(h);
    h = block2_(down_relu_(down_bn_(down_(h))));  // 32 x 7 x 7
    return dequant_(fc_(flatten(gap_(h))));
  }

 private:
  nn::Child<> quant_, stem_, stem_bn_, stem_relu_, pool_, block1_, down_, down_bn_, down_relu_, block2_,
      gap_, fc_, dequant_;
};

}  // namespace

nn::ModulePtr fmnist_resnet() { return std::make_shared<ResNet>(); }

nn::ModulePtr fmnist_mlp() {
  return std::make_shared<nn::Sequential>(
      nn::NamedModules{{"quant", std::make_shared<quant::QuantStub>()},
                       {"fc1", std::make_shared<nn::Linear>(784, 256)},
                       {"relu1", std::make_shared<nn::ReLU>()},
                       {"fc2", std::make_shared<nn::Linear>(256, 128)},
                       {"relu2", std::make_shared<nn::ReLU>()},
                       {"fc3", std::make_shared<nn::Linear>(128, 10)},
                       {"dequant", std::make_shared<quant::DeQuantStub>()}});
}

nn::ModulePtr fmnist_cnn(bool batch_norm) {
  auto net = std::make_shared<nn::Sequential>();
  const Conv2dParams pad2{.padding = {2, 2}};
  net->push_back("quant", std::make_shared<quant::QuantStub>());
  net->push_back("conv1", std::make_shared<nn::Conv2d>(1, 16, 5, pad2));
  if (batch_norm) net->push_back("bn1", std::make_shared<nn::BatchNorm2d>(16));
  net->push_back("relu1", std::make_shared<nn::ReLU>());
  net->push_back("pool1", std::make_shared<nn::MaxPool2d>(2));
  net->push_back("conv2", std::make_shared<nn::Conv2d>(16, 32, 5, pad2));
  if (batch_norm) net->push_back("bn2", std::make_shared<nn::BatchNorm2d>(32));
  net->push_back("relu2", std::make_shared<nn::ReLU>());
  net->push_back("pool2", std::make_shared<nn::MaxPool2d>(2));
  net->push_back("flatten", std::make_shared<nn::Flatten>());
  net->push_back("fc", std::make_shared<nn::Linear>(32 * 7 * 7, 10));
  net->push_back("dequant", std::make_shared<quant::DeQuantStub>());
  return net;
}

}  // namespace qat::examples
