// The CUDA entry points of a build without the CUDA backend (QAT_CUDA off): no device, and
// every attempt to use one throws naming the op and the build.
#include "framework/kernels/cuda/runtime.h"
#include "framework/tensor/cuda.h"
#include "framework/tensor/error.h"

namespace qat::cuda {
namespace {
constexpr const char* kWhy =
    "this build has no CUDA backend (configured with QAT_CUDA=OFF or without nvcc)";
}

bool is_built() { return false; }
int device_count() { return 0; }
std::string unavailable_reason() { return kWhy; }
void set_device(int index) {
  throw Error(qat::detail::concat("cuda::set_device: no device ", index, ": ", kWhy));
}
void synchronize() {}
AllocatorStats allocator_stats() { return {}; }
void empty_cache() {}

struct PinnedStager::Impl {};
PinnedStager::PinnedStager(int slots) : impl_(nullptr) {
  QAT_REQUIRE(slots >= 1 && slots <= 64, "cuda::PinnedStager", "slots must be in [1, 64], got ", slots);
}
PinnedStager::~PinnedStager() = default;
Tensor PinnedStager::to_device(const Tensor& host) {
  QAT_REQUIRE(host.defined(), "cuda::PinnedStager::to_device", "host is an undefined tensor");
  detail::require_device("cuda::PinnedStager::to_device");
  return host;
}

namespace detail {
void require_device(const char* fn) { throw Error(qat::detail::concat(fn, ": no cuda:0: ", kWhy)); }
void* allocate(std::size_t nbytes, std::size_t* capacity, const char* fn) {
  *capacity = 0;
  if (nbytes == 0) return nullptr;
  require_device(fn);
  return nullptr;
}
void release(void*, std::size_t) noexcept {}
void copy(void*, Device, const void*, Device, std::size_t nbytes, const char* fn) {
  if (nbytes != 0) require_device(fn);
}
void fill(void*, const void*, std::size_t, std::int64_t n, const char* fn) {
  if (n != 0) require_device(fn);
}
}  // namespace detail

}  // namespace qat::cuda
