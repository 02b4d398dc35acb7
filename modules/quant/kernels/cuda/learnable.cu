// The learnable quantizers on CUDA (kernels.h lsq_* / amax_*): elementwise forwards and backwards
// whose parameter gradients are deterministic reductions. The per-element math is
// learnable_math.h, shared with the host tests; the file builds with -fmad=false.
//
// Reductions, no float atomics (the same bits on every run). The terms of a run (the CPU's runs:
// per tensor the whole tensor, per channel each row of `inner` elements) form the CPU's float32
// partial sums: a slot at run position p adds the terms at p, p + S, ..., (G of them, those
// before the run's end) in float32 from +0 (LSQ's A: fma(dx, r, sum)), for the slots p with
// p % (S G) < S: chunk256 (kernels/cpu/kernels.h), S = 16 and G = 16, for the amax gradient and
// LSQ's three sums. Range c's
// slots go to reduce_splits(m, len) blocks, each a contiguous chunk of slots; in a block thread t sums
// slots t, t + 256, ... in order, in double, then the block folds its 256 sums as a tree (l[t] += l[t +
// w], w = 128 ... 1) into one partial; a second kernel folds range c's partials the same way (thread t:
// partials t, t + 256,
// ...) and writes the gradients (LSQ: dscale = gf ((1/s) A) + B, dzero_point = Z). The CPU adds
// the same float32 partials in double in another order (16 lanes per run, runs in order),
// so the parameter gradients agree with it within ~1e-7 relative (the tests ask 1e-6), not
// bitwise; dx and the forward are bit-exact.
#include <cstdint>

#include "framework/kernels/cuda/launch.h"
#include "framework/kernels/cuda/runtime.h"
#include "modules/quant/kernels/cuda/kernels.h"
#include "modules/quant/kernels/cuda/learnable_math.h"

namespace qat::quant::kernels::cuda {
namespace {

using ::qat::cuda::detail::stream;
using qat::kernels::cuda::aligned4;
using qat::kernels::cuda::global_index;
using qat::kernels::cuda::global_stride;
using qat::kernels::cuda::grid_for;
using qat::kernels::cuda::grid_for4;
using qat::kernels::cuda::grid_stride4;
using qat::kernels::cuda::kBlock;
using i64 = std::int64_t;
namespace lm = learnable;

// The parameter of element i (per tensor: len 1).
__device__ inline i64 param_of(i64 i, i64 len, i64 inner) { return len == 1 ? 0 : (i / inner) % len; }
// Element j of range c's m = outer * inner elements (len 1: contiguous).
__device__ inline i64 element(i64 j, i64 c, i64 len, i64 inner) {
  return len == 1 ? j : (j / inner * len + c) * inner + j % inner;
}

// Block-wide tree fold of K doubles per thread into every thread's v (l[t] += l[t + w]).
template <int K>
__device__ void block_sum(double (&v)[K]) {
  __shared__ double s[K][kBlock];
  for (int k = 0; k < K; ++k) s[k][threadIdx.x] = v[k];
  __syncthreads();
  for (int w = kBlock / 2; w > 0; w /= 2) {
    if (threadIdx.x < w)
      for (int k = 0; k < K; ++k) s[k][threadIdx.x] += s[k][threadIdx.x + w];
    __syncthreads();
  }
  for (int k = 0; k < K; ++k) v[k] = s[k][0];
}

// Block b = (range c = b / splits, slice b % splits) over range c's slots (see above): op.add(r,
// i, count, acc) writes the elementwise outputs of elements i, i + S, ... (count of them) and adds
// their Op::kSums float32 partials to acc; part[k * gridDim.x + b] = the block's sum k.
template <class Op>
__global__ void partial_kernel(Op op, i64 len, i64 inner, i64 outer, i64 splits, double* part) {
  constexpr i64 S = Op::kStride, window = Op::kStride * Op::kGroup;
  const i64 run_slots = (inner + window - 1) / window * S, slots = outer * run_slots;
  const i64 c = blockIdx.x / splits, s = blockIdx.x % splits;
  const i64 chunk = (slots + splits - 1) / splits, begin = s * chunk;
  const i64 end = begin + chunk < slots ? begin + chunk : slots;
  const typename Op::Range r = op.range(c);
  double acc[Op::kSums] = {};
  for (i64 j = begin + threadIdx.x; j < end; j += blockDim.x) {
    const i64 row = j / run_slots, q = j % run_slots;
    const i64 p = q / S * window + q % S;  // the slot's first run position
    if (p >= inner) continue;              // past the end of a short last window
    const i64 left = (inner - p + S - 1) / S;
    op.add(r, element(row * inner + p, c, len, inner), left < Op::kGroup ? left : Op::kGroup, acc);
  }
  block_sum(acc);
  if (threadIdx.x == 0)
    for (int k = 0; k < Op::kSums; ++k) part[k * gridDim.x + blockIdx.x] = acc[k];
}

// Block c: range c's `splits` partials of each sum folded; op.finish writes range c's gradients.
template <class Op>
__global__ void final_kernel(Op op, const double* part, i64 splits, float* out0, float* out1) {
  const i64 c = blockIdx.x, parts = gridDim.x * splits;
  double acc[Op::kSums] = {};
  for (i64 t = threadIdx.x; t < splits; t += blockDim.x)
    for (int k = 0; k < Op::kSums; ++k) acc[k] += part[k * parts + c * splits + t];
  block_sum(acc);
  if (threadIdx.x == 0) op.finish(op.range(c), acc, c, out0, out1);
}

// LSQ backward: dx, then the sums A, B, Z of learnable_math.h lsq_grad_terms (chunk256).
struct LsqGradOp {
  static constexpr int kSums = 3;
  static constexpr i64 kStride = 16, kGroup = 16;
  using Range = lm::LsqGrad;
  const float* __restrict__ x;
  const float* __restrict__ dy;
  float* __restrict__ dx;
  const float* scale;
  const float* zero_point;
  bool truncated;
  float lo = 0, hi = 0, gf = 1;
  __device__ Range range(i64 c) const {
    const float z = truncated ? lm::truncated_zero_point(zero_point[c], lo, hi)
                              : lm::rounded_zero_point(zero_point[c], lo, hi);
    return lm::lsq_grad_consts(scale[c], z, lo, hi, gf);
  }
  __device__ void add(const Range& k, i64 i, i64 count, double (&acc)[3]) const {
    float a = 0.0f, b = 0.0f, z = 0.0f;  // the CPU's float32 lanes
    auto term = [&](i64 e, float xv, float dyv) {
      float ta, tb, tz;
      const float d = lm::lsq_grad_terms(xv, dyv, k, &ta, &tb, &tz);
      if (dx != nullptr) dx[e] = d;
      a = lm::fused_multiply_add(d, ta, a);
      b += tb;
      z += tz;
    };
    if (count == kGroup) {  // a whole slot: its 2 x 16 loads issued before the first use
      float xs[kGroup], ds[kGroup];
#pragma unroll
      for (int t = 0; t < kGroup; ++t) xs[t] = x[i + t * kStride], ds[t] = dy[i + t * kStride];
#pragma unroll
      for (int t = 0; t < kGroup; ++t) term(i + t * kStride, xs[t], ds[t]);
    } else {
      for (i64 t = 0; t < count; ++t, i += kStride) term(i, x[i], dy[i]);
    }
    acc[0] += a;
    acc[1] += b;
    acc[2] += z;
  }
  // kernels/cpu/kernels.h lsq_combine
  __device__ void finish(const Range& k, const double (&acc)[3], i64 c, float* ds, float* dz) const {
    if (ds != nullptr)
      ds[c] =
          static_cast<float>(static_cast<double>(k.gf) * (static_cast<double>(k.inv) * acc[0]) + acc[1]);
    if (dz != nullptr) dz[c] = static_cast<float>(acc[2]);
  }
};

// Learnable amax backward: dx, then the damax terms (learnable_math.h amax_backward_one), chunk256.
struct AmaxGradOp {
  static constexpr int kSums = 1;
  static constexpr i64 kStride = 16, kGroup = 16;
  struct Range {};
  const float* __restrict__ dy;
  const std::uint8_t* __restrict__ mask;
  float* __restrict__ dx;
  __device__ Range range(i64) const { return {}; }
  __device__ void add(const Range&, i64 i, i64 count, double (&acc)[1]) const {
    float sum = 0.0f;
    for (i64 t = 0; t < count; ++t, i += kStride) {
      float term;
      const float d = lm::amax_backward_one(dy[i], mask[i], &term);
      if (dx != nullptr) dx[i] = d;
      sum += term;
    }
    acc[0] += sum;
  }
  __device__ void finish(const Range&, const double (&acc)[1], i64 c, float* damax, float*) const {
    if (damax != nullptr) damax[c] = static_cast<float>(acc[0]);
  }
};

// The two-kernel reduction of `op` over layout l: out0[c] / out1[c] (null: skipped). Empty ranges
// give zeros. Scratch from the stream-ordered pool.
template <class Op>
void reduce(const Op& op, const ParamLayout& l, float* out0, float* out1, const char* fn) {
  if (l.len == 0) return;
  cudaStream_t st = stream(fn);
  const i64 m = l.outer * l.inner;
  if (m == 0) {
    for (float* out : {out0, out1})
      if (out != nullptr) QAT_CUDA_CHECK(cudaMemsetAsync(out, 0, l.len * sizeof(float), st), fn);
    return;
  }
  const i64 splits = lm::reduce_splits(m, l.len), parts = l.len * splits;
  std::size_t cap = 0;
  auto* part = static_cast<double*>(::qat::cuda::detail::allocate(
      static_cast<std::size_t>(parts * Op::kSums) * sizeof(double), &cap, fn));
  partial_kernel<<<static_cast<unsigned>(parts), kBlock, 0, st>>>(op, l.len, l.inner, l.outer, splits,
                                                                  part);
  QAT_CUDA_CHECK_LAUNCH(fn);
  if (out0 != nullptr || out1 != nullptr) {
    final_kernel<<<static_cast<unsigned>(l.len), kBlock, 0, st>>>(op, part, splits, out0, out1);
    QAT_CUDA_CHECK_LAUNCH(fn);
  }
  ::qat::cuda::detail::release(part, cap);  // stream-ordered pool: safe to reuse at once
}

// y = lsq_forward_one(x) with the element's scale and forward zero point; 4 elements a step where
// vec4 (aligned, and the 4 share their parameter).
__global__ void lsq_forward_kernel(const float* __restrict__ x, float* __restrict__ y, i64 n, i64 len,
                                   i64 inner, const float* scale, const float* zero_point, float lo,
                                   float hi, bool vec4) {
  grid_stride4(
      n, vec4,
      [&](i64 j) {
        const i64 c = param_of(4 * j, len, inner);
        const float s = scale[c], z = lm::forward_zero_point(zero_point[c], lo, hi);
        const float4 v = reinterpret_cast<const float4*>(x)[j];
        reinterpret_cast<float4*>(y)[j] =
            make_float4(lm::lsq_forward_one(v.x, s, z, lo, hi), lm::lsq_forward_one(v.y, s, z, lo, hi),
                        lm::lsq_forward_one(v.z, s, z, lo, hi), lm::lsq_forward_one(v.w, s, z, lo, hi));
      },
      [&](i64 i) {
        const i64 c = param_of(i, len, inner);
        y[i] =
            lm::lsq_forward_one(x[i], scale[c], lm::forward_zero_point(zero_point[c], lo, hi), lo, hi);
      });
}

__global__ void amax_forward_kernel(const float* __restrict__ x, float* __restrict__ y,
                                    std::uint8_t* __restrict__ mask, i64 n, i64 len, i64 inner,
                                    const float* amax, bool is_signed, float lo, float hi) {
  for (i64 i = global_index(); i < n; i += global_stride()) {
    const lm::AmaxConsts k = lm::amax_consts(amax[param_of(i, len, inner)], is_signed, lo, hi);
    y[i] = lm::amax_forward_one(x[i], k, &mask[i]);
  }
}

}  // namespace

void lsq_forward(const float* x, float* y, const ParamLayout& l, const float* scale,
                 const float* zero_point, std::int64_t qmin, std::int64_t qmax) {
  constexpr const char* fn = "fake_quantize_learnable (CUDA)";
  const i64 n = l.numel();
  if (n == 0) return;
  const bool vec4 = aligned4(x, y) && (l.len == 1 || l.inner % 4 == 0);
  lsq_forward_kernel<<<grid_for4(n, vec4), kBlock, 0, stream(fn)>>>(x, y, n, l.len, l.inner, scale,
                                                                    zero_point, static_cast<float>(qmin),
                                                                    static_cast<float>(qmax), vec4);
  QAT_CUDA_CHECK_LAUNCH(fn);
}

void lsq_backward(const float* x, const float* dy, float* dx, const ParamLayout& l, const float* scale,
                  const float* zero_point, bool truncated_zero_point, std::int64_t qmin,
                  std::int64_t qmax, float grad_factor, float* dscale, float* dzero_point) {
  LsqGradOp op{x, dy, dx, scale, zero_point, truncated_zero_point};
  op.lo = static_cast<float>(qmin), op.hi = static_cast<float>(qmax), op.gf = grad_factor;
  reduce(op, l, dscale, dzero_point, "fake_quantize_learnable_backward (CUDA)");
}

void amax_forward(const float* x, float* y, std::uint8_t* mask, const ParamLayout& l, const float* amax,
                  bool is_signed, std::int64_t qmin, std::int64_t qmax) {
  constexpr const char* fn = "fake_quantize_learnable_amax (CUDA)";
  const i64 n = l.numel();
  if (n == 0) return;
  amax_forward_kernel<<<grid_for(n), kBlock, 0, stream(fn)>>>(x, y, mask, n, l.len, l.inner, amax,
                                                              is_signed, static_cast<float>(qmin),
                                                              static_cast<float>(qmax));
  QAT_CUDA_CHECK_LAUNCH(fn);
}

void amax_backward(const float* dy, const std::uint8_t* mask, float* dx, const ParamLayout& l,
                   float* damax) {
  reduce(AmaxGradOp{dy, mask, dx}, l, damax, nullptr, "fake_quantize_learnable_amax_backward (CUDA)");
}

}  // namespace qat::quant::kernels::cuda
