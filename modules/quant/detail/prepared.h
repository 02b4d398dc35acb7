#pragma once
// Internal: what a QuantizedWeightLayer builds from its buffers for the int8 kernels
// (quantized_layers.cpp builds it, the layers' forwards read it).
#include <cstdint>
#include <optional>
#include <vector>

#include "modules/quant/int8_kernels.h"
#include "modules/quant/quantized_layers.h"

namespace qat::quant {

// Per output channel: the accumulator's scale s_in s_w[o] and the float bias, 1 / s_out and the
// clamp range (a fused ReLU clamps at the zero point); the weights packed per group.
struct QuantizedWeightLayer::Prepared {
  std::vector<std::uint8_t> key;  // the buffers and settings it was built from
  std::vector<int8::PackedWeights> packed;
  std::optional<int8::RowWinogradWeights> row;  // KOrder::RowWinograd (packed empty)
  std::vector<float> scales, bias;
  int8::Requant requant{};
};

}  // namespace qat::quant
