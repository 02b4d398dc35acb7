#pragma once
// Internal: the free lists behind every caching allocator (CPU: tensor/storage.cpp, CUDA:
// kernels/cuda/runtime.cpp). Buffers are bucketed by size class; a released buffer waits in its
// bucket for the next request of that class. Each allocator brings its own system calls.
#include <mutex>
#include <unordered_map>
#include <vector>

#include "framework/tensor/storage.h"

namespace qat::detail {

class BufferPool {
 public:
  /// A cached buffer of size class `cls`, or nullptr (then allocate one and call fresh()).
  void* take(std::size_t cls) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = free_lists_.find(cls);
    if (it == free_lists_.end() || it->second.empty()) return nullptr;
    void* p = it->second.back();
    it->second.pop_back();
    ++stats_.reused_allocations;
    stats_.bytes_cached -= cls;
    return p;
  }
  /// Counts a buffer of class `cls` newly obtained from the system.
  void fresh(std::size_t cls) {
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.fresh_allocations;
    stats_.bytes_reserved += cls;
  }
  void put(void* p, std::size_t cls) {
    std::lock_guard<std::mutex> lock(mu_);
    free_lists_[cls].push_back(p);
    stats_.bytes_cached += cls;
  }
  /// Hands every cached buffer to `free_fn(ptr)` and forgets it.
  template <class Free>
  void drain(Free&& free_fn) {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [cls, list] : free_lists_) {
      for (void* p : list) free_fn(p);
      stats_.bytes_reserved -= cls * list.size();
      stats_.bytes_cached -= cls * list.size();
      list.clear();
    }
  }
  AllocatorStats stats() const {
    std::lock_guard<std::mutex> lock(mu_);
    return stats_;
  }

 private:
  mutable std::mutex mu_;
  std::unordered_map<std::size_t, std::vector<void*>> free_lists_;  // size class -> buffers
  AllocatorStats stats_;
};

}  // namespace qat::detail
