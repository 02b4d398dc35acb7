// The float GEMM for a few rows of A times a transposed B: C = alpha * A * W^T + beta * C with
// A (M x K, M <= kSgemmDotMaxRows) and W (N x K) read in place, e.g. a Linear layer's forward
// pass on a batch of one. The packed GEMM (sgemm.cpp) would first transpose all of W into
// panels, which costs more than the M * N * K products when M is this small; here each C(i, j)
// is a dot product of two contiguous rows:
//   C(i, j) = alpha * sum_l (sum_{k = l mod L} A(i, k) W(j, k)) (+ beta * C(i, j))
// summed in the L lanes of one accumulator (k = l, l + L, ... in order), then across the lanes
// (SumOfLanes). A tile is RA rows of A x RW rows of W, RA * RW accumulators; W is streamed
// once per RA rows of A. Threads split W's rows, so no sum depends on the thread count.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "framework/kernels/cpu/sgemm_dot.cpp"
#include <cstdint>

#include "framework/kernels/cpu/sgemm_args.h"
#include "framework/tensor/parallel.h"

// clang-format off
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>
// clang-format on

#include "framework/kernels/cpu/lanes-inl.h"
#include "framework/tensor/simd.h"

HWY_BEFORE_NAMESPACE();
namespace qat::kernels::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
namespace {

using i64 = std::int64_t;
using D = hn::ScalableTag<float>;
using V = hn::Vec<D>;
constexpr i64 L = static_cast<i64>(hn::MaxLanes(D()));

// W rows per tile for RA rows of A: as many accumulators as the registers hold beside the RA
// vectors of A and one of W (AVX2 and SSE: 16 registers, AVX-512: 32).
#if HWY_TARGET <= HWY_AVX3
constexpr int kRowsW[5] = {0, 8, 8, 6, 6};
#else
constexpr int kRowsW[5] = {0, 8, 6, 4, 3};
#endif

struct DotTile {
  const float* a;  // RA rows, lda apart
  i64 lda;
  const float* w;  // RW rows, ldw apart
  i64 ldw, K;
  float* c;  // RA x RW, ldc apart
  i64 ldc;
  float alpha, beta;
};

template <int RA, int RW>
HWY_NOINLINE void dot_tile(const DotTile& t) {
  const D d;
  V acc[RA][RW];
#pragma GCC unroll 4
  for (int r = 0; r < RA; ++r)
#pragma GCC unroll 8
    for (int q = 0; q < RW; ++q) acc[r][q] = hn::Zero(d);
  const i64 K = t.K, lda = t.lda, ldw = t.ldw;
  auto step = [&](auto load, i64 k) {
    V a[RA];
#pragma GCC unroll 4
    for (int r = 0; r < RA; ++r) a[r] = load(t.a + r * lda + k);
#pragma GCC unroll 8
    for (int q = 0; q < RW; ++q) {
      V w = load(t.w + q * ldw + k);
#if HWY_TARGET <= HWY_AVX2
      // one load of w into a register for its RA products, not one memory operand each
      asm("" : "+v"(w.raw));
#endif
#pragma GCC unroll 4
      for (int r = 0; r < RA; ++r) acc[r][q] = hn::MulAdd(a[r], w, acc[r][q]);
    }
  };
  i64 k = 0;
  for (; k + L <= K; k += L) step([&](const float* p) { return hn::LoadU(d, p); }, k);
  if (k < K) {
    const lanes::LaneMask mask = lanes::lane_mask(K - k);
    step([&](const float* p) { return lanes::load_masked(mask, p); }, k);
  }
#pragma GCC unroll 4
  for (int r = 0; r < RA; ++r)
#pragma GCC unroll 8
    for (int q = 0; q < RW; ++q) {
      const float s = t.alpha * hn::GetLane(hn::SumOfLanes(d, acc[r][q]));
      float& c = t.c[r * t.ldc + q];
      c = t.beta == 0.0f ? s : s + t.beta * c;  // BLAS: C is not read when beta = 0
    }
}

using Kernel = void (*)(const DotTile&);

// The kernel for RA rows of A and rw rows of W: rw = kRowsW[RA], or 4, 2, 1 for the last ones.
template <int RA>
Kernel kernel_for(i64 rw) {
  constexpr int full = kRowsW[RA];
  if (rw >= full) return dot_tile<RA, full>;
  if (rw >= 4) return dot_tile<RA, 4>;
  if (rw >= 2) return dot_tile<RA, 2>;
  return dot_tile<RA, 1>;
}

Kernel kernel_for(i64 ra, i64 rw) {
  switch (ra) {
    case 1:
      return kernel_for<1>(rw);
    case 2:
      return kernel_for<2>(rw);
    case 3:
      return kernel_for<3>(rw);
    default:
      return kernel_for<4>(rw);
  }
}

// W rows per tile of RA rows of A (the kernel kernel_for(ra, rw) takes).
i64 tile_rows(i64 ra, i64 rw) {
  const i64 full = kRowsW[ra];
  return rw >= full ? full : rw >= 4 ? 4 : rw >= 2 ? 2 : 1;
}

// C rows [i0, i0 + ra) x columns [j0, j1).
void dot_rows(const SgemmArgs& g, i64 i0, i64 ra, i64 j0, i64 j1) {
  DotTile t{g.a + i0 * g.lda, g.lda, nullptr, g.ldb, g.K, nullptr, g.ldc, g.alpha, g.beta};
  for (i64 j = j0; j < j1;) {
    const i64 rw = tile_rows(ra, j1 - j);
    t.w = g.b + j * g.ldb;
    t.c = g.c + i0 * g.ldc + j;
    kernel_for(ra, rw)(t);
    j += rw;
  }
}

}  // namespace

void SgemmDotRun(const SgemmArgs& g) {
  // Blocks of W rows, each swept by every group of up to 4 rows of A while it is in cache.
  constexpr i64 kBlock = 64;
  const i64 blocks = (g.N + kBlock - 1) / kBlock;
  auto block = [&](i64 b) {
    const i64 j0 = b * kBlock, j1 = j0 + kBlock < g.N ? j0 + kBlock : g.N;
    for (i64 i = 0; i < g.M; i += 4) dot_rows(g, i, g.M - i < 4 ? g.M - i : 4, j0, j1);
  };
  const bool parallel = get_num_threads() > 1 && g.M * g.N * g.K > (1 << 21) && !in_parallel();
  if (!parallel) {
    for (i64 b = 0; b < blocks; ++b) block(b);
    return;
  }
#pragma omp parallel for schedule(static)
  for (i64 b = 0; b < blocks; ++b) block(b);
}

}  // namespace qat::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace qat::kernels {
HWY_EXPORT(SgemmDotRun);

void sgemm_dot(const SgemmArgs& args) { QAT_DISPATCH(SgemmDotRun)(args); }
}  // namespace qat::kernels
#endif  // HWY_ONCE
