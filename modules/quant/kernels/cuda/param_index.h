#pragma once
// Internal: which parameter (scale, zero point, observed range) an element of a tensor uses on
// CUDA, host and device, so that the CPU tests check the kernels' index math against
// detail::Layout. The tensor is viewed as (outer, len, inner) with the quantization axis as len.
#include <cstdint>

#include "framework/kernels/cuda/host_device.h"

namespace qat::quant::kernels::cuda {

/// The parameter of element i: per tensor / per channel (block 0), (i / inner) % len; per block
/// of `block` indices along len (len % block == 0; parameters shaped (outer, len / block,
/// inner)), (i / inner / block) inner + i % inner.
QAT_HOST_DEVICE inline std::int64_t param_of(std::int64_t i, std::int64_t len, std::int64_t inner,
                                             std::int64_t block) {
  return block == 0 ? (i / inner) % len : (i / inner / block) * inner + i % inner;
}

/// Element j of range c, per channel: c is the index along len, j runs over outer inner.
QAT_HOST_DEVICE inline std::int64_t channel_element(std::int64_t j, std::int64_t c, std::int64_t len,
                                                    std::int64_t inner) {
  return (j / inner * len + c) * inner + j % inner;
}

/// Element j of range c, per block: c = (o (len / block) + b) inner + i, j runs over the block.
QAT_HOST_DEVICE inline std::int64_t block_element(std::int64_t j, std::int64_t c, std::int64_t inner,
                                                  std::int64_t block) {
  return ((c / inner) * block + j) * inner + c % inner;
}

}  // namespace qat::quant::kernels::cuda
