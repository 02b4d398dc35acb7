// Elementwise CUDA kernels (kernels.h): broadcasting binary ops, scalar ops, relu, pointwise
// nonlinearities and their backward, dropout (Philox), fills.
// Grid-stride loops over 64-bit indices, 256 threads a block.
#include <cstring>

#include "framework/kernels/cuda/check.h"
#include "framework/kernels/cuda/kernels.h"
#include "framework/kernels/cuda/launch.h"
#include "framework/kernels/cuda/philox.h"
#include "framework/kernels/cuda/runtime.h"

namespace qat::kernels::cuda {
namespace {

template <class T>
__device__ T apply(BinaryOp op, T a, T b) {
  switch (op) {
    case BinaryOp::Add:
      return a + b;
    case BinaryOp::Sub:
      return a - b;
    case BinaryOp::Mul:
      return a * b;
    default:
      return a / b;
  }
}

// out[i] = a[oa] op b[ob], offsets from i's coordinates in the broadcast dimensions
template <class T>
__global__ void binary_kernel(BinaryOp op, const T* a, const T* b, T* out, BroadcastDims d,
                              std::int64_t n) {
  for (std::int64_t i = global_index(); i < n; i += global_stride()) {
    std::int64_t rest = i, oa = 0, ob = 0;
    for (int k = d.rank - 1; k >= 0; --k) {
      const std::int64_t c = rest % d.size[k];
      rest /= d.size[k];
      oa += c * d.sa[k];
      ob += c * d.sb[k];
    }
    out[i] = apply(op, a[oa], b[ob]);
  }
}

template <class T>
__global__ void unary_kernel(UnaryOp op, const T* x, T* y, std::int64_t n, T s) {
  for (std::int64_t i = global_index(); i < n; i += global_stride()) {
    const T v = x[i];
    T r;
    switch (op) {
      case UnaryOp::Neg:
        r = -v;
        break;
      case UnaryOp::AddScalar:
        r = v + s;
        break;
      case UnaryOp::MulScalar:
        r = v * s;
        break;
      case UnaryOp::DivScalar:
        r = v / s;
        break;
      case UnaryOp::RSubScalar:
        r = s - v;
        break;
      case UnaryOp::RDivScalar:
        r = s / v;
        break;
      case UnaryOp::Relu:
        r = v > T(0) ? v : T(0);
        break;
      case UnaryOp::Pow:
        r = pow(v, s);
        break;
      case UnaryOp::Sigmoid:
        r = T(1) / (T(1) + exp(-v));
        break;
      case UnaryOp::Tanh:
        r = tanh(v);
        break;
      case UnaryOp::Exp:
        r = exp(v);
        break;
      default:
        r = log(v);
        break;
    }
    y[i] = r;
  }
}

template <class T>
__global__ void relu_backward_kernel(const T* g, const T* x, T* d, std::int64_t n) {
  for (std::int64_t i = global_index(); i < n; i += global_stride()) d[i] = x[i] > T(0) ? g[i] : T(0);
}

template <class T>
__global__ void unary_backward_kernel(GradOp op, const T* g, const T* s, T* d, std::int64_t n) {
  for (std::int64_t i = global_index(); i < n; i += global_stride()) {
    const T gv = g[i], sv = s[i];
    switch (op) {
      case GradOp::Sigmoid:
        d[i] = gv * sv * (T(1) - sv);
        break;
      case GradOp::Tanh:
        d[i] = gv * (T(1) - sv * sv);
        break;
      case GradOp::Exp:
        d[i] = gv * sv;
        break;
      default:
        d[i] = gv / sv;
        break;
    }
  }
}

template <class T>
__global__ void dropout_kernel(const T* x, T* mask, T* y, std::int64_t n, double p, T keep,
                               std::uint64_t seed) {
  for (std::int64_t i = global_index(); i < n; i += global_stride()) {
    const T m = philox_uniform(seed, static_cast<std::uint64_t>(i)) >= p ? keep : T(0);
    mask[i] = m;
    y[i] = x[i] * m;
  }
}

template <class T>
__global__ void add_inplace_kernel(T* dst, const T* src, std::int64_t n) {
  for (std::int64_t i = global_index(); i < n; i += global_stride()) dst[i] += src[i];
}

template <class T>
__global__ void repeat_rows_kernel(const T* row, T* out, std::int64_t rows, std::int64_t cols) {
  const std::int64_t n = rows * cols;
  for (std::int64_t i = global_index(); i < n; i += global_stride()) out[i] = row[i % cols];
}

__global__ void increment_kernel(std::int64_t* counter) { *counter += 1; }

template <class U>
__global__ void fill_kernel(U* dst, U value, std::int64_t n) {
  for (std::int64_t i = global_index(); i < n; i += global_stride()) dst[i] = value;
}

template <class U>
void fill_as(void* dst, const void* value, std::int64_t n, const char* fn) {
  U v;
  std::memcpy(&v, value, sizeof v);
  fill_kernel<<<grid_for(n), kBlock, 0, stream(fn)>>>(static_cast<U*>(dst), v, n);
  QAT_CUDA_CHECK_LAUNCH(fn);
}

}  // namespace

#define QAT_CUDA_ELEMENTWISE(T)                                                                         \
  void binary(BinaryOp op, const T* a, const T* b, T* out, const BroadcastDims& dims, std::int64_t n) { \
    if (n == 0) return;                                                                                 \
    binary_kernel<<<grid_for(n), kBlock, 0, stream("binary")>>>(op, a, b, out, dims, n);                \
    QAT_CUDA_CHECK_LAUNCH("binary");                                                                    \
  }                                                                                                     \
  void unary(UnaryOp op, const T* x, T* y, std::int64_t n, double s) {                                  \
    if (n == 0) return;                                                                                 \
    unary_kernel<<<grid_for(n), kBlock, 0, stream("unary")>>>(op, x, y, n, static_cast<T>(s));          \
    QAT_CUDA_CHECK_LAUNCH("unary");                                                                     \
  }                                                                                                     \
  void relu_backward(const T* g, const T* x, T* d, std::int64_t n) {                                    \
    if (n == 0) return;                                                                                 \
    relu_backward_kernel<<<grid_for(n), kBlock, 0, stream("relu_backward")>>>(g, x, d, n);              \
    QAT_CUDA_CHECK_LAUNCH("relu_backward");                                                             \
  }                                                                                                     \
  void unary_backward(GradOp op, const T* g, const T* s, T* d, std::int64_t n) {                        \
    if (n == 0) return;                                                                                 \
    unary_backward_kernel<<<grid_for(n), kBlock, 0, stream("unary_backward")>>>(op, g, s, d, n);        \
    QAT_CUDA_CHECK_LAUNCH("unary_backward");                                                            \
  }                                                                                                     \
  void dropout(const T* x, T* mask, T* y, std::int64_t n, double p, double keep, std::uint64_t seed) {  \
    if (n == 0) return;                                                                                 \
    dropout_kernel<<<grid_for(n), kBlock, 0, stream("dropout")>>>(x, mask, y, n, p,                     \
                                                                  static_cast<T>(keep), seed);          \
    QAT_CUDA_CHECK_LAUNCH("dropout");                                                                   \
  }                                                                                                     \
  void add_inplace(T* dst, const T* src, std::int64_t n) {                                              \
    if (n == 0) return;                                                                                 \
    add_inplace_kernel<<<grid_for(n), kBlock, 0, stream("add_inplace")>>>(dst, src, n);                 \
    QAT_CUDA_CHECK_LAUNCH("add_inplace");                                                               \
  }                                                                                                     \
  void repeat_rows(const T* row, T* out, std::int64_t rows, std::int64_t cols) {                        \
    if (rows * cols == 0) return;                                                                       \
    repeat_rows_kernel<<<grid_for(rows* cols), kBlock, 0, stream("repeat_rows")>>>(row, out, rows,      \
                                                                                   cols);               \
    QAT_CUDA_CHECK_LAUNCH("repeat_rows");                                                               \
  }
QAT_CUDA_ELEMENTWISE(float)
QAT_CUDA_ELEMENTWISE(double)
#undef QAT_CUDA_ELEMENTWISE

void increment(std::int64_t* counter) {
  increment_kernel<<<1, 1, 0, stream("increment")>>>(counter);
  QAT_CUDA_CHECK_LAUNCH("increment");
}

}  // namespace qat::kernels::cuda

namespace qat::cuda::detail {

void fill(void* dst, const void* value, std::size_t element_size, std::int64_t n, const char* fn) {
  if (n == 0) return;
  switch (element_size) {
    case 1:
      return kernels::cuda::fill_as<std::uint8_t>(dst, value, n, fn);
    case 2:
      return kernels::cuda::fill_as<std::uint16_t>(dst, value, n, fn);
    case 4:
      return kernels::cuda::fill_as<std::uint32_t>(dst, value, n, fn);
    default:
      return kernels::cuda::fill_as<std::uint64_t>(dst, value, n, fn);
  }
}

}  // namespace qat::cuda::detail
