#pragma once
// std::vector on 64-byte aligned storage (one cache line): packed kernel operands, whose vector
// loads must not straddle lines (the AVX2 int8 GEMM reads its weights 25% slower from a
// malloc'd vector's 16-byte alignment, measured on Zen 5).
#include <cstddef>
#include <new>
#include <vector>

namespace qat {

template <class T, std::size_t kAlign = 64>
struct AlignedAllocator {
  using value_type = T;
  template <class U>
  struct rebind {
    using other = AlignedAllocator<U, kAlign>;
  };
  AlignedAllocator() = default;
  template <class U>
  AlignedAllocator(const AlignedAllocator<U, kAlign>&) noexcept {}
  T* allocate(std::size_t n) {
    return static_cast<T*>(::operator new (n * sizeof(T), std::align_val_t{kAlign}));
  }
  void deallocate(T* p, std::size_t) noexcept { ::operator delete (p, std::align_val_t{kAlign}); }
  friend bool operator==(const AlignedAllocator&, const AlignedAllocator&) { return true; }
};

template <class T>
using AlignedVector = std::vector<T, AlignedAllocator<T>>;

}  // namespace qat
