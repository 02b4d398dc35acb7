#include "framework/tensor/storage.h"

#include <algorithm>
#include <bit>
#include <cstdlib>
#include <mutex>
#include <new>
#include <unordered_map>
#include <vector>

#include "framework/kernels/cuda/runtime.h"
#include "framework/tensor/error.h"

namespace qat {

struct CachingAllocator::Impl {
  mutable std::mutex mu;
  std::unordered_map<std::size_t, std::vector<void*>> free_lists;  // size class -> buffers
  AllocatorStats stats;
};

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
  Impl& s = impl();
  {
    std::lock_guard<std::mutex> lock(s.mu);
    auto it = s.free_lists.find(cls);
    if (it != s.free_lists.end() && !it->second.empty()) {
      void* p = it->second.back();
      it->second.pop_back();
      ++s.stats.reused_allocations;
      s.stats.bytes_cached -= cls;
      return p;
    }
  }
  void* p = std::aligned_alloc(64, cls);
  if (p == nullptr) {
    empty_cache();
    p = std::aligned_alloc(64, cls);
  }
  if (p == nullptr) throw std::bad_alloc();
  std::lock_guard<std::mutex> lock(s.mu);
  ++s.stats.fresh_allocations;
  s.stats.bytes_reserved += cls;
  return p;
}

void CachingAllocator::release(void* ptr, std::size_t capacity) {
  Impl& s = impl();
  std::lock_guard<std::mutex> lock(s.mu);
  s.free_lists[capacity].push_back(ptr);
  s.stats.bytes_cached += capacity;
}

void CachingAllocator::empty_cache() {
  Impl& s = impl();
  std::lock_guard<std::mutex> lock(s.mu);
  for (auto& [cls, list] : s.free_lists) {
    for (void* p : list) std::free(p);
    s.stats.bytes_reserved -= cls * list.size();
    s.stats.bytes_cached -= cls * list.size();
    list.clear();
  }
}

AllocatorStats CachingAllocator::stats() const {
  std::lock_guard<std::mutex> lock(impl().mu);
  return impl().stats;
}

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
