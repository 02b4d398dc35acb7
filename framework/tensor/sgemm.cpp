#include "framework/tensor/sgemm.h"

#include <immintrin.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <vector>

#include "framework/tensor/parallel.h"

// Goto/BLIS GEMM (Goto & van de Geijn 2008; Van Zee & van de Geijn 2015):
//   for jc in N by NC:  for pc in K by KC:  B block = op(B)[pc:+KC, jc:+NC] in NR-wide panels
//     for ic in M by MC:  A block = op(A)[ic:+MC, pc:+KC] in MR-tall panels
//       for each (MR x NR) tile: C_tile = alpha * A_panel * B_panel (+ C_tile)   (micro-kernel)
// Transposed operands are packed into contiguous panels. Untransposed ones are read in place
// (B unless its rows are far apart): the micro-kernel broadcasts A from MR row pointers and
// loads B rows with masks, so a weight or a gradient is used as it is, without a copy. sgemm_gather_a
// and sgemm_gather_b read A or B through row and column offsets: an im2col matrix that is never built.

namespace qat::detail {
namespace {

using i64 = std::int64_t;
constexpr i64 MR = 8, NR = 48;  // 8x48 tile = 24 zmm accumulators
constexpr i64 KC = 256, MC = 128, NC = 3072;

#define QAT_AVX512 __attribute__((target("avx512f,avx512dq,avx512bw,avx512vl,fma")))

struct PackBuffers {
  float* a = nullptr;
  float* b = nullptr;
  PackBuffers() {
    a = static_cast<float*>(std::aligned_alloc(64, MC * KC * sizeof(float)));
    b = static_cast<float*>(std::aligned_alloc(64, KC * NC * sizeof(float)));
  }
  ~PackBuffers() {
    std::free(a);
    std::free(b);
  }
};

PackBuffers& buffers() {
  thread_local PackBuffers bufs;
  return bufs;
}

// dst[t * dst_stride + r] = src[r * src_stride + t] for an 8x8 block (r, t < 8).
QAT_AVX512 inline void transpose8x8(const float* src, i64 src_stride, float* dst, i64 dst_stride) {
  __m256 r[8], t[8];
  for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(src + i * src_stride);
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int i = 0; i < 8; i += 4) {
    r[i] = _mm256_shuffle_ps(t[i], t[i + 2], 0x44);
    r[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], 0xEE);
    r[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44);
    r[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0xEE);
  }
  for (int i = 0; i < 4; ++i) {
    t[i] = _mm256_permute2f128_ps(r[i], r[i + 4], 0x20);
    t[i + 4] = _mm256_permute2f128_ps(r[i], r[i + 4], 0x31);
  }
  for (int i = 0; i < 8; ++i) _mm256_storeu_ps(dst + i * dst_stride, t[i]);
}

// Transposed A: dst[panel][k][0..MR) = A(k0 + k, i0 + panel*MR + r), rows beyond mc zeroed.
QAT_AVX512 void pack_a_trans(const float* A, i64 lda, i64 i0, i64 k0, i64 mc, i64 kc, float* dst) {
  for (i64 p = 0; p < mc; p += MR) {
    const i64 rows = std::min(MR, mc - p);
    float* panel = dst + p * kc;
    for (i64 k = 0; k < kc; ++k) {
      const float* src = A + (k0 + k) * lda + i0 + p;
      std::memcpy(panel + k * MR, src, rows * sizeof(float));
      std::fill(panel + k * MR + rows, panel + (k + 1) * MR, 0.0f);
    }
  }
}

// B: dst[panel][k][0..NR) = B(k0 + k, j0 + panel*NR + c); columns beyond nc left unset.
void pack_b(const float* B, i64 ldb, i64 k0, i64 j0, i64 kc, i64 nc, float* dst) {
  for (i64 p = 0; p < nc; p += NR)
    for (i64 k = 0; k < kc; ++k)
      std::memcpy(dst + p * kc + k * NR, B + (k0 + k) * ldb + j0 + p,
                  std::min(NR, nc - p) * sizeof(float));
}

// Transposed B: dst[panel][k][0..NR) = B(j0 + panel*NR + c, k0 + k); the kernel masks the
// columns beyond nc, so they are left unset.
QAT_AVX512 void pack_b_trans(const float* B, i64 ldb, i64 k0, i64 j0, i64 kc, i64 nc, float* dst) {
  for (i64 p = 0; p < nc; p += NR) {
    const i64 cols = std::min(NR, nc - p);
    float* panel = dst + p * kc;
    i64 c = 0;
    const i64 k8 = kc / 8 * 8;
    for (; c + 8 <= cols; c += 8) {  // 8 columns x 8 k at a time through registers
      const float* src = B + (j0 + p + c) * ldb + k0;
      for (i64 k = 0; k < k8; k += 8) transpose8x8(src + k, ldb, panel + k * NR + c, NR);
      for (i64 k = k8; k < kc; ++k)
        for (i64 cc = 0; cc < 8; ++cc) panel[k * NR + c + cc] = src[cc * ldb + k];
    }
    for (; c < cols; ++c) {
      const float* src = B + (j0 + p + c) * ldb + k0;
      for (i64 k = 0; k < kc; ++k) panel[k * NR + c] = src[k];
    }
  }
}

// How the micro-kernel reads element (r, k) of its MR x kc A panel:
//   kPacked  a[k*MR + r]          (packed, zero-padded panels)
//   kRows    a[r*lda + k]         (row-major, read in place)
//   kGather  a[row[r] + kof[k]]   (an implicit im2col matrix; sgemm_gather_a)
enum class ALayout { kPacked, kRows, kGather };

// Up to three vectors of C columns (at most 16 each) that one micro-kernel call computes.
// Vector v of B row k starts at (B row k) + boff[v], of C row r at c + r*ldc + coff[v].
// Plain B panels are 48 consecutive columns (boff = coff = 16v); gathered B panels are runs
// of columns whose offsets are consecutive.
struct Panel {
  int nv = 0;
  i64 boff[3] = {}, coff[3] = {};
  __mmask16 mask[3] = {};
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

// MR rows x NV vectors of accumulators in registers (24 zmm for NV = 3). Loads and stores are
// masked to the panel's lanes, so B and C are read in place; rows past m repeat row 0 on
// load and are not stored.
template <int NV, ALayout LA, bool kGatherB>
QAT_AVX512 void micro_kernel(const Tile& t) {
  __mmask16 mask[NV];
  i64 boff[NV], coff[NV];
  for (int v = 0; v < NV; ++v) {
    mask[v] = t.panel->mask[v];
    boff[v] = kGatherB ? t.panel->boff[v] : 16 * v;
    coff[v] = kGatherB ? t.panel->coff[v] : 16 * v;
  }
  const float* rows[MR];  // A row r, element k at rows[r][ka(k)]; rows past m repeat row 0
  for (i64 r = 0; r < MR; ++r) {
    const i64 rr = r < t.m ? r : 0;
    rows[r] = t.a + (LA == ALayout::kPacked ? r : LA == ALayout::kRows ? rr * t.lda : t.row[rr]);
  }
  // With one vector per row, 8 accumulators are too few to cover the FMA latency: alternate
  // two sets over k (S = 2) and add them at the end.
  constexpr int S = NV == 1 ? 2 : 1;
  __m512 c[S][MR][NV];
#pragma GCC unroll 2
  for (int s = 0; s < S; ++s)
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r)
#pragma GCC unroll 3
      for (int v = 0; v < NV; ++v) c[s][r][v] = _mm512_setzero_ps();
  const float* cols[NV];  // B vector v, row k at cols[v][kb(k)] (plain: t.b + k*ldb + 16v)
  for (int v = 0; v < NV; ++v) cols[v] = t.b + boff[v];
  const i64 kc = t.kc, ldb = t.ldb;
  const i64 *kof = t.kof, *bkof = t.bkof;
  for (i64 k0 = 0; k0 < kc; k0 += S)
#pragma GCC unroll 2
    for (int s = 0; s < S; ++s) {
      const i64 k = k0 + s;
      if (S > 1 && k == kc) break;
      const i64 ka = LA == ALayout::kGather ? kof[k] : LA == ALayout::kPacked ? k * MR : k;
      const i64 kb = kGatherB ? bkof[k] : k * ldb;
      __m512 bv[NV];
#pragma GCC unroll 3
      for (int v = 0; v < NV; ++v)
        bv[v] = _mm512_maskz_loadu_ps(mask[v], kGatherB ? cols[v] + kb : t.b + kb + 16 * v);
#pragma GCC unroll 8
      for (int r = 0; r < MR; ++r) {
        const __m512 ar = _mm512_set1_ps(rows[r][ka]);
#pragma GCC unroll 3
        for (int v = 0; v < NV; ++v) c[s][r][v] = _mm512_fmadd_ps(ar, bv[v], c[s][r][v]);
      }
    }
  if constexpr (S == 2) {
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r) c[0][r][0] = _mm512_add_ps(c[0][r][0], c[1][r][0]);
  }
  // Rows past m get an empty store mask (constant indices keep c[][] in registers). A row's
  // loads all come before its stores: a masked vector's 64 bytes may overlap the next one,
  // and a load behind an overlapping store waits for it.
  const __m512 alpha = _mm512_set1_ps(t.alpha);
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r) {
    float* p = t.c + r * t.ldc;
    __m512 out[NV];
#pragma GCC unroll 3
    for (int v = 0; v < NV; ++v) {
      const __mmask16 m = r < t.m ? mask[v] : __mmask16(0);
      out[v] = t.accumulate ? _mm512_fmadd_ps(alpha, c[0][r][v], _mm512_maskz_loadu_ps(m, p + coff[v]))
                            : _mm512_mul_ps(alpha, c[0][r][v]);
    }
#pragma GCC unroll 3
    for (int v = 0; v < NV; ++v)
      _mm512_mask_storeu_ps(p + coff[v], r < t.m ? mask[v] : __mmask16(0), out[v]);
  }
}

using Kernel = void (*)(const Tile&);

template <ALayout LA, bool kGatherB>
Kernel kernel_for(int nv) {
  return nv == 3   ? micro_kernel<3, LA, kGatherB>
         : nv == 2 ? micro_kernel<2, LA, kGatherB>
                   : micro_kernel<1, LA, kGatherB>;
}

Kernel kernel_for(ALayout la, bool gather_b, int nv) {
  if (gather_b)
    return la == ALayout::kPacked ? kernel_for<ALayout::kPacked, true>(nv)
                                  : kernel_for<ALayout::kRows, true>(nv);
  return la == ALayout::kGather ? kernel_for<ALayout::kGather, false>(nv)
         : la == ALayout::kRows ? kernel_for<ALayout::kRows, false>(nv)
                                : kernel_for<ALayout::kPacked, false>(nv);
}

// The operands as given to the driver: row-major op(A) and op(B), or gathered through offsets.
struct AOperand {
  const float* a;
  i64 lda;
  bool trans;
  const i64* row = nullptr;  // A(i, k) = a[row[i] + kof[k]] when set
  const i64* kof = nullptr;
};
struct BOperand {
  const float* b;
  i64 ldb;
  bool trans;
  const i64* kof = nullptr;  // B(k, j) = b[kof[k] + col[j]] when set
  const i64* col = nullptr;
};

// Plain panel jr..jr+48 of nc columns: vectors of 16 consecutive columns.
Panel plain_panel(i64 jr, i64 nc) {
  Panel p;
  for (i64 v = 0; v < 3 && jr + 16 * v < nc; ++v) {
    const i64 n = std::min<i64>(16, nc - jr - 16 * v);
    p.mask[p.nv++] = __mmask16((1u << n) - 1);
  }
  return p;
}

// Gathered columns in runs of consecutive offsets (at most 16), three runs per panel.
void gathered_panels(const i64* col, i64 N, std::vector<Panel>& panels) {
  panels.clear();
  for (i64 j = 0; j < N;) {
    i64 n = 1;
    while (n < 16 && j + n < N && col[j + n] == col[j] + n) ++n;
    if (panels.empty() || panels.back().nv == 3) panels.emplace_back();
    Panel& p = panels.back();
    p.boff[p.nv] = col[j];
    p.coff[p.nv] = j;
    p.mask[p.nv++] = __mmask16((1u << n) - 1);
    j += n;
  }
}

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

bool sgemm_available() {
  static const bool ok = [] {
    const char* env = std::getenv("QAT_GEMM");
    if (env != nullptr && std::string_view(env) == "blas") return false;
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") != 0;
  }();
  return ok;
}

namespace {

void blocked_gemm(i64 M, i64 N, i64 K, float alpha, const AOperand& A, const BOperand& B, float beta,
                  float* C, i64 ldc) {
  if (M == 0 || N == 0) return;
  if (K == 0 || alpha == 0.0f) return scale_c(M, N, beta, C, ldc);
  if (beta != 0.0f) scale_c(M, N, beta, C, ldc);  // then every k block accumulates
  PackBuffers& bufs = buffers();
  const bool parallel = get_num_threads() > 1 && M * N * K > (1 << 21);
  const ALayout layout = A.row ? ALayout::kGather : A.trans ? ALayout::kPacked : ALayout::kRows;
  const bool gather_b = B.col != nullptr;
  const i64 k_blocks = (K + KC - 1) / KC, kb = (K + k_blocks - 1) / k_blocks;  // even k blocks
  const i64 nc_max = gather_b ? N : NC;  // gathered B is never packed, so never blocked
  // Gathered panels live in the caller's thread_local buffer (kept between calls); OpenMP
  // workers read it through this reference.
  thread_local std::vector<Panel> tls_panels;
  std::vector<Panel>& gathered = tls_panels;
  if (gather_b) gathered_panels(B.col, N, gathered);
  for (i64 jc = 0; jc < N; jc += nc_max) {
    const i64 nc = std::min(nc_max, N - jc);
    const i64 n_panels = gather_b ? static_cast<i64>(gathered.size()) : (nc + NR - 1) / NR;
    for (i64 pc = 0; pc < K; pc += kb) {
      const i64 kc = std::min(kb, K - pc);
      // B panel jp starts at b + jp * b_panel, its row k at + k * b_ld (or at bkof[k])
      const float* b = gather_b ? B.b : B.b + pc * B.ldb + jc;
      i64 b_ld = B.ldb, b_panel = NR;
      // An untransposed B is packed only when a panel's rows are pages apart and too many
      // for the TLB (measured: 32 x 12544 x 400 gains 30%, 16 x 50176 x 25 loses 30%).
      const bool pack = B.trans || (!gather_b && B.ldb >= 1024 && kc > 64);
      if (pack) {
        if (B.trans)
          pack_b_trans(B.b, B.ldb, pc, jc, kc, nc, bufs.b);
        else
          pack_b(B.b, B.ldb, pc, jc, kc, nc, bufs.b);
        b = bufs.b, b_ld = NR, b_panel = NR * kc;
      } else if (gather_b) {
        b_panel = 0;
      }
      for (i64 ic = 0; ic < M; ic += MC) {
        const i64 mc = std::min(MC, M - ic);
        // A panel ir starts at a + ir / MR * a_panel
        const float* a = A.a + ic * A.lda + pc;
        i64 a_ld = A.lda, a_panel = MR * A.lda;
        if (layout == ALayout::kPacked) {
          pack_a_trans(A.a, A.lda, ic, pc, mc, kc, bufs.a);
          a = bufs.a, a_ld = MR, a_panel = MR * kc;
        } else if (layout == ALayout::kGather) {
          a = A.a, a_panel = 0;
        }
        Tile t{kc,
               0,
               a,
               a_ld,
               A.row ? A.row + ic : nullptr,
               A.kof ? A.kof + pc : nullptr,
               b,
               b_ld,
               B.kof ? B.kof + pc : nullptr,
               C + ic * ldc + jc,
               ldc,
               nullptr,
               alpha,
               beta != 0.0f || pc > 0};
        // Tiles write disjoint parts of C, so threads never change any element's sum order.
        auto run = [&](Tile t, i64 jp0, i64 jp1) {
          for (i64 jp = jp0; jp < jp1; ++jp) {
            const Panel plain = gather_b ? Panel{} : plain_panel(jp * NR, nc);
            t.panel = gather_b ? &gathered[jp] : &plain;
            const Kernel kernel = kernel_for(layout, gather_b, t.panel->nv);
            Tile tile = t;
            tile.b += jp * b_panel;
            if (!gather_b) tile.c += jp * NR;
            for (i64 ir = 0; ir < mc; ir += MR) {
              tile.m = std::min(MR, mc - ir);
              kernel(tile);
              tile.a += a_panel;
              if (tile.row) tile.row += MR;
              tile.c += MR * ldc;
            }
          }
        };
        if (!parallel) {
          run(t, 0, n_panels);
          continue;
        }
#pragma omp parallel for schedule(static)
        for (i64 jp = 0; jp < n_panels; ++jp) run(t, jp, jp + 1);
      }
    }
  }
}

}  // namespace

void sgemm(bool trans_a, bool trans_b, i64 M, i64 N, i64 K, float alpha, const float* A, i64 lda,
           const float* B, i64 ldb, float beta, float* C, i64 ldc) {
  blocked_gemm(M, N, K, alpha, AOperand{A, lda, trans_a}, BOperand{B, ldb, trans_b}, beta, C, ldc);
}

void sgemm_gather_a(i64 M, i64 N, i64 K, float alpha, const float* a, const i64* row_offset,
                    const i64* k_offset, bool trans_b, const float* B, i64 ldb, float beta, float* C,
                    i64 ldc) {
  blocked_gemm(M, N, K, alpha, AOperand{a, 0, false, row_offset, k_offset}, BOperand{B, ldb, trans_b},
               beta, C, ldc);
}

void sgemm_gather_b(bool trans_a, i64 M, i64 N, i64 K, float alpha, const float* A, i64 lda,
                    const float* b, const i64* k_offset, const i64* col_offset, float beta, float* C,
                    i64 ldc) {
  blocked_gemm(M, N, K, alpha, AOperand{A, lda, trans_a}, BOperand{b, 0, false, k_offset, col_offset},
               beta, C, ldc);
}

}  // namespace qat::detail
