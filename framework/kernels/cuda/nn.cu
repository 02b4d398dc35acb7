// The layers' CUDA kernels (kernels.h): im2col / col2im for convolution (the GEMMs are cuBLAS),
// pooling, batch normalisation. Backward passes gather (one thread per input element, its
// contributions in a fixed order) instead of scattering with atomics, and the batch-norm sums
// are fixed trees: every result is deterministic.
#include <cmath>

#include "framework/kernels/cuda/kernels.h"
#include "framework/kernels/cuda/launch.h"
#include "framework/kernels/cuda/window.h"

namespace qat::kernels::cuda {
namespace {

using i64 = std::int64_t;

// ---- convolution and pooling: one thread per output element (window.h) ----

template <class T>
__global__ void im2col_kernel(const T* x, T* col, ConvDims d, i64 total) {
  for (i64 idx = global_index(); idx < total; idx += global_stride())
    col[idx] = window::im2col_at(x, d, idx);
}

template <class T>
__global__ void col2im_kernel(const T* col, T* dx, ConvDims d, i64 total) {
  for (i64 idx = global_index(); idx < total; idx += global_stride())
    dx[idx] = window::col2im_at(col, d, idx);
}

template <class T>
__global__ void channel_fill_kernel(const T* b, T* out, i64 O, i64 P, i64 total) {
  for (i64 i = global_index(); i < total; i += global_stride()) out[i] = b[i / P % O];
}

template <class T>
__global__ void max_pool_kernel(const T* x, T* y, i64* at, PoolDims d, i64 total) {
  for (i64 idx = global_index(); idx < total; idx += global_stride())
    y[idx] = window::max_pool_at(x, d, idx, at + idx);
}

template <class T>
__global__ void max_pool_backward_kernel(const T* g, const i64* at, T* dx, PoolDims d, i64 total) {
  for (i64 idx = global_index(); idx < total; idx += global_stride())
    dx[idx] = window::max_pool_grad_at(g, at, d, idx);
}

template <class T>
__global__ void avg_pool_kernel(const T* x, T* y, PoolDims d, i64 total) {
  for (i64 idx = global_index(); idx < total; idx += global_stride())
    y[idx] = window::avg_pool_at(x, d, idx);
}

template <class T>
__global__ void avg_pool_backward_kernel(const T* g, T* dx, PoolDims d, i64 total) {
  for (i64 idx = global_index(); idx < total; idx += global_stride())
    dx[idx] = window::avg_pool_grad_at(g, d, idx);
}

// ---- batch normalisation ----

// a and b summed over the block in a fixed tree; every thread gets the totals.
__device__ void block_sum2(double& a, double& b) {
  __shared__ double sa[kBlock], sb[kBlock];
  sa[threadIdx.x] = a;
  sb[threadIdx.x] = b;
  __syncthreads();
  for (int w = kBlock / 2; w > 0; w /= 2) {
    if (threadIdx.x < w) {
      sa[threadIdx.x] += sa[threadIdx.x + w];
      sb[threadIdx.x] += sb[threadIdx.x + w];
    }
    __syncthreads();
  }
  a = sa[0];
  b = sb[0];
  __syncthreads();  // sa, sb are reused by the next call
}

template <class T>
__global__ void bn_stats_kernel(const T* x, const T* w, const T* b, T* rm, T* rv, double* mean_out,
                                double* invstd_out, T* a, T* shift, i64 N, i64 C, i64 S, bool training,
                                double momentum, double eps) {
  const i64 M = N * S;
  for (i64 c = blockIdx.x; c < C; c += gridDim.x) {
    double mean, var;
    if (training) {
      // shifted by the channel's first value p:  mean = p + s1/M,  var = s2/M - (s1/M)^2
      const double p = x[c * S], m = static_cast<double>(M);
      double s1 = 0, s2 = 0;
      for (i64 r = threadIdx.x; r < M; r += blockDim.x) {
        const double u = static_cast<double>(x[(r / S * C + c) * S + r % S]) - p;
        s1 += u;
        s2 = fma(u, u, s2);
      }
      block_sum2(s1, s2);
      mean = p + s1 / m;
      var = fmax(s2 / m - (s1 / m) * (s1 / m), 0.0);
    } else {
      mean = rm[c];
      var = rv[c];
    }
    if (threadIdx.x == 0) {
      const double inv = 1.0 / sqrt(var + eps), scale = inv * (w ? static_cast<double>(w[c]) : 1.0);
      mean_out[c] = mean;
      invstd_out[c] = inv;
      a[c] = static_cast<T>(scale);
      shift[c] = static_cast<T>((b ? static_cast<double>(b[c]) : 0.0) - mean * scale);
      if (training && rm) {
        const double unbias = static_cast<double>(M) / static_cast<double>(M - 1);
        rm[c] = static_cast<T>((1 - momentum) * rm[c] + momentum * mean);
        rv[c] = static_cast<T>((1 - momentum) * rv[c] + momentum * var * unbias);
      }
    }
  }
}

template <class T>
__global__ void bn_affine_kernel(const T* x, const T* a, const T* shift, T* y, i64 C, i64 S, i64 total) {
  for (i64 i = global_index(); i < total; i += global_stride()) {
    const i64 c = i / S % C;
    y[i] = x[i] * a[c] + shift[c];
  }
}

// scratch: k, mg, kx, mean per channel (T)
template <class T>
__global__ void bn_grad_sums_kernel(const T* g, const T* x, const T* w, const double* mean,
                                    const double* invstd, T* dw, T* db, T* scratch, i64 N, i64 C, i64 S,
                                    bool training) {
  const i64 M = N * S;
  for (i64 c = blockIdx.x; c < C; c += gridDim.x) {
    const double m = mean[c];
    double sg = 0, sgx = 0;
    for (i64 r = threadIdx.x; r < M; r += blockDim.x) {
      const i64 i = (r / S * C + c) * S + r % S;
      const double v = g[i];
      sg += v;
      sgx = fma(v, static_cast<double>(x[i]) - m, sgx);
    }
    block_sum2(sg, sgx);
    if (threadIdx.x == 0) {
      const double inv = invstd[c], count = static_cast<double>(M);
      sgx *= inv;
      if (dw) dw[c] = static_cast<T>(sgx);
      if (db) db[c] = static_cast<T>(sg);
      const double k = inv * (w ? static_cast<double>(w[c]) : 1.0);
      scratch[c] = static_cast<T>(k);
      scratch[C + c] = static_cast<T>(training ? sg / count : 0.0);
      scratch[2 * C + c] = static_cast<T>(training ? k * inv * sgx / count : 0.0);
      scratch[3 * C + c] = static_cast<T>(m);
    }
  }
}

// dx = k (g - mg) - kx (x - m), in T
template <class T>
__global__ void bn_input_grad_kernel(const T* g, const T* x, const T* scratch, T* dx, i64 C, i64 S,
                                     i64 total) {
  for (i64 i = global_index(); i < total; i += global_stride()) {
    const i64 c = i / S % C;
    dx[i] = scratch[c] * (g[i] - scratch[C + c]) - scratch[2 * C + c] * (x[i] - scratch[3 * C + c]);
  }
}

unsigned channel_blocks(i64 C) { return static_cast<unsigned>(std::min<i64>(C, 65535)); }

}  // namespace

#define QAT_CUDA_NN(T)                                                                                  \
  void im2col(const T* x, T* col, const ConvDims& d, i64 images) {                                      \
    const i64 total = images * d.C * d.kh * d.kw * d.Ho * d.Wo;                                         \
    if (total == 0) return;                                                                             \
    im2col_kernel<<<grid_for(total), kBlock, 0, stream("im2col")>>>(x, col, d, total);                  \
    QAT_CUDA_CHECK_LAUNCH("im2col");                                                                    \
  }                                                                                                     \
  void col2im(const T* col, T* dx, const ConvDims& d, i64 images) {                                     \
    const i64 total = images * d.C * d.H * d.W;                                                         \
    if (total == 0) return;                                                                             \
    col2im_kernel<<<grid_for(total), kBlock, 0, stream("col2im")>>>(col, dx, d, total);                 \
    QAT_CUDA_CHECK_LAUNCH("col2im");                                                                    \
  }                                                                                                     \
  void channel_fill(const T* b, T* out, i64 images, i64 O, i64 P) {                                     \
    const i64 total = images * O * P;                                                                   \
    if (total == 0) return;                                                                             \
    channel_fill_kernel<<<grid_for(total), kBlock, 0, stream("channel_fill")>>>(b, out, O, P, total);   \
    QAT_CUDA_CHECK_LAUNCH("channel_fill");                                                              \
  }                                                                                                     \
  void max_pool(const T* x, T* y, i64* at, const PoolDims& d) {                                         \
    const i64 total = d.planes * d.Ho * d.Wo;                                                           \
    if (total == 0) return;                                                                             \
    max_pool_kernel<<<grid_for(total), kBlock, 0, stream("max_pool2d")>>>(x, y, at, d, total);          \
    QAT_CUDA_CHECK_LAUNCH("max_pool2d");                                                                \
  }                                                                                                     \
  void max_pool_backward(const T* g, const i64* at, T* dx, const PoolDims& d) {                         \
    const i64 total = d.planes * d.H * d.W;                                                             \
    if (total == 0) return;                                                                             \
    max_pool_backward_kernel<<<grid_for(total), kBlock, 0, stream("max_pool2d_backward")>>>(g, at, dx,  \
                                                                                            d, total);  \
    QAT_CUDA_CHECK_LAUNCH("max_pool2d_backward");                                                       \
  }                                                                                                     \
  void avg_pool(const T* x, T* y, const PoolDims& d) {                                                  \
    const i64 total = d.planes * d.Ho * d.Wo;                                                           \
    if (total == 0) return;                                                                             \
    avg_pool_kernel<<<grid_for(total), kBlock, 0, stream("avg_pool2d")>>>(x, y, d, total);              \
    QAT_CUDA_CHECK_LAUNCH("avg_pool2d");                                                                \
  }                                                                                                     \
  void avg_pool_backward(const T* g, T* dx, const PoolDims& d) {                                        \
    const i64 total = d.planes * d.H * d.W;                                                             \
    if (total == 0) return;                                                                             \
    avg_pool_backward_kernel<<<grid_for(total), kBlock, 0, stream("avg_pool2d_backward")>>>(g, dx, d,   \
                                                                                            total);     \
    QAT_CUDA_CHECK_LAUNCH("avg_pool2d_backward");                                                       \
  }                                                                                                     \
  void batch_norm_stats(const T* x, const T* w, const T* b, T* rm, T* rv, double* mean, double* invstd, \
                        T* a, T* shift, i64 N, i64 C, i64 S, bool training, double momentum,            \
                        double eps) {                                                                   \
    if (C == 0) return;                                                                                 \
    bn_stats_kernel<<<channel_blocks(C), kBlock, 0, stream("batch_norm")>>>(                            \
        x, w, b, rm, rv, mean, invstd, a, shift, N, C, S, training, momentum, eps);                     \
    QAT_CUDA_CHECK_LAUNCH("batch_norm");                                                                \
  }                                                                                                     \
  void batch_norm_affine(const T* x, const T* a, const T* shift, T* y, i64 N, i64 C, i64 S) {           \
    const i64 total = N * C * S;                                                                        \
    if (total == 0) return;                                                                             \
    bn_affine_kernel<<<grid_for(total), kBlock, 0, stream("batch_norm")>>>(x, a, shift, y, C, S,        \
                                                                           total);                      \
    QAT_CUDA_CHECK_LAUNCH("batch_norm");                                                                \
  }                                                                                                     \
  void batch_norm_backward(const T* g, const T* x, const T* w, const double* mean,                      \
                           const double* invstd, T* dx, T* dw, T* db, T* scratch, i64 N, i64 C, i64 S,  \
                           bool training) {                                                             \
    if (C == 0) return;                                                                                 \
    bn_grad_sums_kernel<<<channel_blocks(C), kBlock, 0, stream("batch_norm_backward")>>>(               \
        g, x, w, mean, invstd, dw, db, scratch, N, C, S, training);                                     \
    QAT_CUDA_CHECK_LAUNCH("batch_norm_backward");                                                       \
    const i64 total = N * C * S;                                                                        \
    if (dx == nullptr || total == 0) return;                                                            \
    bn_input_grad_kernel<<<grid_for(total), kBlock, 0, stream("batch_norm_backward")>>>(                \
        g, x, scratch, dx, C, S, total);                                                                \
    QAT_CUDA_CHECK_LAUNCH("batch_norm_backward");                                                       \
  }
QAT_CUDA_NN(float)
QAT_CUDA_NN(double)
#undef QAT_CUDA_NN

}  // namespace qat::kernels::cuda
