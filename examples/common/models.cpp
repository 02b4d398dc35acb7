#include "examples/common/models.h"

#include "framework/nn/nn.h"
#include "modules/quant/stubs.h"

namespace qat::examples {

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
