// Reductions on CUDA (kernels.h): sums (one block per output element, fixed order, no atomics)
// and argmax (one thread per row, the CPU's scan).
#include "framework/kernels/cuda/kernels.h"
#include "framework/kernels/cuda/launch.h"

namespace qat::kernels::cuda {
namespace {

// out[j] = scale * sum_r in[base(j) + off(r)]: thread t sums r = t, t + kBlock, ... in order,
// then the block adds the partial sums pairwise (s[t] += s[t + w] for w = 128, 64, ..., 1)
template <class T>
__global__ void sum_kernel(const T* in, T* out, ReduceDims d, double scale) {
  __shared__ T partial[kBlock];
  for (std::int64_t j = blockIdx.x; j < d.n_out; j += gridDim.x) {
    std::int64_t rest = j, base = 0;
    for (int k = d.kept_rank - 1; k >= 0; --k) {
      base += (rest % d.kept_size[k]) * d.kept_stride[k];
      rest /= d.kept_size[k];
    }
    T acc = 0;
    for (std::int64_t r = threadIdx.x; r < d.n_red; r += blockDim.x) {
      std::int64_t rr = r, off = 0;
      for (int k = d.red_rank - 1; k >= 0; --k) {
        off += (rr % d.red_size[k]) * d.red_stride[k];
        rr /= d.red_size[k];
      }
      acc += in[base + off];
    }
    partial[threadIdx.x] = acc;
    __syncthreads();
    for (int w = kBlock / 2; w > 0; w /= 2) {
      if (threadIdx.x < w) partial[threadIdx.x] += partial[threadIdx.x + w];
      __syncthreads();
    }
    // the scale in double, as the CPU's mean
    if (threadIdx.x == 0) out[j] = scale == 1.0 ? partial[0] : static_cast<T>(partial[0] * scale);
    __syncthreads();  // partial is reused by the next output
  }
}

template <class T>
void launch_sum(const T* in, T* out, const ReduceDims& d, double scale) {
  if (d.n_out == 0) return;
  const unsigned blocks = static_cast<unsigned>(std::min<std::int64_t>(d.n_out, 65536));
  sum_kernel<<<blocks, kBlock, 0, stream("sum")>>>(in, out, d, scale);
  QAT_CUDA_CHECK_LAUNCH("sum");
}

// The CPU's rule (ops/reduce.cpp): scan from the first value, stop at a NaN, take a larger value.
template <class T>
__global__ void argmax_kernel(const T* x, std::int64_t* at, T* val, std::int64_t outer, std::int64_t n,
                              std::int64_t inner) {
  for (std::int64_t r = global_index(); r < outer * inner; r += global_stride()) {
    const T* row = x + r / inner * n * inner + r % inner;
    std::int64_t best = 0;
    T bv = row[0];
    for (std::int64_t k = 1; k < n && bv == bv; ++k) {
      const T cand = row[k * inner];
      if (cand > bv || cand != cand) best = k, bv = cand;
    }
    at[r] = best;
    if (val) val[r] = bv;
  }
}

template <class T>
__global__ void put_along_kernel(const T* g, const std::int64_t* at, T* dx, std::int64_t outer,
                                 std::int64_t n, std::int64_t inner) {
  for (std::int64_t r = global_index(); r < outer * inner; r += global_stride())
    dx[(r / inner * n + at[r]) * inner + r % inner] = g[r];
}

}  // namespace

#define QAT_CUDA_ARGMAX(T)                                                                            \
  void argmax(const T* x, std::int64_t* at, T* val, std::int64_t outer, std::int64_t n,               \
              std::int64_t inner) {                                                                   \
    if (outer * inner == 0) return;                                                                   \
    argmax_kernel<<<grid_for(outer* inner), kBlock, 0, stream("argmax")>>>(x, at, val, outer, n,      \
                                                                           inner);                    \
    QAT_CUDA_CHECK_LAUNCH("argmax");                                                                  \
  }                                                                                                   \
  void put_along(const T* g, const std::int64_t* at, T* dx, std::int64_t outer, std::int64_t n,       \
                 std::int64_t inner) {                                                                \
    if (outer * inner == 0) return;                                                                   \
    put_along_kernel<<<grid_for(outer* inner), kBlock, 0, stream("max_backward")>>>(g, at, dx, outer, \
                                                                                    n, inner);        \
    QAT_CUDA_CHECK_LAUNCH("max_backward");                                                            \
  }
QAT_CUDA_ARGMAX(float)
QAT_CUDA_ARGMAX(double)
#undef QAT_CUDA_ARGMAX

void sum(const float* in, float* out, const ReduceDims& dims, double scale) {
  launch_sum(in, out, dims, scale);
}
void sum(const double* in, double* out, const ReduceDims& dims, double scale) {
  launch_sum(in, out, dims, scale);
}

}  // namespace qat::kernels::cuda
