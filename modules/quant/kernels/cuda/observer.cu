// Observers on CUDA (kernels.h observe): per-range (tensor, channel or block) min / max, the
// running-statistics update, qparams and, fused for per-channel and per-block ranges, the fake
// quantization. Data-parallel, the batch's ranges are all-reduced over the replicas on the device
// between the two (sync_ranges). Deterministic: min / max are exact and order the zeros (-0 below
// +0), the only atomic is an integer flag. The per-range math is observer_math.h, the element
// maps param_index.h, both shared with the host tests.
#include <algorithm>
#include <cstdint>

#include "framework/kernels/cuda/launch.h"
#include "framework/kernels/cuda/runtime.h"
#include "modules/quant/kernels/cuda/kernels.h"
#include "modules/quant/kernels/cuda/observer_math.h"
#include "modules/quant/kernels/cuda/param_index.h"

namespace qat::quant::kernels::cuda {
namespace {

using ::qat::cuda::detail::stream;
using qat::kernels::cuda::kBlock;
using i64 = std::int64_t;

__device__ inline bool flag_on(const std::uint8_t* f) { return f == nullptr || *f != 0; }

// Block-wide fold of (lo, hi, bad) into thread 0's values.
__device__ void block_min_max(float& lo, float& hi, int& bad) {
  __shared__ float smin[kBlock], smax[kBlock];
  __shared__ int sbad[kBlock];
  smin[threadIdx.x] = lo, smax[threadIdx.x] = hi, sbad[threadIdx.x] = bad;
  __syncthreads();
  for (int w = kBlock / 2; w > 0; w /= 2) {
    if (threadIdx.x < w) {
      smin[threadIdx.x] = obs::min_z(smin[threadIdx.x + w], smin[threadIdx.x]);
      smax[threadIdx.x] = obs::max_z(smax[threadIdx.x + w], smax[threadIdx.x]);
      sbad[threadIdx.x] |= sbad[threadIdx.x + w];
    }
    __syncthreads();
  }
  lo = smin[0], hi = smax[0], bad = sbad[0];
}

// x viewed as (outer, len, inner): one range per index of len (block 0; m = outer inner
// elements each) or per block of `block` indices along len (m = block elements each).
// contiguous: per channel with outer 1 (a weight's axis 0), range c is x[c inner, (c + 1) inner);
// vec4: besides, inner % 4 == 0 and x, y, mask aligned for 16-byte steps (launch.h aligned4).
struct View {
  i64 len, inner, block;
  bool contiguous = false, vec4 = false;
  __device__ i64 element(i64 j, i64 c) const {
    if (contiguous) return c * inner + j;
    return block == 0 ? channel_element(j, c, len, inner) : block_element(j, c, inner, block);
  }
};

// Block b: range c = b / splits, its slice s = b % splits of the range's m elements ->
// part_min / part_max [c * splits + s]; any NaN / inf sets *any_bad.
__global__ void partial_min_max_kernel(const float* x, View v, i64 m, i64 splits,
                                       const std::uint8_t* observer_enabled, float* part_min,
                                       float* part_max, int* any_bad) {
  if (!flag_on(observer_enabled)) return;
  const i64 c = blockIdx.x / splits, s = blockIdx.x % splits;
  float lo = INFINITY, hi = -INFINITY;
  int bad = 0;
  auto see = [&](float e) {
    bad |= !isfinite(e);
    lo = obs::min_z(e, lo);
    hi = obs::max_z(e, hi);
  };
  if (v.vec4) {  // slices of whole float4s (min / max do not depend on how the range is cut)
    const i64 m4 = m / 4, chunk = (m4 + splits - 1) / splits, begin = s * chunk;
    const i64 end = min(m4, begin + chunk);
    const float4* r = reinterpret_cast<const float4*>(x + c * v.inner);
    for (i64 j = begin + threadIdx.x; j < end; j += blockDim.x) {
      const float4 e = r[j];
      see(e.x), see(e.y), see(e.z), see(e.w);
    }
  } else {
    const i64 chunk = (m + splits - 1) / splits, begin = s * chunk, end = min(m, begin + chunk);
    for (i64 j = begin + threadIdx.x; j < end; j += blockDim.x) see(x[v.element(j, c)]);
  }
  block_min_max(lo, hi, bad);
  if (threadIdx.x == 0) {
    part_min[blockIdx.x] = lo, part_max[blockIdx.x] = hi;
    if (bad) atomicOr(any_bad, 1);
  }
}

// Block c: folds range c's partials, updates its statistics and qparams (unless the batch held
// NaN / inf: then block 0 counts it), then, with y, fake-quantizes range c's elements.
// Range c's min / max over its `splits` partials, in a fixed tree (every thread of the block
// takes part; the result is in thread 0's lo / hi).
__device__ void fold_partials(i64 c, i64 splits, const float* part_min, const float* part_max,
                              float& lo, float& hi) {
  lo = INFINITY, hi = -INFINITY;
  int bad = 0;
  for (i64 k = threadIdx.x; k < splits; k += blockDim.x) {
    lo = obs::min_z(part_min[c * splits + k], lo);
    hi = obs::max_z(part_max[c * splits + k], hi);
  }
  block_min_max(lo, hi, bad);
}

__global__ void update_kernel(const float* x, float* y, std::uint8_t* mask, View v, i64 m,
                              i64 splits, const float* part_min, const float* part_max,
                              const int* any_bad, ObserveArgs a, obs::QRange r) {
  const i64 c = blockIdx.x;
  __shared__ float s_scale;
  __shared__ std::int32_t s_zp;
  if (flag_on(a.observer_enabled)) {
    float lo, hi;
    fold_partials(c, splits, part_min, part_max, lo, hi);
    if (threadIdx.x == 0) {
      if (*any_bad) {
        if (c == 0) ++*a.nonfinite_batches;
      } else {
        obs::update_range(&a.min_val[c], &a.max_val[c], lo, hi, a.averaging_constant);
        if (a.scale != nullptr)
          obs::qparams_one(a.min_val[c], a.max_val[c], r, &a.scale[c], &a.zero_point[c]);
      }
    }
  }
  if (y == nullptr) return;
  if (threadIdx.x == 0) s_scale = a.scale[c], s_zp = a.zero_point[c];
  __syncthreads();
  const bool on = flag_on(a.fake_quant_enabled);
  const float s = s_scale, z = static_cast<float>(s_zp), inv = 1.0f / s;
  const float qlo = static_cast<float>(r.qmin), qhi = static_cast<float>(r.qmax);
  if (v.vec4) {
    const i64 base = c * v.inner / 4;
    for (i64 j = base + threadIdx.x; j < base + m / 4; j += blockDim.x)
      obs::fake_quant4(x, y, mask, j, on, inv, s, z, qlo, qhi);
    return;
  }
  for (i64 j = threadIdx.x; j < m; j += blockDim.x) {
    const i64 i = v.element(j, c);
    if (!on) {
      y[i] = x[i];
      mask[i] = 1;
      continue;
    }
    y[i] = obs::fake_quant_one(x[i], inv, s, z, qlo, qhi, &mask[i]);
  }
}

// Data-parallel split of update_kernel's fold: block c folds range c's partials into
// packed[c] = min, packed[len + c] = -max, and block 0 writes packed[2 len] = -bad (len: the
// number of ranges), so that one MIN all-reduce over the replicas gives the global batch's min,
// max and "any rank saw NaN / inf".
__global__ void pack_ranges_kernel(i64 len, i64 splits, const float* part_min, const float* part_max,
                                   const int* any_bad, const std::uint8_t* observer_enabled,
                                   float* packed) {
  if (!flag_on(observer_enabled)) return;
  const i64 c = blockIdx.x;
  float lo, hi;
  fold_partials(c, splits, part_min, part_max, lo, hi);
  if (threadIdx.x == 0) {
    packed[c] = lo, packed[len + c] = -hi;
    if (c == 0) packed[2 * len] = *any_bad ? -1.0f : 0.0f;
  }
}

// After the all-reduce: max[c] = -packed[len + c] (negation is exact), *any_bad from packed[2 len].
__global__ void unpack_ranges_kernel(i64 len, const float* packed, float* max, int* any_bad) {
  for (i64 c = qat::kernels::cuda::global_index(); c <= len; c += qat::kernels::cuda::global_stride()) {
    if (c < len)
      max[c] = -packed[len + c];
    else
      *any_bad = packed[2 * len] < 0.0f ? 1 : 0;
  }
}

}  // namespace

void observe(const float* x, i64 outer, i64 len, i64 inner, const ObserveArgs& a, float* y,
             std::uint8_t* mask) {
  constexpr const char* fn = "observer (CUDA)";
  View view{len, inner, a.block};
  view.contiguous = a.block == 0 && outer == 1;
  view.vec4 = view.contiguous && inner % 4 == 0 && qat::kernels::cuda::aligned4(x, x) &&
              (y == nullptr || qat::kernels::cuda::aligned4(y, y, mask));
  // ranges and elements per range: per index of len, or per block along len
  const i64 ranges = a.block == 0 ? len : outer * (len / a.block) * inner;
  const i64 m = a.block == 0 ? outer * inner : a.block;
  if (ranges == 0 || m == 0) return;
  // slices of at least 4096 elements, at most 8192 blocks in all
  const i64 splits = std::max<i64>(1, std::min<i64>((m + 4095) / 4096, 8192 / ranges));
  const i64 parts = ranges * splits;
  // data-parallel: packed [2 ranges + 1] for the all-reduce and the global maxima [ranges] besides
  const i64 sync_floats = a.sync_ranges != nullptr ? 3 * ranges + 1 : 0;
  std::size_t cap = 0;
  void* scratch = ::qat::cuda::detail::allocate(
      static_cast<std::size_t>(parts * 2 + sync_floats) * sizeof(float) + sizeof(int), &cap, fn);
  float* part_min = static_cast<float*>(scratch);
  float* part_max = part_min + parts;
  int* any_bad = reinterpret_cast<int*>(part_max + parts + sync_floats);
  cudaStream_t s = stream(fn);
  QAT_CUDA_CHECK(cudaMemsetAsync(any_bad, 0, sizeof(int), s), fn);
  partial_min_max_kernel<<<static_cast<unsigned>(parts), kBlock, 0, s>>>(
      x, view, m, splits, a.observer_enabled, part_min, part_max, any_bad);
  QAT_CUDA_CHECK_LAUNCH(fn);
  const obs::QRange r{a.qmin, a.qmax, a.symmetric, a.symmetric_zero_point};
  // few long ranges (per tensor): the fake quantization as its own grid-wide kernel
  const bool fuse = y != nullptr && a.scale != nullptr && (ranges >= 16 || m <= 16 * kBlock);
  if (a.sync_ranges != nullptr) {  // batch ranges -> all-reduce over the replicas -> update
    float* packed = part_max + parts;
    float* global_max = packed + 2 * ranges + 1;
    pack_ranges_kernel<<<static_cast<unsigned>(ranges), kBlock, 0, s>>>(
        ranges, splits, part_min, part_max, any_bad, a.observer_enabled, packed);
    QAT_CUDA_CHECK_LAUNCH(fn);
    a.sync_ranges(packed, 2 * ranges + 1);
    unpack_ranges_kernel<<<qat::kernels::cuda::grid_for(ranges + 1), kBlock, 0, s>>>(
        ranges, packed, global_max, any_bad);
    QAT_CUDA_CHECK_LAUNCH(fn);
    update_kernel<<<static_cast<unsigned>(ranges), kBlock, 0, s>>>(
        x, fuse ? y : nullptr, mask, view, m, 1, packed, global_max, any_bad, a, r);
  } else {
    update_kernel<<<static_cast<unsigned>(ranges), kBlock, 0, s>>>(
        x, fuse ? y : nullptr, mask, view, m, splits, part_min, part_max, any_bad, a, r);
  }
  QAT_CUDA_CHECK_LAUNCH(fn);
  ::qat::cuda::detail::release(scratch, cap);  // stream-ordered pool: safe to reuse at once
  if (y != nullptr && a.scale != nullptr && !fuse) {
    FqParams p;
    p.scale = a.scale, p.zero_point = a.zero_point, p.len = len, p.inner = inner, p.block = a.block;
    p.enabled = a.fake_quant_enabled;
    fake_quant(x, y, mask, outer * len * inner, p, a.qmin, a.qmax);
  }
}

}  // namespace qat::quant::kernels::cuda
