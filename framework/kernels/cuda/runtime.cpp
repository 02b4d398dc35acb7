// The CUDA runtime behind Storage (runtime.h, tensor/cuda.h): device discovery, the one stream,
// copies and the caching allocator. Same idea as the CPU pool (tensor/storage.cpp): buffers by
// size class, freed ones kept for reuse, so a training step in steady state calls cudaMalloc
// zero times. All work is ordered on one stream, so a buffer released while kernels that use it
// are still queued can be handed out again at once: its next user is queued behind them.
#include "framework/kernels/cuda/runtime.h"

#include <atomic>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "framework/kernels/cuda/check.h"
#include "framework/tensor/cuda.h"
#include "framework/tensor/detail/buffer_pool.h"

namespace qat::cuda {
namespace detail {
namespace {

struct Probe {
  int count = 0;
  cudaError_t err = cudaSuccess;
};

const Probe& probe() {
  static const Probe p = [] {
    Probe r;
    r.err = cudaGetDeviceCount(&r.count);
    if (r.err != cudaSuccess) {
      r.count = 0;
      cudaGetLastError();  // clear it: later calls report their own errors
    } else if (r.count == 0) {
      r.err = cudaErrorNoDevice;
    }
    return r;
  }();
  return p;
}

using Pool = qat::detail::BufferPool;

Pool& pool() {
  static Pool* p = new Pool();  // never destroyed: storages may outlive static destructors
  return *p;
}

}  // namespace

int current_device() noexcept {
  int d = -1;
  if (probe().count == 0 || cudaGetDevice(&d) != cudaSuccess) return -1;
  return d;
}

void throw_cuda_error(cudaError_t err, const char* fn, const char* call, const char* file, int line) {
  cudaGetLastError();  // a non-sticky error must not surface again in the next op
  const int dev = current_device();
  throw Error(qat::detail::concat(fn, ": ", call, " failed on cuda:", dev < 0 ? 0 : dev, ": ",
                                  cudaGetErrorString(err), " (", cudaGetErrorName(err), ", ", file, ":",
                                  line, ")"));
}

void require_device(const char* fn) {
  const Probe& p = probe();
  if (p.count > 0) return;
  throw Error(qat::detail::concat(fn, ": no usable CUDA device for cuda:0: ", cudaGetErrorString(p.err),
                                  " (", cudaGetErrorName(p.err), ")"));
}

namespace {
std::atomic<int> g_stream_device{-1};  // the device the stream was created on
}

cudaStream_t stream(const char* fn) {
  static cudaStream_t s = [fn] {
    require_device(fn);
    cudaStream_t created = nullptr;
    QAT_CUDA_CHECK(cudaStreamCreateWithFlags(&created, cudaStreamNonBlocking), fn);
    g_stream_device = current_device();
    return created;
  }();
  return s;
}

void* allocate(std::size_t nbytes, std::size_t* capacity, const char* fn) {
  if (nbytes == 0) {
    *capacity = 0;
    return nullptr;
  }
  require_device(fn);
  const std::size_t cls = CachingAllocator::size_class(nbytes);
  *capacity = cls;
  Pool& s = pool();
  if (void* p = s.take(cls)) return p;
  stream(fn);  // the stream exists before the first buffer (its creation may fail first)
  void* p = nullptr;
  cudaError_t err = cudaMalloc(&p, cls);
  if (err == cudaErrorMemoryAllocation) {  // give the cache back and try once more
    cudaGetLastError();
    cuda::empty_cache();
    err = cudaMalloc(&p, cls);
  }
  if (err != cudaSuccess) {
    const AllocatorStats st = cuda::allocator_stats();
    cudaGetLastError();
    throw Error(qat::detail::concat(
        fn, ": cudaMalloc of ", cls, " bytes failed on cuda:", std::max(current_device(), 0), ": ",
        cudaGetErrorString(err), " (", cudaGetErrorName(err), "; ", st.bytes_reserved,
        " bytes reserved by qat, ", st.bytes_cached, " of them cached)"));
  }
  s.fresh(cls);
  return p;
}

void release(void* ptr, std::size_t capacity) noexcept {
  if (ptr == nullptr) return;
  pool().put(ptr, capacity);
}

void copy(void* dst, Device dst_device, const void* src, Device src_device, std::size_t nbytes,
          const char* fn) {
  if (nbytes == 0) return;
  cudaStream_t st = stream(fn);
  const cudaMemcpyKind kind =
      src_device == Device::CPU
          ? (dst_device == Device::CPU ? cudaMemcpyHostToHost : cudaMemcpyHostToDevice)
          : (dst_device == Device::CPU ? cudaMemcpyDeviceToHost : cudaMemcpyDeviceToDevice);
  QAT_CUDA_CHECK(cudaMemcpyAsync(dst, src, nbytes, kind, st), fn);
  // a host buffer on either side (pageable memory) must be done with before we return
  if (kind != cudaMemcpyDeviceToDevice) QAT_CUDA_CHECK(cudaStreamSynchronize(st), fn);
}

}  // namespace detail

bool is_built() { return true; }

int device_count() { return detail::probe().count; }

std::string unavailable_reason() {
  const detail::Probe& p = detail::probe();
  if (p.count > 0) return "";
  return qat::detail::concat(cudaGetErrorString(p.err), " (", cudaGetErrorName(p.err), ")");
}

void set_device(int index) {
  constexpr const char* fn = "cuda::set_device";
  const int count = device_count();
  QAT_REQUIRE(index >= 0 && index < count, fn, "device ", index, " does not exist (", count,
              " CUDA devices", count == 0 ? ": " + unavailable_reason() : std::string(), ")");
  const int bound = detail::g_stream_device.load();
  QAT_REQUIRE(bound < 0 || bound == index, fn, "device ", index,
              " requested after CUDA work started on device ", bound,
              " (call set_device before the first CUDA op)");
  QAT_CUDA_CHECK(cudaSetDevice(index), fn);
}

void synchronize() {
  if (device_count() == 0) return;
  QAT_CUDA_CHECK(cudaStreamSynchronize(detail::stream("cuda::synchronize")), "cuda::synchronize");
}

AllocatorStats allocator_stats() { return detail::pool().stats(); }

void empty_cache() {
  if (device_count() == 0) return;
  // queued kernels may still use a cached buffer: wait first
  QAT_CUDA_CHECK(cudaStreamSynchronize(detail::stream("cuda::empty_cache")), "cuda::empty_cache");
  detail::pool().drain([](void* p) { cudaFree(p); });
}

}  // namespace qat::cuda
