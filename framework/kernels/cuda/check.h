#pragma once
// Internal, for .cpp / .cu files of the CUDA backend only (includes cuda_runtime.h).
#include <cuda_runtime.h>

#include "framework/tensor/error.h"

namespace qat::cuda::detail {

/// The current device's index, or -1 when none can be queried.
int current_device() noexcept;
/// The stream every op runs on (created on first use).
cudaStream_t stream(const char* fn);
[[noreturn]] void throw_cuda_error(cudaError_t err, const char* fn, const char* call, const char* file,
                                   int line);

}  // namespace qat::cuda::detail

/// Throws qat::Error "<fn>: <call> failed on cuda:<device>: <cudaGetErrorString> (file:line)"
/// unless `call` returns cudaSuccess.
#define QAT_CUDA_CHECK(call, fn)                                                           \
  do {                                                                                     \
    const cudaError_t qat_cuda_err_ = (call);                                              \
    if (qat_cuda_err_ != cudaSuccess)                                                      \
      ::qat::cuda::detail::throw_cuda_error(qat_cuda_err_, fn, #call, __FILE__, __LINE__); \
  } while (0)

/// After a kernel launch: a bad configuration or an earlier asynchronous fault, named.
#define QAT_CUDA_CHECK_LAUNCH(fn) QAT_CUDA_CHECK(cudaGetLastError(), fn)
