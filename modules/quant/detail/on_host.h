#pragma once
// Internal: a CUDA quantizer's rare host steps (the learnable and FP8 quantizers' estimation
// batches) run the CPU code, on the CPU copy of the module's state, bit for bit.
#include "framework/nn/module.h"

namespace qat::quant::detail {

/// Runs f with m's state (parameters, buffers, submodules, gradients) on the CPU, then moves it
/// back to `device`, also when f throws. Module::to moves storage inside each tensor, so every
/// handle (an optimizer's included) follows both ways.
template <class F>
void with_state_on_host(nn::Module& m, Device device, F&& f) {
  m.to(Device::CPU);
  try {
    f();
  } catch (...) {
    m.to(device);
    throw;
  }
  m.to(device);
}

}  // namespace qat::quant::detail
