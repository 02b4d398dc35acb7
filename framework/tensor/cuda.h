#pragma once
// The CUDA device as seen from user code: availability, the caching allocator's statistics and
// the one stream every CUDA op runs on. Light header: no CUDA includes (they stay in .cpp / .cu).
#include <string>

#include "framework/tensor/storage.h"

namespace qat::cuda {

/// Whether this build has the CUDA backend (CMake QAT_CUDA; installed package: qat_HAS_CUDA).
bool is_built();
/// Number of usable CUDA devices: 0 in a build without CUDA, without a driver or without a GPU.
int device_count();
inline bool is_available() { return device_count() > 0; }
/// Why no device can be used ("" when one can): the build, or the CUDA error string.
std::string unavailable_reason();
/// Waits until every op queued on the current stream has finished (throws on a kernel fault).
void synchronize();

/// Statistics of the CUDA caching allocator: fresh_allocations counts cudaMalloc calls,
/// reused_allocations buffers served from the cache (a training step in steady state adds only
/// to the latter), bytes_reserved / bytes_cached device memory held / free in the cache.
AllocatorStats allocator_stats();
/// Returns every cached device buffer to CUDA (cudaFree).
void empty_cache();

}  // namespace qat::cuda
