#pragma once
// PyTorch's fused_moving_avg_obs_fake_quant (per tensor): the moving-average min/max observer,
// its qparams and fake quantization in one op, one kernel launch on CUDA.
#include "framework/tensor/tensor.h"
#include "modules/quant/spec.h"

namespace qat::quant {

/// The observer state the fused op reads and updates, all on one device.
struct FusedObserverState {
  Tensor running_min;        ///< float32 [1], +inf before the first batch
  Tensor running_max;        ///< float32 [1], -inf before the first batch
  Tensor scale;              ///< float32 [1]
  Tensor zero_point;         ///< int32 [1]
  Tensor nonfinite_batches;  ///< int32 [1]: observed batches skipped for holding NaN / inf
  /// Fresh state on `device` (scale 1, zero point 0, nothing observed).
  static FusedObserverState make(Device device = Device::CPU);
};

/// With observer_on: min / max of x (NaN skipped, -0 below +0), then running = the batch's
/// range (first batch) or running + c (batch - running) in float32, then scale / zero_point by
/// calculate_qparams(spec); a batch holding NaN / inf changes nothing but nonfinite_batches
/// (no host sync on CUDA to throw). Then y = fake_quantize_per_tensor_affine(x, scale,
/// zero_point) with the STE backward, or y = x without fake_quant_on. `spec`: integer, per
/// tensor. The CPU and CUDA paths give the same bits.
Tensor fused_moving_avg_obs_fake_quant(const Tensor& x, FusedObserverState& state, const QuantSpec& spec,
                                       double averaging_constant, bool observer_on = true,
                                       bool fake_quant_on = true);

}  // namespace qat::quant
