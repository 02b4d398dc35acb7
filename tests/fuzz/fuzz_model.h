#pragma once
// The fixed model the fuzz target loads checkpoints into, and the seeds are made from.
#include <memory>

#include "framework/nn/nn.h"

namespace qat::fuzz {

/// conv(1->2, 3x3) -> BatchNorm2d(2) -> flatten -> Linear(8 -> 2), for 4x4 inputs: 9 tensors.
inline std::shared_ptr<nn::Sequential> make_model() {
  return std::make_shared<nn::Sequential>(std::initializer_list<nn::ModulePtr>{
      std::make_shared<nn::Conv2d>(1, 2, 3), std::make_shared<nn::BatchNorm2d>(2),
      std::make_shared<nn::Flatten>(), std::make_shared<nn::Linear>(8, 2)});
}

}  // namespace qat::fuzz
