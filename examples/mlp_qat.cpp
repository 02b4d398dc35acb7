// Fashion-MNIST MLP, 784-256-128-10 with ReLU (the PyTorch reference script's model), between a
// QuantStub and a DeQuantStub that mark the quantized region (identity in fp32 mode).
//   build/examples/mlp_qat --epochs 3 --threads 1 --json
//   build/examples/mlp_qat --mode qat --qconfig int8_default --epochs 3
#include "examples/common/app.h"
#include "framework/nn/nn.h"
#include "modules/quant/stubs.h"

using namespace qat;

int main(int argc, char** argv) {
  examples::ModelFactory factory{
      .program = "mlp_qat",
      .model = "mlp",
      .archs = {"mlp"},
      .build = [](const std::string&) -> nn::ModulePtr {
        return std::make_shared<nn::Sequential>(
            nn::NamedModules{{"quant", std::make_shared<quant::QuantStub>()},
                             {"fc1", std::make_shared<nn::Linear>(784, 256)},
                             {"relu1", std::make_shared<nn::ReLU>()},
                             {"fc2", std::make_shared<nn::Linear>(256, 128)},
                             {"relu2", std::make_shared<nn::ReLU>()},
                             {"fc3", std::make_shared<nn::Linear>(128, 10)},
                             {"dequant", std::make_shared<quant::DeQuantStub>()}});
      },
      .flatten_input = true,
  };
  return examples::run(argc, argv, factory);
}
