#pragma once
// Internal, for .cu files: launch geometry shared by the CUDA kernels.
#include <algorithm>
#include <cstdint>

#include "framework/kernels/cuda/check.h"

namespace qat::kernels::cuda {

using ::qat::cuda::detail::stream;

constexpr int kBlock = 256;

/// Blocks for a grid-stride loop over n elements: enough to fill any GPU, capped so a huge n
/// loops inside the kernel.
inline unsigned grid_for(std::int64_t n) {
  return static_cast<unsigned>(std::clamp<std::int64_t>((n + kBlock - 1) / kBlock, 1, 65536));
}

__device__ inline std::int64_t global_index() {
  return static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ inline std::int64_t global_stride() {
  return static_cast<std::int64_t>(gridDim.x) * blockDim.x;
}

}  // namespace qat::kernels::cuda
