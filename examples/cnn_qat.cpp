// Fashion-MNIST CNN (the PyTorch reference script's model):
//   conv(1->16, 5, pad 2)-ReLU-maxpool 2-conv(16->32, 5, pad 2)-ReLU-maxpool 2-fc(1568->10)
// --arch cnn-bn adds BatchNorm after each convolution. A QuantStub and a DeQuantStub mark the
// quantized region (identity in fp32 mode).
#include "examples/common/app.h"
#include "framework/nn/nn.h"
#include "modules/quant/stubs.h"

using namespace qat;

namespace {
nn::ModulePtr build_cnn(bool batch_norm) {
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
}  // namespace

int main(int argc, char** argv) {
  examples::ModelFactory factory{
      .program = "cnn_qat",
      .model = "cnn",
      .archs = {"cnn", "cnn-bn"},
      .build = [](const std::string& arch) { return build_cnn(arch == "cnn-bn"); },
  };
  return examples::run(argc, argv, factory);
}
