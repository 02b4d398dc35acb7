#pragma once
// Internal: the CUDA runtime behind Storage and the ops, without CUDA headers. Implemented in
// runtime.cpp (QAT_CUDA on) or tensor/cuda_none.cpp (off: every call throws naming the build).
#include <cstddef>
#include <cstdint>

#include "framework/tensor/dtype.h"

namespace qat::cuda::detail {

/// A device buffer of at least `nbytes` from the caching pool (nbytes 0: nullptr, no device
/// needed); `capacity` receives its size class. Throws qat::Error naming `fn` on failure.
void* allocate(std::size_t nbytes, std::size_t* capacity, const char* fn);
/// Back to the pool (no CUDA call: reuse is ordered by the one stream).
void release(void* ptr, std::size_t capacity) noexcept;
/// Copies nbytes between host and device or within the device, ordered on the current stream;
/// returns once `dst` may be read on the host (device -> host) or `src` reused (host -> device).
void copy(void* dst, Device dst_device, const void* src, Device src_device, std::size_t nbytes,
          const char* fn);
/// n elements of `element_size` bytes set to the bit pattern at `value`.
void fill(void* dst, const void* value, std::size_t element_size, std::int64_t n, const char* fn);
/// Throws qat::Error naming `fn` unless a device is usable (message: the CUDA error string).
void require_device(const char* fn);

}  // namespace qat::cuda::detail
