// The framework's CUDA kernels in a build without the CUDA backend: an op reaches them only with
// CUDA tensors, which need a device, so each throws naming the kernel and the build.
#include "framework/kernels/cuda/kernels.h"
#include "framework/kernels/cuda/runtime.h"

namespace qat::kernels::cuda {
namespace {
[[noreturn]] void none(const char* fn) {
  ::qat::cuda::detail::require_device(fn);
  __builtin_unreachable();
}
}  // namespace

// (an empty range launches nothing there either, so it needs no device here)
#define QAT_CUDA_NONE(T)                                                                         \
  void binary(BinaryOp, const T*, const T*, T*, const BroadcastDims&, std::int64_t n) {           \
    if (n != 0) none("binary");                                                                  \
  }                                                                                              \
  void unary(UnaryOp, const T*, T*, std::int64_t n, double) {                                    \
    if (n != 0) none("unary");                                                                   \
  }                                                                                              \
  void relu_backward(const T*, const T*, T*, std::int64_t n) {                                   \
    if (n != 0) none("relu_backward");                                                           \
  }                                                                                              \
  void add_inplace(T*, const T*, std::int64_t n) {                                               \
    if (n != 0) none("add_inplace");                                                             \
  }                                                                                              \
  void repeat_rows(const T*, T*, std::int64_t rows, std::int64_t cols) {                         \
    if (rows * cols != 0) none("repeat_rows");                                                   \
  }                                                                                              \
  void sum(const T*, T*, const ReduceDims& d, double) {                                          \
    if (d.n_out != 0) none("sum");                                                               \
  }                                                                                              \
  void gemm(bool, bool, std::int64_t m, std::int64_t n, std::int64_t, T, const T*, std::int64_t, \
            const T*, std::int64_t, T, T*, std::int64_t) {                                       \
    if (m != 0 && n != 0) none("gemm");                                                          \
  }
QAT_CUDA_NONE(float)
QAT_CUDA_NONE(double)
#undef QAT_CUDA_NONE

}  // namespace qat::kernels::cuda
