// Fashion-MNIST CNN (the PyTorch reference script's model, examples/common/models.h):
//   conv(1->16, 5, pad 2)-ReLU-maxpool 2-conv(16->32, 5, pad 2)-ReLU-maxpool 2-fc(1568->10)
// --arch cnn-bn adds BatchNorm after each convolution. A QuantStub and a DeQuantStub mark the
// quantized region (identity in fp32 mode).
#include "examples/common/app.h"
#include "examples/common/models.h"

using namespace qat;

int main(int argc, char** argv) {
  examples::ModelFactory factory{
      .program = "cnn_qat",
      .model = "cnn",
      .archs = {"cnn", "cnn-bn"},
      .build = [](const std::string& arch) { return examples::fmnist_cnn(arch == "cnn-bn"); },
  };
  return examples::run(argc, argv, factory);
}
