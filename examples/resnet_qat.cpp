// Fashion-MNIST residual network written as custom Modules (examples/common/models.h): the
// skip connections go through quant::AddReLU, the children are held as nn::Child, and there is
// one QuantStub at the input. prepare_qat and convert work from the captured graph, so the
// same training program as mlp_qat / cnn_qat trains it in fp32 or QAT and converts it to int8.
#include "examples/common/app.h"
#include "examples/common/models.h"

using namespace qat;

int main(int argc, char** argv) {
  examples::ModelFactory factory{
      .program = "resnet_qat",
      .model = "resnet",
      .archs = {"resnet"},
      .build = [](const std::string&) { return examples::fmnist_resnet(); },
  };
  return examples::run(argc, argv, factory);
}
