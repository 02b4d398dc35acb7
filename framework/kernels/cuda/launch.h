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

/// Whether float arrays a and b (16 bytes) and a byte array m (4 bytes; null: none) allow the
/// 4-wide steps of grid_stride4.
inline bool aligned4(const void* a, const void* b, const void* m = nullptr) {
  return (reinterpret_cast<std::uintptr_t>(a) | reinterpret_cast<std::uintptr_t>(b)) % 16 == 0 &&
         reinterpret_cast<std::uintptr_t>(m) % 4 == 0;
}
/// Blocks for grid_stride4 over n elements.
inline unsigned grid_for4(std::int64_t n, bool vec4) { return grid_for(vec4 ? (n + 3) / 4 : n); }

/// A grid-stride loop over n elements taken 4 at a time where vec4: step4(j) for the elements
/// 4j .. 4j + 3 (16-byte loads and stores: a warp keeps 512 bytes in flight where single floats
/// keep 128, which HBM needs to come near copy bandwidth), then one(i) for the last n % 4 (all
/// n without vec4).
template <class Step4, class One>
__device__ inline void grid_stride4(std::int64_t n, bool vec4, Step4 step4, One one) {
  const std::int64_t n4 = vec4 ? n / 4 : 0;
#pragma unroll 2
  for (std::int64_t j = global_index(); j < n4; j += global_stride()) step4(j);
  for (std::int64_t i = 4 * n4 + global_index(); i < n; i += global_stride()) one(i);
}

}  // namespace qat::kernels::cuda
