// cuda::PinnedStager (tensor/cuda.h): input batches copied to the device through page-locked
// host buffers, asynchronously on the one stream. A pageable source would make the driver stage
// it itself and make cudaMemcpyAsync wait for it (detail::copy synchronises for that reason);
// from pinned memory the copy is a DMA that overlaps the kernels already queued (the CUDA C++
// Programming Guide, "Asynchronous Concurrent Execution" and "Page-Locked Host Memory").
#include <cstring>
#include <vector>

#include "framework/kernels/cuda/check.h"
#include "framework/kernels/cuda/runtime.h"
#include "framework/tensor/cuda.h"
#include "framework/tensor/dispatch.h"

namespace qat::cuda {

namespace {
constexpr const char* kFn = "cuda::PinnedStager::to_device";
}

struct PinnedStager::Impl {
  struct Slot {
    void* host = nullptr;  // cudaHostAlloc'd
    std::size_t capacity = 0;
    cudaEvent_t done = nullptr;  // recorded after the copy that last read `host`
    bool pending = false;
  };
  std::vector<Slot> slots;
  std::size_t next = 0;
};

PinnedStager::PinnedStager(int slots) : impl_(new Impl) {
  QAT_REQUIRE(slots >= 1 && slots <= 64, "cuda::PinnedStager", "slots must be in [1, 64], got ", slots);
  impl_->slots.resize(static_cast<std::size_t>(slots));
}

PinnedStager::~PinnedStager() {
  for (Impl::Slot& s : impl_->slots) {  // no throwing here: wait, then free what was made
    if (s.done != nullptr) {
      cudaEventSynchronize(s.done);
      cudaEventDestroy(s.done);
    }
    if (s.host != nullptr) cudaFreeHost(s.host);
  }
  delete impl_;
}

Tensor PinnedStager::to_device(const Tensor& host) {
  QAT_REQUIRE(host.defined(), kFn, "host is an undefined tensor");
  if (host.device() == Device::CUDA) return host;
  detail::require_device(kFn);
  const std::size_t nbytes = host.nbytes();
  Tensor out = Tensor::empty(host.shape(), host.dtype(), Device::CUDA);
  if (nbytes == 0) return out;
  cudaStream_t stream = detail::stream(kFn);
  Impl::Slot& slot = impl_->slots[impl_->next];
  impl_->next = (impl_->next + 1) % impl_->slots.size();
  if (slot.pending) {  // its previous copy must have read the buffer before we overwrite it
    QAT_CUDA_CHECK(cudaEventSynchronize(slot.done), kFn);
    slot.pending = false;
  }
  if (slot.capacity < nbytes) {
    if (slot.host != nullptr) QAT_CUDA_CHECK(cudaFreeHost(slot.host), kFn);
    slot.host = nullptr;
    slot.capacity = 0;
    QAT_CUDA_CHECK(cudaHostAlloc(&slot.host, nbytes, cudaHostAllocDefault), kFn);
    slot.capacity = nbytes;
  }
  if (slot.done == nullptr) QAT_CUDA_CHECK(cudaEventCreateWithFlags(&slot.done, cudaEventDisableTiming), kFn);
  std::memcpy(slot.host, host.raw_data(), nbytes);
  void* dst = qat::detail::dispatch_any(out.dtype(), [&]<class T>() -> void* { return out.cuda_data<T>(); });
  QAT_CUDA_CHECK(cudaMemcpyAsync(dst, slot.host, nbytes, cudaMemcpyHostToDevice, stream), kFn);
  QAT_CUDA_CHECK(cudaEventRecord(slot.done, stream), kFn);
  slot.pending = true;
  return out;
}

}  // namespace qat::cuda
