// The library's float32 GEMM (API: framework/tensor/sgemm.h), compiled once per instruction set
// (see tensor/simd.h) with a register tile sized for each:
//   AVX-512  8 rows x 3 vectors of 16 = 8 x 48   (24 zmm accumulators of 32)
//   AVX2     6 rows x 2 vectors of 8  = 6 x 16   (12 ymm accumulators of 16)
//   generic  4 rows x 2 vectors            (Highway SCALAR: 4 x 2; EMU128: 4 x 8)
//
// Goto/BLIS GEMM (Goto & van de Geijn 2008; Van Zee & van de Geijn 2015):
//   for jc in N by NC:  for pc in K by KC:  B block = op(B)[pc:+KC, jc:+NC] in NR-wide panels
//     for ic in M by MC:  A block = op(A)[ic:+MC, pc:+KC] in MR-tall panels
//       for each (MR x NR) tile: C_tile = alpha * A_panel * B_panel (+ C_tile)   (micro-kernel)
// Transposed operands are packed into contiguous panels. Untransposed ones are read in place
// (B unless its rows are far apart): the micro-kernel broadcasts A from MR row pointers and
// loads B rows (masked at the right edge), so a weight or a gradient is used as it is, without
// a copy. sgemm_gather_a and sgemm_gather_b read A or B through row and column offsets: an
// im2col matrix that is never built.
//
// Determinism: C(i, j) = sum over k blocks in order, each block summed k = 0, 1, ... in one
// accumulator (two interleaved ones, even and odd k, added at the end, in tiles of 8
// accumulators or fewer). The tiles depend on M, N and K only; threads split them, so no sum
// depends on the thread count.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "framework/kernels/cpu/sgemm.cpp"
#include "framework/tensor/sgemm.h"

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "framework/kernels/cpu/sgemm_args.h"
#include "framework/tensor/parallel.h"

// clang-format off
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>
// clang-format on

#include "framework/kernels/cpu/lanes-inl.h"
#include "framework/tensor/simd.h"

// No std:: templates below this point (ODR: they would be compiled with each target's flags).
HWY_BEFORE_NAMESPACE();
namespace qat::kernels::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
namespace {

using i64 = std::int64_t;
using D = hn::ScalableTag<float>;
using V = hn::Vec<D>;
constexpr i64 L = static_cast<i64>(hn::MaxLanes(D()));  // lanes per vector
#if HWY_TARGET <= HWY_AVX3
constexpr i64 MR = 8, NV = 3, kRegs = 32;
constexpr bool kMaskFree = true;  // a masked load or store costs what a plain one does
#elif HWY_TARGET == HWY_AVX2
constexpr i64 MR = 6, NV = 2, kRegs = 16;
constexpr bool kMaskFree = false;
#else
constexpr i64 MR = 4, NV = 2, kRegs = 16;
constexpr bool kMaskFree = false;
#endif
constexpr i64 NR = NV * L;
constexpr i64 KC = 256, MC = 16 * MR, NC = 3072;  // NC is a multiple of every NR

inline i64 imin(i64 a, i64 b) { return a < b ? a : b; }

// Row tails: vector loads and stores of the first n lanes (lanes-inl.h).
using lanes::lane_mask;
using lanes::LaneMask;
using lanes::load_masked;
using lanes::store_masked;
#if HWY_TARGET == HWY_AVX2
using lanes::store_partial;
#endif

#include "framework/kernels/cpu/sgemm_pack-inl.h"  // PackBuffers, buffers, pack_a_trans, pack_b(_trans)

// How the micro-kernel reads element (r, k) of its MR x kc A panel:
//   kPacked  a[k*MR + r]          (packed, zero-padded panels)
//   kRows    a[r*lda + k]         (row-major, read in place)
//   kGather  a[row[r] + kof[k]]   (an implicit im2col matrix; sgemm_gather_a)
enum ALayout { kPacked, kRows, kGather };

// Up to NV vectors of C columns (n[v] <= L each) that one micro-kernel call computes.
// Vector v of B row k starts at (B row k) + boff[v], of C row r at c + r*ldc + coff[v].
// Plain B panels are NR consecutive columns (boff = coff = L*v); gathered B panels are runs
// of columns whose offsets are consecutive.
struct Panel {
  int nv = 0;
  i64 n[NV] = {}, boff[NV] = {}, coff[NV] = {};
};

// One micro-kernel call: C tile (m x panel) = alpha * A panel (m x kc) * B panel (+ C tile).
// B row k starts at b + k*ldb, or at b + bkof[k] when B is gathered (sgemm_gather_b).
struct Tile {
  i64 kc, m;
  const float* a;
  i64 lda;
  const i64 *row, *kof;  // kGather
  const float* b;
  i64 ldb;
  const i64* bkof;  // gathered B
  float* c;
  i64 ldc;
  const Panel* panel;
  float alpha;
  bool accumulate;
};

// MRK rows x NVK vectors of accumulators in registers. Vectors v with bit v of kPartial set
// load and store only the panel's lanes (masked), so B and C are read in place; rows past m
// repeat row 0 on load and are not stored. MRK < MR serves the last rows of A (m <= MRK), at
// a cost proportional to MRK.
template <int MRK, int NVK, int LA, bool kGatherB, int kPartial>
HWY_NOINLINE void micro_kernel(const Tile& t) {
  auto masked = [](int v) { return ((kPartial >> v) & 1) != 0; };
  const D d;
  LaneMask mask[NVK] = {};
  i64 boff[NVK], coff[NVK];
  for (int v = 0; v < NVK; ++v) {
    if (masked(v)) mask[v] = lane_mask(t.panel->n[v]);
    boff[v] = kGatherB ? t.panel->boff[v] : L * v;
    coff[v] = kGatherB ? t.panel->coff[v] : L * v;
  }
  const float* rows[MRK];  // A row r, element k at rows[r][ka(k)]; rows past m repeat row 0
  for (i64 r = 0; r < MRK; ++r) {
    const i64 rr = r < t.m ? r : 0;
    rows[r] = t.a + (LA == kPacked ? r : LA == kRows ? rr * t.lda : t.row[rr]);
  }
  // With 8 accumulators or fewer, too few to cover the FMA latency, alternate two sets over k
  // (S = 2; even and odd k) where the registers allow, and add them at the end.
  constexpr int S = MRK * NVK <= 8 && 2 * MRK * NVK + NVK + 1 <= kRegs ? 2 : 1;
  V c[S][MRK][NVK];
#pragma GCC unroll 2
  for (int s = 0; s < S; ++s)
#pragma GCC unroll 8
    for (int r = 0; r < MRK; ++r)
#pragma GCC unroll 3
      for (int v = 0; v < NVK; ++v) c[s][r][v] = hn::Zero(d);
  const float* cols[NVK];  // gathered B vector v, row k at cols[v][bkof[k]]
  for (int v = 0; v < NVK; ++v) cols[v] = t.b + boff[v];
  const i64 kc = t.kc, ldb = t.ldb;
  const i64 *kof = t.kof, *bkof = t.bkof;
  for (i64 k0 = 0; k0 < kc; k0 += S)
#pragma GCC unroll 2
    for (int s = 0; s < S; ++s) {
      const i64 k = k0 + s;
      if (S > 1 && k == kc) break;
      const i64 ka = LA == kGather ? kof[k] : LA == kPacked ? k * MR : k;
      V bv[NVK];
#pragma GCC unroll 3
      for (int v = 0; v < NVK; ++v) {
        const float* p = kGatherB ? cols[v] + bkof[k] : t.b + k * ldb + L * v;
        bv[v] = masked(v) ? load_masked(mask[v], p) : hn::LoadU(d, p);
      }
#pragma GCC unroll 8
      for (int r = 0; r < MRK; ++r) {
        const V ar = hn::Set(d, rows[r][ka]);
#pragma GCC unroll 3
        for (int v = 0; v < NVK; ++v) c[s][r][v] = hn::MulAdd(ar, bv[v], c[s][r][v]);
      }
    }
  if constexpr (S == 2) {
#pragma GCC unroll 8
    for (int r = 0; r < MRK; ++r)
#pragma GCC unroll 3
      for (int v = 0; v < NVK; ++v) c[0][r][v] = hn::Add(c[0][r][v], c[1][r][v]);
  }
  // C = alpha * acc (+ C). A row's loads all come before its stores: a masked vector may
  // overlap the next one, and a load behind an overlapping store waits for it.
  const V alpha = hn::Set(d, t.alpha);
#pragma GCC unroll 8
  for (int r = 0; r < MRK; ++r) {
    if (r >= t.m) break;
    float* p = t.c + r * t.ldc;
    V out[NVK];
#pragma GCC unroll 3
    for (int v = 0; v < NVK; ++v) {
      if (t.accumulate) {
        const V old = masked(v) ? load_masked(mask[v], p + coff[v]) : hn::LoadU(d, p + coff[v]);
        out[v] = hn::MulAdd(alpha, c[0][r][v], old);
      } else {
        out[v] = hn::Mul(alpha, c[0][r][v]);
      }
    }
#pragma GCC unroll 3
    for (int v = 0; v < NVK; ++v) {
      if (masked(v))
#if HWY_TARGET == HWY_AVX2
        store_partial(out[v], t.panel->n[v], p + coff[v]);
#else
        store_masked(out[v], mask[v], p + coff[v]);
#endif
      else
        hn::StoreU(out[v], d, p + coff[v]);
    }
  }
}

using Kernel = void (*)(const Tile&);

// Kernels for 1..NV vectors and each pattern of partial vectors (all vectors masked where masks
// are free); MR rows, or 4 or 2 for the last rows of A.
template <int MRK, int NVK, int LA, bool kGatherB>
Kernel kernel_for(int partial) {
  if constexpr (kMaskFree) {
    return micro_kernel<MRK, NVK, LA, kGatherB, (1 << NVK) - 1>;
  } else {
    static_assert(NVK <= 2);
    if (partial == 0) return micro_kernel<MRK, NVK, LA, kGatherB, 0>;
    if constexpr (NVK == 2) {
      if (partial == 1) return micro_kernel<MRK, NVK, LA, kGatherB, 1>;
      if (partial == 2) return micro_kernel<MRK, NVK, LA, kGatherB, 2>;
      return micro_kernel<MRK, NVK, LA, kGatherB, 3>;
    }
    return micro_kernel<MRK, NVK, LA, kGatherB, 1>;
  }
}

template <int MRK, int LA, bool kGatherB>
Kernel kernel_for(const Panel& p) {
  int partial = 0;
  for (int v = 0; v < p.nv; ++v) partial |= p.n[v] < L ? 1 << v : 0;
  if (p.nv == NV) return kernel_for<MRK, NV, LA, kGatherB>(partial);
  if constexpr (NV == 3)
    if (p.nv == 2) return kernel_for<MRK, 2, LA, kGatherB>(partial);
  return kernel_for<MRK, 1, LA, kGatherB>(partial);
}

template <int LA, bool kGatherB>
Kernel kernel_for(i64 m, const Panel& p) {
  if (m > 4) return kernel_for<MR, LA, kGatherB>(p);
  if (m > 2 || MR == 4) return kernel_for<4, LA, kGatherB>(p);
  return kernel_for<2, LA, kGatherB>(p);
}

Kernel kernel_for(int la, bool gather_b, const Panel& p, i64 m) {
  if (gather_b) return la == kPacked ? kernel_for<kPacked, true>(m, p) : kernel_for<kRows, true>(m, p);
  return la == kGather ? kernel_for<kGather, false>(m, p)
         : la == kRows ? kernel_for<kRows, false>(m, p)
                       : kernel_for<kPacked, false>(m, p);
}

// Plain panel jr..jr+NR of nc columns: vectors of L consecutive columns.
Panel plain_panel(i64 jr, i64 nc) {
  Panel p;
  for (i64 v = 0; v < NV && jr + L * v < nc; ++v) p.n[p.nv++] = imin(L, nc - jr - L * v);
  return p;
}

// Gathered columns in runs of consecutive offsets (at most L), NV runs per panel; returns the
// number of panels written to `panels` (room for N).
i64 gathered_panels(const i64* col, i64 N, Panel* panels) {
  i64 count = 0;
  for (i64 j = 0; j < N;) {
    i64 n = 1;
    while (n < L && j + n < N && col[j + n] == col[j] + n) ++n;
    if (count == 0 || panels[count - 1].nv == NV) panels[count++] = Panel{};
    Panel& p = panels[count - 1];
    p.boff[p.nv] = col[j];
    p.coff[p.nv] = j;
    p.n[p.nv++] = n;
    j += n;
  }
  return count;
}

// Panels of a gathered B, kept between calls (grown as needed).
struct PanelBuffer {
  Panel* p = nullptr;
  i64 capacity = 0;
  Panel* reserve(i64 n) {
    if (n > capacity) {
      std::free(p);
      p = static_cast<Panel*>(std::malloc(n * sizeof(Panel)));
      capacity = n;
    }
    return p;
  }
  ~PanelBuffer() { std::free(p); }
};

void scale_c(i64 M, i64 N, float beta, float* C, i64 ldc) {
  if (beta == 1.0f) return;
  for (i64 i = 0; i < M; ++i) {
    float* row = C + i * ldc;
    if (beta == 0.0f)
      std::memset(row, 0, N * sizeof(float));  // BLAS: C is not read
    else
      for (i64 j = 0; j < N; ++j) row[j] *= beta;
  }
}

}  // namespace

void SgemmRun(const SgemmArgs& g) {
  const i64 M = g.M, N = g.N, K = g.K, ldc = g.ldc;
  const float alpha = g.alpha, beta = g.beta;
  float* C = g.c;
  if (M == 0 || N == 0) return;
  if (K == 0 || alpha == 0.0f) return scale_c(M, N, beta, C, ldc);
  if (beta != 0.0f) scale_c(M, N, beta, C, ldc);  // then every k block accumulates
  PackBuffers& bufs = buffers();
  const bool parallel = get_num_threads() > 1 && M * N * K > (1 << 21) && !in_parallel();
  const int layout = g.a_row ? kGather : g.trans_a ? kPacked : kRows;
  const bool gather_b = g.b_col != nullptr;
  const i64 k_blocks = (K + KC - 1) / KC, kb = (K + k_blocks - 1) / k_blocks;  // even k blocks
  const i64 nc_max = gather_b ? N : NC;  // gathered B is never packed, so never blocked
  // Gathered panels live in the caller's thread_local buffer; OpenMP workers read it.
  thread_local PanelBuffer tls_panels;
  const Panel* gathered = nullptr;
  i64 n_gathered = 0;
  if (gather_b) {
    Panel* p = tls_panels.reserve(N);
    n_gathered = gathered_panels(g.b_col, N, p);
    gathered = p;
  }
  for (i64 jc = 0; jc < N; jc += nc_max) {
    const i64 nc = imin(nc_max, N - jc);
    const i64 n_panels = gather_b ? n_gathered : (nc + NR - 1) / NR;
    for (i64 pc = 0; pc < K; pc += kb) {
      const i64 kc = imin(kb, K - pc);
      // B panel jp starts at b + jp * b_panel, its row k at + k * b_ld (or at bkof[k])
      const float* b = gather_b ? g.b : g.b + pc * g.ldb + jc;
      i64 b_ld = g.ldb, b_panel = NR;
      // An untransposed B is packed only when a panel's rows are pages apart and too many
      // for the TLB (measured: 32 x 12544 x 400 gains 30%, 16 x 50176 x 25 loses 30%).
      const bool pack = g.trans_b || (!gather_b && g.ldb >= 1024 && kc > 64);
      if (pack) {
        if (g.trans_b)
          pack_b_trans(g.b, g.ldb, pc, jc, kc, nc, bufs.b);
        else
          pack_b(g.b, g.ldb, pc, jc, kc, nc, bufs.b);
        b = bufs.b, b_ld = NR, b_panel = NR * kc;
      } else if (gather_b) {
        b_panel = 0;
      }
      for (i64 ic = 0; ic < M; ic += MC) {
        const i64 mc = imin(MC, M - ic);
        // A panel ir starts at a + ir / MR * a_panel
        const float* a = g.a + ic * g.lda + pc;
        i64 a_ld = g.lda, a_panel = MR * g.lda;
        if (layout == kPacked) {
          pack_a_trans(g.a, g.lda, ic, pc, mc, kc, bufs.a);
          a = bufs.a, a_ld = MR, a_panel = MR * kc;
        } else if (layout == kGather) {
          a = g.a, a_panel = 0;
        }
        const Tile t{kc,
                     0,
                     a,
                     a_ld,
                     g.a_row ? g.a_row + ic : nullptr,
                     g.a_kof ? g.a_kof + pc : nullptr,
                     b,
                     b_ld,
                     g.b_kof ? g.b_kof + pc : nullptr,
                     C + ic * ldc + jc,
                     ldc,
                     nullptr,
                     alpha,
                     beta != 0.0f || pc > 0};
        // Tile (jp, it): B panel jp times A panel it. Tiles write disjoint parts of C, so
        // threads never change any element's sum order.
        const i64 m_tiles = (mc + MR - 1) / MR;
        auto run = [&](i64 jp, i64 it0, i64 it1) {
          const Panel plain = gather_b ? Panel{} : plain_panel(jp * NR, nc);
          const Panel& panel = gather_b ? gathered[jp] : plain;
          const Kernel kernel = kernel_for(layout, gather_b, panel, MR),
                       last = kernel_for(layout, gather_b, panel, mc % MR);
          Tile tile = t;
          tile.panel = &panel;
          tile.b += jp * b_panel;
          if (!gather_b) tile.c += jp * NR;
          tile.a += it0 * a_panel;
          if (tile.row) tile.row += it0 * MR;
          tile.c += it0 * MR * ldc;
          for (i64 it = it0; it < it1; ++it) {
            tile.m = imin(MR, mc - it * MR);
            (tile.m == MR ? kernel : last)(tile);
            tile.a += a_panel;
            if (tile.row) tile.row += MR;
            tile.c += MR * ldc;
          }
        };
        if (!parallel) {
          for (i64 jp = 0; jp < n_panels; ++jp) run(jp, 0, m_tiles);
          continue;
        }
#pragma omp parallel for schedule(static)
        for (i64 i = 0; i < n_panels * m_tiles; ++i) run(i / m_tiles, i % m_tiles, i % m_tiles + 1);
      }
    }
  }
}

i64 SgemmRowTile() { return MR; }
i64 SgemmColTile() { return NR; }

}  // namespace qat::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace qat::kernels {
HWY_EXPORT(SgemmRun);
HWY_EXPORT(SgemmRowTile);
HWY_EXPORT(SgemmColTile);
}  // namespace qat::kernels

namespace qat::detail {

namespace {
// The generic path (no AVX2) runs the system BLAS, which picks its own kernels for the CPU
// (SSE2 at least): measured on Zen 4 with QAT_CPU=generic, our portable kernel (Highway's
// one-lane SCALAR target, 4 x 2 tile) reaches 7-10 GFLOP/s on the MLP and conv shapes where
// OpenBLAS reaches 80-90.
constexpr bool kGenericUsesOwnKernel = false;

bool forced_blas() {
  static const bool blas = [] {
    const char* env = std::getenv("QAT_GEMM");
    return env != nullptr && std::string_view(env) == "blas";
  }();
  return blas;
}

void run(const kernels::SgemmArgs& args) {
  if (kernels::sgemm_as_dots(args)) return kernels::sgemm_dot(args);
  QAT_DISPATCH(kernels::SgemmRun)(args);
}
}  // namespace

std::int64_t sgemm_row_tile() { return sgemm_available() ? QAT_DISPATCH(kernels::SgemmRowTile)() : 0; }
std::int64_t sgemm_col_tile() { return sgemm_available() ? QAT_DISPATCH(kernels::SgemmColTile)() : 0; }

bool sgemm_available() {
  if (forced_blas()) return false;
  return cpu::isa() >= cpu::Isa::AVX2 || kGenericUsesOwnKernel;
}

void sgemm(bool trans_a, bool trans_b, std::int64_t M, std::int64_t N, std::int64_t K, float alpha,
           const float* A, std::int64_t lda, const float* B, std::int64_t ldb, float beta, float* C,
           std::int64_t ldc) {
  run({M, N, K, alpha, beta, A, lda, trans_a, nullptr, nullptr, B, ldb, trans_b, nullptr, nullptr, C,
       ldc});
}

void sgemm_gather_a(std::int64_t M, std::int64_t N, std::int64_t K, float alpha, const float* a,
                    const std::int64_t* row_offset, const std::int64_t* k_offset, bool trans_b,
                    const float* B, std::int64_t ldb, float beta, float* C, std::int64_t ldc) {
  run({M, N, K, alpha, beta, a, 0, false, row_offset, k_offset, B, ldb, trans_b, nullptr, nullptr, C,
       ldc});
}

void sgemm_gather_b(bool trans_a, std::int64_t M, std::int64_t N, std::int64_t K, float alpha,
                    const float* A, std::int64_t lda, const float* b, const std::int64_t* k_offset,
                    const std::int64_t* col_offset, float beta, float* C, std::int64_t ldc) {
  run({M, N, K, alpha, beta, A, lda, trans_a, nullptr, nullptr, b, 0, false, k_offset, col_offset, C,
       ldc});
}

}  // namespace qat::detail
#endif  // HWY_ONCE
