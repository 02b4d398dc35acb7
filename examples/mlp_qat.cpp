// Fashion-MNIST MLP, 784-256-128-10 with ReLU (the PyTorch reference script's model).
//   build/examples/mlp_qat --epochs 3 --threads 1 --json
#include "examples/common/app.h"
#include "framework/nn/nn.h"

using namespace qat;

int main(int argc, char** argv) {
  examples::ModelFactory factory{
      .program = "mlp_qat",
      .model = "mlp",
      .archs = {"mlp"},
      .build = [](const std::string&) -> nn::ModulePtr {
        return std::make_shared<nn::Sequential>(std::initializer_list<nn::ModulePtr>{
            std::make_shared<nn::Linear>(784, 256), std::make_shared<nn::ReLU>(),
            std::make_shared<nn::Linear>(256, 128), std::make_shared<nn::ReLU>(),
            std::make_shared<nn::Linear>(128, 10)});
      },
      .flatten_input = true,
  };
  return examples::run(argc, argv, factory);
}
