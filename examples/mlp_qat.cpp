// Fashion-MNIST MLP, 784-256-128-10 with ReLU (the PyTorch reference script's model), between a
// QuantStub and a DeQuantStub that mark the quantized region (identity in fp32 mode).
//   build/examples/mlp_qat --epochs 3 --threads 1 --json
//   build/examples/mlp_qat --mode qat --qconfig int8_default --epochs 3
#include "examples/common/app.h"
#include "examples/common/models.h"

using namespace qat;

int main(int argc, char** argv) {
  examples::ModelFactory factory{
      .program = "mlp_qat",
      .model = "mlp",
      .archs = {"mlp"},
      .build = [](const std::string&) { return examples::fmnist_mlp(); },
      .flatten_input = true,
  };
  return examples::run(argc, argv, factory);
}
