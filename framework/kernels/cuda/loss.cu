// log_softmax and the losses on CUDA (kernels.h). A row is one thread's, in the CPU's order; the
// losses' means are double sums in a fixed tree (one block: deterministic, no atomics).
#include <cmath>

#include "framework/kernels/cuda/kernels.h"
#include "framework/kernels/cuda/launch.h"

namespace qat::kernels::cuda {
namespace {

using i64 = std::int64_t;

// y = x - max - log(sum(exp(x - max))) over a strided row of n values (loss.cpp's log_softmax_row)
template <class T>
__device__ void log_softmax_row(const T* x, T* y, i64 n, i64 stride) {
  T m = -INFINITY;
  for (i64 k = 0; k < n; ++k) m = max(m, x[k * stride]);
  T s = 0;
  for (i64 k = 0; k < n; ++k) s += exp(x[k * stride] - m);
  const T lse = m + log(s);
  for (i64 k = 0; k < n; ++k) y[k * stride] = x[k * stride] - lse;
}

template <class T>
__global__ void log_softmax_kernel(const T* x, T* y, i64 outer, i64 n, i64 inner) {
  for (i64 r = global_index(); r < outer * inner; r += global_stride()) {
    const i64 base = r / inner * n * inner + r % inner;
    log_softmax_row(x + base, y + base, n, inner);
  }
}

template <class T>
__global__ void log_softmax_backward_kernel(const T* g, const T* y, T* dx, i64 outer, i64 n, i64 inner) {
  for (i64 r = global_index(); r < outer * inner; r += global_stride()) {
    const i64 base = r / inner * n * inner + r % inner;
    T gsum = 0;
    for (i64 k = 0; k < n; ++k) gsum += g[base + k * inner];
    for (i64 k = 0; k < n; ++k)
      dx[base + k * inner] = g[base + k * inner] - exp(y[base + k * inner]) * gsum;
  }
}

// *out = T(sum_i f(i) / divisor) over i < n: one block, thread t sums i = t, t + kBlock, ... in
// order, then a fixed tree
template <class T, class F>
__global__ void mean_kernel(T* out, i64 n, double divisor, F f) {
  __shared__ double partial[kBlock];
  double acc = 0;
  for (i64 i = threadIdx.x; i < n; i += blockDim.x) acc += f(i);
  partial[threadIdx.x] = acc;
  __syncthreads();
  for (int w = kBlock / 2; w > 0; w /= 2) {
    if (threadIdx.x < w) partial[threadIdx.x] += partial[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0) *out = static_cast<T>(partial[0] / divisor);
}

template <class T>
struct NegLogpAtLabel {
  const T* logp;
  const i64* labels;
  i64 C;
  __device__ double operator()(i64 i) const { return -static_cast<double>(logp[i * C + labels[i]]); }
};

template <class T>
struct SquaredError {
  const T* a;
  const T* b;
  __device__ double operator()(i64 i) const {
    const double d = a[i] - b[i];  // the difference in T, its square in double (as the CPU)
    return d * d;
  }
};

template <class T>
__global__ void cross_entropy_backward_kernel(const T* g, const T* logp, const i64* labels, T* dx, i64 N,
                                              i64 C) {
  const T scale = *g / static_cast<T>(N);
  for (i64 i = global_index(); i < N * C; i += global_stride())
    dx[i] = exp(logp[i]) * scale - (labels[i / C] == i % C ? scale : T(0));
}

template <class T>
__global__ void mse_backward_kernel(const T* g, const T* a, const T* b, T* d, i64 n) {
  const T k = *g * T(2) / static_cast<T>(n);
  for (i64 i = global_index(); i < n; i += global_stride()) d[i] = k * (a[i] - b[i]);
}

}  // namespace

#define QAT_CUDA_LOSS(T)                                                                                \
  void log_softmax(const T* x, T* y, i64 outer, i64 n, i64 inner) {                                     \
    if (outer * n * inner == 0) return;                                                                 \
    log_softmax_kernel<<<grid_for(outer* inner), kBlock, 0, stream("log_softmax")>>>(x, y, outer, n,    \
                                                                                     inner);            \
    QAT_CUDA_CHECK_LAUNCH("log_softmax");                                                               \
  }                                                                                                     \
  void log_softmax_backward(const T* g, const T* y, T* dx, i64 outer, i64 n, i64 inner) {               \
    if (outer * n * inner == 0) return;                                                                 \
    log_softmax_backward_kernel<<<grid_for(outer* inner), kBlock, 0, stream("log_softmax_backward")>>>( \
        g, y, dx, outer, n, inner);                                                                     \
    QAT_CUDA_CHECK_LAUNCH("log_softmax_backward");                                                      \
  }                                                                                                     \
  void cross_entropy(const T* logits, const i64* labels, T* logp, T* loss, i64 N, i64 C) {              \
    if (N == 0) return;                                                                                 \
    log_softmax(logits, logp, N, C, 1);                                                                 \
    mean_kernel<<<1, kBlock, 0, stream("cross_entropy")>>>(loss, N, static_cast<double>(N),             \
                                                           NegLogpAtLabel<T>{logp, labels, C});         \
    QAT_CUDA_CHECK_LAUNCH("cross_entropy");                                                             \
  }                                                                                                     \
  void cross_entropy_backward(const T* g, const T* logp, const i64* labels, T* dx, i64 N, i64 C) {      \
    if (N * C == 0) return;                                                                             \
    cross_entropy_backward_kernel<<<grid_for(N* C), kBlock, 0, stream("cross_entropy_backward")>>>(     \
        g, logp, labels, dx, N, C);                                                                     \
    QAT_CUDA_CHECK_LAUNCH("cross_entropy_backward");                                                    \
  }                                                                                                     \
  void mse(const T* a, const T* b, T* loss, i64 n) {                                                    \
    if (n == 0) return;                                                                                 \
    mean_kernel<<<1, kBlock, 0, stream("mse_loss")>>>(loss, n, static_cast<double>(n),                  \
                                                      SquaredError<T>{a, b});                           \
    QAT_CUDA_CHECK_LAUNCH("mse_loss");                                                                  \
  }                                                                                                     \
  void mse_backward(const T* g, const T* a, const T* b, T* d, i64 n) {                                  \
    if (n == 0) return;                                                                                 \
    mse_backward_kernel<<<grid_for(n), kBlock, 0, stream("mse_loss_backward")>>>(g, a, b, d, n);        \
    QAT_CUDA_CHECK_LAUNCH("mse_loss_backward");                                                         \
  }
QAT_CUDA_LOSS(float)
QAT_CUDA_LOSS(double)
#undef QAT_CUDA_LOSS

}  // namespace qat::kernels::cuda
