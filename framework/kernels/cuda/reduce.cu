// Sum reductions on CUDA (kernels.h): one block per output element, fixed order, no atomics.
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

}  // namespace

void sum(const float* in, float* out, const ReduceDims& dims, double scale) {
  launch_sum(in, out, dims, scale);
}
void sum(const double* in, double* out, const ReduceDims& dims, double scale) {
  launch_sum(in, out, dims, scale);
}

}  // namespace qat::kernels::cuda
