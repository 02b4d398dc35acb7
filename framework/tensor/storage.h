#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>

#include "framework/tensor/dtype.h"

namespace qat {

/// Statistics of the caching allocator, for tests and benchmarks.
struct AllocatorStats {
  std::uint64_t fresh_allocations = 0;   // buffers obtained from the system
  std::uint64_t reused_allocations = 0;  // buffers served from the cache
  std::uint64_t bytes_reserved = 0;      // bytes held (live + cached)
  std::uint64_t bytes_cached = 0;        // bytes free in the cache
};

/// A caching pool of aligned buffers, bucketed by size class (four classes per power of two,
/// so at most 25% slack beyond 64 bytes). Freed buffers go back to their bucket; the pool grows on
/// demand and never fails for lack of a preset size. Thread-safe.
class CachingAllocator {
 public:
  static CachingAllocator& cpu();

  /// Returns a buffer of at least `nbytes` bytes, 64-byte aligned; `capacity` receives its size.
  void* allocate(std::size_t nbytes, std::size_t* capacity);
  void release(void* ptr, std::size_t capacity);
  /// Returns every cached buffer to the system.
  void empty_cache();
  AllocatorStats stats() const;

  static std::size_t size_class(std::size_t nbytes);

 private:
  CachingAllocator() = default;
  struct Impl;
  Impl& impl() const;
};

/// Bytes plus where they live; buffers come from the device's caching pool and return to it
/// (CPU: CachingAllocator::cpu(); CUDA: the device pool of tensor/cuda.h). An empty CUDA storage
/// holds no memory and needs no device.
class Storage {
 public:
  Storage(std::size_t nbytes, Device device);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() { return data_; }
  const void* data() const { return data_; }
  std::size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }

 private:
  void* data_ = nullptr;
  std::size_t nbytes_ = 0;
  std::size_t capacity_ = 0;
  Device device_;
};

}  // namespace qat
