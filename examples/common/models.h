#pragma once
// The Fashion-MNIST models of the examples (and of bench_int8, which times their int8 versions),
// each between a QuantStub and a DeQuantStub that mark the quantized region (identity in fp32).
#include "framework/nn/module.h"

namespace qat::examples {

/// 784-256-128-10 MLP with ReLU (the PyTorch reference script's model); takes flat images.
nn::ModulePtr fmnist_mlp();
/// conv 1->16 5x5 pad 2, [bn], relu, maxpool 2, conv 16->32 5x5 pad 2, [bn], relu, maxpool 2,
/// flatten, linear 1568->10 (the reference script's CNN; `batch_norm` adds bn1 / bn2).
nn::ModulePtr fmnist_cnn(bool batch_norm);
/// A small residual network written as custom Modules (not Sequential), the way users write
/// models: stem conv 1->16 3x3-bn-relu, maxpool 2, residual block(16), conv 16->32 3x3 stride 2
/// -bn-relu, residual block(32), global average pool, flatten, linear 32->10. Each residual
/// block is conv-bn-relu-conv-bn with the skip `x + f(x)` through quant::AddReLU. prepare_qat
/// and convert handle it from the graph (they need an example input).
nn::ModulePtr fmnist_resnet();

}  // namespace qat::examples
