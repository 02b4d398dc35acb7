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
#define QAT_CUDA_NONE(T)                                                                               \
  void binary(BinaryOp, const T*, const T*, T*, const BroadcastDims&, std::int64_t n) {                \
    if (n != 0) none("binary");                                                                        \
  }                                                                                                    \
  void unary(UnaryOp, const T*, T*, std::int64_t n, double) {                                          \
    if (n != 0) none("unary");                                                                         \
  }                                                                                                    \
  void relu_backward(const T*, const T*, T*, std::int64_t n) {                                         \
    if (n != 0) none("relu_backward");                                                                 \
  }                                                                                                    \
  void add_inplace(T*, const T*, std::int64_t n) {                                                     \
    if (n != 0) none("add_inplace");                                                                   \
  }                                                                                                    \
  void repeat_rows(const T*, T*, std::int64_t rows, std::int64_t cols) {                               \
    if (rows * cols != 0) none("repeat_rows");                                                         \
  }                                                                                                    \
  void sum(const T*, T*, const ReduceDims& d, double) {                                                \
    if (d.n_out != 0) none("sum");                                                                     \
  }                                                                                                    \
  void gemm(bool, bool, std::int64_t m, std::int64_t n, std::int64_t, T, const T*, std::int64_t,       \
            const T*, std::int64_t, T, T*, std::int64_t) {                                             \
    if (m != 0 && n != 0) none("gemm");                                                                \
  }                                                                                                    \
  void gemm_batched(bool, bool, std::int64_t m, std::int64_t n, std::int64_t, T, const T*,             \
                    std::int64_t, std::int64_t, const T*, std::int64_t, std::int64_t, T, T*,           \
                    std::int64_t, std::int64_t, std::int64_t batch) {                                  \
    if (m != 0 && n != 0 && batch != 0) none("gemm_batched");                                          \
  }                                                                                                    \
  void unary_backward(GradOp, const T*, const T*, T*, std::int64_t n) {                                \
    if (n != 0) none("unary_backward");                                                                \
  }                                                                                                    \
  void dropout(const T*, T*, T*, std::int64_t n, double, double, std::uint64_t) {                      \
    if (n != 0) none("dropout");                                                                       \
  }                                                                                                    \
  void im2col(const T*, T*, const ConvDims&, std::int64_t images) {                                    \
    if (images != 0) none("im2col");                                                                   \
  }                                                                                                    \
  void col2im(const T*, T*, const ConvDims&, std::int64_t images) {                                    \
    if (images != 0) none("col2im");                                                                   \
  }                                                                                                    \
  void channel_fill(const T*, T*, std::int64_t images, std::int64_t O, std::int64_t P) {               \
    if (images * O * P != 0) none("channel_fill");                                                     \
  }                                                                                                    \
  void max_pool(const T*, T*, std::int64_t*, const PoolDims& d) {                                      \
    if (d.planes != 0) none("max_pool2d");                                                             \
  }                                                                                                    \
  void max_pool_backward(const T*, const std::int64_t*, T*, const PoolDims& d) {                       \
    if (d.planes != 0) none("max_pool2d_backward");                                                    \
  }                                                                                                    \
  void avg_pool(const T*, T*, const PoolDims& d) {                                                     \
    if (d.planes != 0) none("avg_pool2d");                                                             \
  }                                                                                                    \
  void avg_pool_backward(const T*, T*, const PoolDims& d) {                                            \
    if (d.planes != 0) none("avg_pool2d_backward");                                                    \
  }                                                                                                    \
  void batch_norm_stats(const T*, const T*, const T*, T*, T*, double*, double*, T*, T*, std::int64_t,  \
                        std::int64_t C, std::int64_t, bool, double, double) {                          \
    if (C != 0) none("batch_norm");                                                                    \
  }                                                                                                    \
  void batch_norm_affine(const T*, const T*, const T*, T*, std::int64_t N, std::int64_t C,             \
                         std::int64_t S) {                                                             \
    if (N * C * S != 0) none("batch_norm");                                                            \
  }                                                                                                    \
  void batch_norm_backward(const T*, const T*, const T*, const double*, const double*, T*, T*, T*, T*, \
                           std::int64_t, std::int64_t C, std::int64_t, bool) {                         \
    if (C != 0) none("batch_norm_backward");                                                           \
  }                                                                                                    \
  void log_softmax(const T*, T*, std::int64_t outer, std::int64_t n, std::int64_t inner) {             \
    if (outer * n * inner != 0) none("log_softmax");                                                   \
  }                                                                                                    \
  void log_softmax_backward(const T*, const T*, T*, std::int64_t outer, std::int64_t n,                \
                            std::int64_t inner) {                                                      \
    if (outer * n * inner != 0) none("log_softmax_backward");                                          \
  }                                                                                                    \
  void cross_entropy(const T*, const std::int64_t*, T*, T*, std::int64_t N, std::int64_t) {            \
    if (N != 0) none("cross_entropy");                                                                 \
  }                                                                                                    \
  void cross_entropy_backward(const T*, const T*, const std::int64_t*, T*, std::int64_t N,             \
                              std::int64_t C) {                                                        \
    if (N * C != 0) none("cross_entropy_backward");                                                    \
  }                                                                                                    \
  void mse(const T*, const T*, T*, std::int64_t n) {                                                   \
    if (n != 0) none("mse_loss");                                                                      \
  }                                                                                                    \
  void mse_backward(const T*, const T*, const T*, T*, std::int64_t n) {                                \
    if (n != 0) none("mse_loss_backward");                                                             \
  }                                                                                                    \
  void argmax(const T*, std::int64_t*, T*, std::int64_t outer, std::int64_t, std::int64_t inner) {     \
    if (outer * inner != 0) none("argmax");                                                            \
  }                                                                                                    \
  void put_along(const T*, const std::int64_t*, T*, std::int64_t outer, std::int64_t,                  \
                 std::int64_t inner) {                                                                 \
    if (outer * inner != 0) none("max_backward");                                                      \
  }                                                                                                    \
  void sgd_step(const std::vector<StepTensor<T>>& ts, const SgdScalars<T>&) {                          \
    if (!ts.empty()) none("SGD::step");                                                                \
  }                                                                                                    \
  void adam_step(const std::vector<StepTensor<T>>& ts, const AdamScalars<T>&) {                        \
    if (!ts.empty()) none("Adam::step");                                                               \
  }
void increment(std::int64_t*) { none("increment"); }
std::string cublas_library() { none("cublas_library"); }

QAT_CUDA_NONE(float)
QAT_CUDA_NONE(double)
#undef QAT_CUDA_NONE

}  // namespace qat::kernels::cuda
