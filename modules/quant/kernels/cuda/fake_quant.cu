// Fake quantization on CUDA (kernels.h): per tensor / per channel / per block forward, the STE
// backward and the fused moving-average observer + fake quant. Every float32 step is the CPU kernel's
// (kernels/cpu/fake_quant.cpp, qparams.cpp, observer.cpp) in the same order; the file builds
// with -fmad=false, so no multiply-add is contracted.
#include <cooperative_groups.h>

#include <cmath>
#include <cstdint>

#include "framework/kernels/cuda/launch.h"
#include "framework/kernels/cuda/runtime.h"
#include "modules/quant/kernels/cuda/kernels.h"
#include "modules/quant/kernels/cuda/observer_math.h"
#include "modules/quant/kernels/cuda/param_index.h"

namespace qat::quant::kernels::cuda {
namespace {

using ::qat::cuda::detail::stream;
using qat::kernels::cuda::global_index;
using qat::kernels::cuda::global_stride;
using qat::kernels::cuda::grid_for;
using qat::kernels::cuda::kBlock;
namespace cg = cooperative_groups;
using obs::max_z;
using obs::min_z;

using obs::fake_quant_one;

__global__ void fake_quant_kernel(const float* x, float* y, std::uint8_t* mask, std::int64_t n,
                                  FqParams p, float lo, float hi) {
  const bool on = p.enabled == nullptr || *p.enabled != 0;
  for (std::int64_t i = global_index(); i < n; i += global_stride()) {
    if (!on) {
      y[i] = x[i];
      mask[i] = 1;
      continue;
    }
    float s = p.scale0;
    std::int32_t zp = p.zp0;
    if (p.scale != nullptr) {
      const std::int64_t c = param_of(i, p.len, p.inner, p.block);
      s = p.scale[c];
      zp = p.zero_point[c];
    }
    const float inv = 1.0f / s;
    y[i] = fake_quant_one(x[i], inv, s, static_cast<float>(zp), lo, hi, &mask[i]);
  }
}

__global__ void masked_copy_kernel(const float* dy, const std::uint8_t* mask, float* dx,
                                   std::int64_t n) {
  for (std::int64_t i = global_index(); i < n; i += global_stride()) dx[i] = mask[i] ? dy[i] : 0.0f;
}

__global__ void fused_kernel(const float* x, float* y, std::uint8_t* mask, std::int64_t n,
                             FusedObserverArgs a, float* part_min, float* part_max, int* part_bad) {
  cg::grid_group grid = cg::this_grid();
  __shared__ float smin[kBlock], smax[kBlock];
  __shared__ int sbad[kBlock];
  // the device flags: one value for the whole grid, so every block takes the same branch
  const bool observe = a.observe && (a.observer_enabled == nullptr || *a.observer_enabled != 0);
  const bool fake_quant_on =
      a.fake_quant_on && (a.fake_quant_enabled == nullptr || *a.fake_quant_enabled != 0);
  if (observe) {
    float lo = INFINITY, hi = -INFINITY;
    int bad = 0;
    for (std::int64_t i = global_index(); i < n; i += global_stride()) {
      const float v = x[i];
      bad |= !isfinite(v);
      lo = min_z(v, lo);
      hi = max_z(v, hi);
    }
    smin[threadIdx.x] = lo, smax[threadIdx.x] = hi, sbad[threadIdx.x] = bad;
    __syncthreads();
    for (int w = kBlock / 2; w > 0; w /= 2) {
      if (threadIdx.x < w) {
        smin[threadIdx.x] = min_z(smin[threadIdx.x + w], smin[threadIdx.x]);
        smax[threadIdx.x] = max_z(smax[threadIdx.x + w], smax[threadIdx.x]);
        sbad[threadIdx.x] |= sbad[threadIdx.x + w];
      }
      __syncthreads();
    }
    if (threadIdx.x == 0) {
      part_min[blockIdx.x] = smin[0], part_max[blockIdx.x] = smax[0], part_bad[blockIdx.x] = sbad[0];
    }
    grid.sync();
    if (blockIdx.x == 0 && threadIdx.x == 0) {
      float bmin = INFINITY, bmax = -INFINITY;
      int any_bad = 0;
      for (unsigned b = 0; b < gridDim.x; ++b) {
        bmin = min_z(part_min[b], bmin);
        bmax = max_z(part_max[b], bmax);
        any_bad |= part_bad[b];
      }
      if (any_bad) {
        ++*a.nonfinite_batches;
      } else if (n > 0) {
        float mn = *a.running_min, mx = *a.running_max;
        if (mn == INFINITY && mx == -INFINITY) {
          mn = bmin, mx = bmax;
        } else {  // a + c (b - a), float32, no contraction (-fmad=false)
          mn = obs::moving_average(mn, bmin, a.averaging_constant);
          mx = obs::moving_average(mx, bmax, a.averaging_constant);
        }
        *a.running_min = mn, *a.running_max = mx;
        obs::qparams_one(mn, mx, obs::QRange{a.qmin, a.qmax, a.symmetric, a.symmetric_zero_point},
                         a.scale, a.zero_point);
      }
    }
    grid.sync();
  }
  const float s = *a.scale, z = static_cast<float>(*a.zero_point);
  const float lo = static_cast<float>(a.qmin), hi = static_cast<float>(a.qmax), inv = 1.0f / s;
  for (std::int64_t i = global_index(); i < n; i += global_stride()) {
    if (fake_quant_on) {
      y[i] = fake_quant_one(x[i], inv, s, z, lo, hi, &mask[i]);
    } else {
      y[i] = x[i];
      mask[i] = 1;
    }
  }
}

// Blocks of a cooperative launch: all resident at once.
unsigned cooperative_blocks(const char* fn) {
  static const unsigned blocks = [fn] {
    int device = 0, sms = 0, per_sm = 0;
    QAT_CUDA_CHECK(cudaGetDevice(&device), fn);
    QAT_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device), fn);
    QAT_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, fused_kernel, kBlock, 0), fn);
    return static_cast<unsigned>(std::max(1, sms * per_sm));
  }();
  return blocks;
}

}  // namespace

void fake_quant(const float* x, float* y, std::uint8_t* mask, std::int64_t n, const FqParams& p,
                std::int64_t qmin, std::int64_t qmax) {
  if (n == 0) return;
  fake_quant_kernel<<<grid_for(n), kBlock, 0, stream("fake_quant")>>>(
      x, y, mask, n, p, static_cast<float>(qmin), static_cast<float>(qmax));
  QAT_CUDA_CHECK_LAUNCH("fake_quant");
}

void masked_copy(const float* dy, const std::uint8_t* mask, float* dx, std::int64_t n) {
  if (n == 0) return;
  masked_copy_kernel<<<grid_for(n), kBlock, 0, stream("fake_quant_backward")>>>(dy, mask, dx, n);
  QAT_CUDA_CHECK_LAUNCH("fake_quant_backward");
}

void fused_moving_avg_obs_fake_quant(const float* x, float* y, std::uint8_t* mask, std::int64_t n,
                                     const FusedObserverArgs& args) {
  constexpr const char* fn = "fused_moving_avg_obs_fake_quant";
  if (n == 0) return;
  const unsigned blocks = std::min<unsigned>(
      cooperative_blocks(fn),
      static_cast<unsigned>(std::min<std::int64_t>((n + kBlock - 1) / kBlock, 1 << 20)));
  // per-block partials from the device pool (stream-ordered: released at once, reused safely)
  std::size_t cap = 0;
  void* part = ::qat::cuda::detail::allocate(blocks * 3 * sizeof(float), &cap, fn);
  float* part_min = static_cast<float*>(part);
  float* part_max = part_min + blocks;
  int* part_bad = reinterpret_cast<int*>(part_max + blocks);
  FusedObserverArgs a = args;
  void* params[] = {&x, &y, &mask, &n, &a, &part_min, &part_max, &part_bad};
  const cudaError_t err = cudaLaunchCooperativeKernel(reinterpret_cast<const void*>(fused_kernel),
                                                      blocks, kBlock, params, 0, stream(fn));
  ::qat::cuda::detail::release(part, cap);
  QAT_CUDA_CHECK(err, fn);
}

}  // namespace qat::quant::kernels::cuda
