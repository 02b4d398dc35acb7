#include <iostream>

#include "framework/autograd/ops.h"
#include "framework/nn/nn.h"
#include "modules/quant/quant.h"
using namespace qat;
int main() {
  auto m = std::make_shared<nn::Sequential>(nn::NamedModules{
      {"q", std::make_shared<quant::QuantStub>()}, {"fc", std::make_shared<nn::Linear>(4, 2)}});
  quant::QConfigRegistry reg;
  std::cout << quant::prepare_qat(*m, reg).table();
  Tensor y = m->forward(Tensor::ones(Shape{3, 4}));
  std::cout << y << "\n";
}
