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
using qat::kernels::cuda::aligned4;
using qat::kernels::cuda::grid_for4;
using qat::kernels::cuda::grid_stride4;
using qat::kernels::cuda::kBlock;
namespace cg = cooperative_groups;
using obs::max_z;
using obs::min_z;

using obs::fake_quant_one;

// The quantization parameters of elements i .. i + k - 1 (k <= 4): per tensor, or each one's
// channel / block. Per channel, one division for the first and a carry for the rest.
__device__ inline void params_at(std::int64_t i, int k, const FqParams& p, float (&s)[4],
                                 float (&z)[4]) {
  if (p.scale == nullptr) {
    for (int t = 0; t < k; ++t) s[t] = p.scale0, z[t] = static_cast<float>(p.zp0);
  } else if (p.block == 0) {
    const std::int64_t q = i / p.inner;
    std::int64_t r = i - q * p.inner, c = q % p.len;
    for (int t = 0; t < k; ++t) {
      s[t] = p.scale[c], z[t] = static_cast<float>(p.zero_point[c]);
      if (++r == p.inner) r = 0, c = c + 1 == p.len ? 0 : c + 1;
    }
  } else {
    for (int t = 0; t < k; ++t) {
      const std::int64_t c = param_of(i + t, p.len, p.inner, p.block);
      s[t] = p.scale[c], z[t] = static_cast<float>(p.zero_point[c]);
    }
  }
}

__global__ void fake_quant_kernel(const float* x, float* y, std::uint8_t* mask, std::int64_t n,
                                  FqParams p, float lo, float hi, bool vec4) {
  const bool on = p.enabled == nullptr || *p.enabled != 0;
  grid_stride4(
      n, vec4,
      [&](std::int64_t j) {
        const float4 v = reinterpret_cast<const float4*>(x)[j];
        float4 r = v;
        uchar4 m = make_uchar4(1, 1, 1, 1);
        if (on) {
          float s[4], z[4];
          params_at(4 * j, 4, p, s, z);
          r.x = fake_quant_one(v.x, 1.0f / s[0], s[0], z[0], lo, hi, &m.x);
          r.y = fake_quant_one(v.y, 1.0f / s[1], s[1], z[1], lo, hi, &m.y);
          r.z = fake_quant_one(v.z, 1.0f / s[2], s[2], z[2], lo, hi, &m.z);
          r.w = fake_quant_one(v.w, 1.0f / s[3], s[3], z[3], lo, hi, &m.w);
        }
        reinterpret_cast<float4*>(y)[j] = r;
        reinterpret_cast<uchar4*>(mask)[j] = m;
      },
      [&](std::int64_t i) {
        if (!on) {
          y[i] = x[i];
          mask[i] = 1;
          return;
        }
        float s[4], z[4];
        params_at(i, 1, p, s, z);
        y[i] = fake_quant_one(x[i], 1.0f / s[0], s[0], z[0], lo, hi, &mask[i]);
      });
}

__global__ void masked_copy_kernel(const float* dy, const std::uint8_t* mask, float* dx, std::int64_t n,
                                   bool vec4) {
  grid_stride4(
      n, vec4,
      [&](std::int64_t j) {
        const float4 g = reinterpret_cast<const float4*>(dy)[j];
        const uchar4 m = reinterpret_cast<const uchar4*>(mask)[j];
        reinterpret_cast<float4*>(dx)[j] =
            make_float4(m.x ? g.x : 0.0f, m.y ? g.y : 0.0f, m.z ? g.z : 0.0f, m.w ? g.w : 0.0f);
      },
      [&](std::int64_t i) { dx[i] = mask[i] ? dy[i] : 0.0f; });
}

// A block's (lo, hi, bad) folded in a fixed tree through the shared arrays: the result in
// smin[0], smax[0], sbad[0] (min / max are exact: any order gives the same values).
__device__ void fold_block(float lo, float hi, int bad, float* smin, float* smax, int* sbad) {
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
}

__global__ void fused_kernel(const float* x, float* y, std::uint8_t* mask, std::int64_t n,
                             FusedObserverArgs a, float* part_min, float* part_max, int* part_bad,
                             bool vec4) {
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
    auto see = [&](float v) {
      bad |= !isfinite(v);
      lo = min_z(v, lo);
      hi = max_z(v, hi);
    };
    grid_stride4(
        n, vec4,
        [&](std::int64_t j) {
          const float4 v = reinterpret_cast<const float4*>(x)[j];
          see(v.x), see(v.y), see(v.z), see(v.w);
        },
        [&](std::int64_t i) { see(x[i]); });
    fold_block(lo, hi, bad, smin, smax, sbad);
    if (threadIdx.x == 0) {
      part_min[blockIdx.x] = smin[0], part_max[blockIdx.x] = smax[0], part_bad[blockIdx.x] = sbad[0];
    }
    grid.sync();
    if (blockIdx.x == 0) {  // the blocks' partials, reduced by block 0's threads, then a tree
      float bmin = INFINITY, bmax = -INFINITY;
      int any_bad = 0;
      for (unsigned b = threadIdx.x; b < gridDim.x; b += blockDim.x) {
        bmin = min_z(part_min[b], bmin);
        bmax = max_z(part_max[b], bmax);
        any_bad |= part_bad[b];
      }
      fold_block(bmin, bmax, any_bad, smin, smax, sbad);
    }
    if (blockIdx.x == 0 && threadIdx.x == 0) {
      const float bmin = smin[0], bmax = smax[0];
      const int any_bad = sbad[0];
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
  grid_stride4(
      n, vec4,
      [&](std::int64_t j) { obs::fake_quant4(x, y, mask, j, fake_quant_on, inv, s, z, lo, hi); },
      [&](std::int64_t i) {
        if (fake_quant_on) {
          y[i] = fake_quant_one(x[i], inv, s, z, lo, hi, &mask[i]);
        } else {
          y[i] = x[i];
          mask[i] = 1;
        }
      });
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
  const bool vec4 = aligned4(x, y, mask);
  fake_quant_kernel<<<grid_for4(n, vec4), kBlock, 0, stream("fake_quant")>>>(
      x, y, mask, n, p, static_cast<float>(qmin), static_cast<float>(qmax), vec4);
  QAT_CUDA_CHECK_LAUNCH("fake_quant");
}

void masked_copy(const float* dy, const std::uint8_t* mask, float* dx, std::int64_t n) {
  if (n == 0) return;
  const bool vec4 = aligned4(dy, dx, mask);
  masked_copy_kernel<<<grid_for4(n, vec4), kBlock, 0, stream("fake_quant_backward")>>>(dy, mask, dx, n,
                                                                                       vec4);
  QAT_CUDA_CHECK_LAUNCH("fake_quant_backward");
}

void fused_moving_avg_obs_fake_quant(const float* x, float* y, std::uint8_t* mask, std::int64_t n,
                                     const FusedObserverArgs& args) {
  constexpr const char* fn = "fused_moving_avg_obs_fake_quant";
  if (n == 0) return;
  const bool vec4 = aligned4(x, y, mask);
  const std::int64_t items = vec4 ? (n + 3) / 4 : n;
  const unsigned blocks = std::min<unsigned>(
      cooperative_blocks(fn),
      static_cast<unsigned>(std::min<std::int64_t>((items + kBlock - 1) / kBlock, 1 << 20)));
  // per-block partials from the device pool (stream-ordered: released at once, reused safely)
  std::size_t cap = 0;
  void* part = ::qat::cuda::detail::allocate(blocks * 3 * sizeof(float), &cap, fn);
  float* part_min = static_cast<float*>(part);
  float* part_max = part_min + blocks;
  int* part_bad = reinterpret_cast<int*>(part_max + blocks);
  FusedObserverArgs a = args;
  void* params[] = {&x, &y, &mask, &n, &a, &part_min, &part_max, &part_bad, const_cast<bool*>(&vec4)};
  const cudaError_t err = cudaLaunchCooperativeKernel(reinterpret_cast<const void*>(fused_kernel),
                                                      blocks, kBlock, params, 0, stream(fn));
  ::qat::cuda::detail::release(part, cap);
  QAT_CUDA_CHECK(err, fn);
}

}  // namespace qat::quant::kernels::cuda
