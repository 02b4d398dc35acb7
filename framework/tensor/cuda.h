#pragma once
// The CUDA device as seen from user code: availability, the caching allocator's statistics and
// the one stream every CUDA op runs on. Light header: no CUDA includes (they stay in .cpp / .cu).
#include <string>

#include "framework/tensor/storage.h"
#include "framework/tensor/tensor.h"

namespace qat::cuda {

/// Whether this build has the CUDA backend (CMake QAT_CUDA; installed package: qat_HAS_CUDA).
bool is_built();
/// Number of usable CUDA devices: 0 in a build without CUDA, without a driver or without a GPU.
int device_count();
inline bool is_available() { return device_count() > 0; }
/// Why no device can be used ("" when one can): the build, or the CUDA error string.
std::string unavailable_reason();
/// Makes device `index` the one this process runs its CUDA work on (cudaSetDevice). Call it
/// before the first CUDA op: the one stream and the caching pool belong to one device, so after
/// that only the same index is accepted. Throws qat::Error naming the index and the device count.
void set_device(int index);
/// Waits until every op queued on the current stream has finished (throws on a kernel fault).
void synchronize();

/// Statistics of the CUDA caching allocator: fresh_allocations counts cudaMalloc calls,
/// reused_allocations buffers served from the cache (a training step in steady state adds only
/// to the latter), bytes_reserved / bytes_cached device memory held / free in the cache.
AllocatorStats allocator_stats();
/// Returns every cached device buffer to CUDA (cudaFree).
void empty_cache();

/// Host -> device copies of input batches through page-locked (pinned) host buffers, so that the
/// copy runs asynchronously while the GPU works on the previous step: to_device() copies the
/// batch into the next of `slots` pinned buffers, queues cudaMemcpyAsync on the one stream
/// (kernels queued after it read the data in order) and returns at once. A buffer is written
/// again only after the copy that last used it has finished (an event per buffer); buffers grow
/// to the largest batch seen and are freed with the stager.
///
///   cuda::PinnedStager stage;
///   for (const data::Batch& b : loader) {
///     const Tensor x = stage.to_device(b.images), y = stage.to_device(b.labels);
///     ...
class PinnedStager {
 public:
  explicit PinnedStager(int slots = 4);
  ~PinnedStager();
  PinnedStager(const PinnedStager&) = delete;
  PinnedStager& operator=(const PinnedStager&) = delete;
  /// A CUDA tensor with `host`'s shape, dtype and values (a contiguous CPU tensor; a CUDA one is
  /// returned as it is). Throws qat::Error naming the function without a device.
  Tensor to_device(const Tensor& host);

 private:
  struct Impl;
  Impl* impl_;
};

}  // namespace qat::cuda
