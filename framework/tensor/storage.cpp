#include "framework/tensor/storage.h"

#include <algorithm>
#include <bit>
#include <cstdlib>
#include <new>

#include "framework/kernels/cuda/runtime.h"
#include "framework/tensor/detail/buffer_pool.h"
#include "framework/tensor/error.h"

namespace qat {

struct CachingAllocator::Impl : detail::BufferPool {};

CachingAllocator& CachingAllocator::cpu() {
  static CachingAllocator instance;
  return instance;
}

CachingAllocator::Impl& CachingAllocator::impl() const {
  static Impl* impl = new Impl();  // never destroyed: storages may outlive static destructors
  return *impl;
}

// Size classes: steps of 1/4 of a power of two ({4,5,6,7} * 2^k), rounded up to a multiple of
// 64 bytes (aligned_alloc requires the size to be a multiple of the alignment).
std::size_t CachingAllocator::size_class(std::size_t nbytes) {
  if (nbytes <= 64) return 64;
  const std::size_t pow2 = std::bit_floor(nbytes - 1);  // largest power of two below nbytes
  const std::size_t step = std::max<std::size_t>(pow2 / 4, 64);
  return (nbytes + step - 1) / step * step;
}

void* CachingAllocator::allocate(std::size_t nbytes, std::size_t* capacity) {
  const std::size_t cls = size_class(nbytes);
  *capacity = cls;
  if (void* p = impl().take(cls)) return p;
  void* p = std::aligned_alloc(64, cls);
  if (p == nullptr) {
    empty_cache();
    p = std::aligned_alloc(64, cls);
  }
  if (p == nullptr) throw std::bad_alloc();
  impl().fresh(cls);
  return p;
}

void CachingAllocator::release(void* ptr, std::size_t capacity) { impl().put(ptr, capacity); }

void CachingAllocator::empty_cache() {
  impl().drain([](void* p) { std::free(p); });
}

AllocatorStats CachingAllocator::stats() const { return impl().stats(); }

Storage::Storage(std::size_t nbytes, Device device) : nbytes_(nbytes), device_(device) {
  if (device == Device::CPU)
    data_ = CachingAllocator::cpu().allocate(nbytes, &capacity_);
  else
    data_ = cuda::detail::allocate(nbytes, &capacity_, "Storage(cuda)");
}

Storage::~Storage() {
  if (device_ == Device::CPU)
    CachingAllocator::cpu().release(data_, capacity_);
  else
    cuda::detail::release(data_, capacity_);
}

}  // namespace qat
