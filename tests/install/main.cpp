#include <iostream>

#include "framework/autograd/ops.h"
#include "framework/distributed/process_group.h"
#include "framework/nn/nn.h"
#include "framework/tensor/cuda.h"
#include "modules/quant/quant.h"
#ifdef CONSUMER_ONNX
#include "modules/onnx/export.h"
#endif
using namespace qat;
int main() {
  auto m = std::make_shared<nn::Sequential>(nn::NamedModules{
      {"q", std::make_shared<quant::QuantStub>()}, {"fc", std::make_shared<nn::Linear>(4, 2)}});
  quant::QConfigRegistry reg;
  std::cout << quant::prepare_qat(*m, reg).table();
  Tensor y = m->forward(Tensor::ones(Shape{3, 4}));
  std::cout << y << "\n";
  std::cout << "cuda built " << cuda::is_built() << ", devices " << cuda::device_count() << "\n";
  std::cout << "cudnn built " << cuda::has_cudnn() << "\n";
#ifdef CONSUMER_HAS_CUDA  // the package's qat_HAS_CUDA / qat_HAS_CUDNN agree with the library
  if (cuda::is_built() != static_cast<bool>(CONSUMER_HAS_CUDA)) return 1;
  if (cuda::has_cudnn() != static_cast<bool>(CONSUMER_HAS_CUDNN)) return 1;
#endif
  std::cout << "nccl built " << distributed::has_nccl() << "\n";
#ifdef CONSUMER_HAS_NCCL  // and qat_HAS_NCCL
  if (distributed::has_nccl() != static_cast<bool>(CONSUMER_HAS_NCCL)) return 1;
#endif
#ifdef CONSUMER_ONNX
  m->train();
  m->forward(Tensor::ones(Shape{3, 4}));  // the observers see data
  std::cout << "onnx " << quant::to_onnx(*m, Tensor::ones(Shape{1, 4})).size() << " bytes\n";
#endif
}
