#include "framework/tensor/sgemm.h"

#include <immintrin.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string_view>

#include "framework/tensor/parallel.h"

// Goto/BLIS GEMM (Goto & van de Geijn 2008; Van Zee & van de Geijn 2015):
//   for jc in N by NC:  for pc in K by KC:  pack op(B)[pc:+KC, jc:+NC] into NR-wide panels
//     for ic in M by MC:  pack alpha*op(A)[ic:+MC, pc:+KC] into MR-tall panels
//       for each (MR x NR) tile: C_tile += A_panel * B_panel   (micro-kernel, registers only)
// Panels are zero-padded, so the micro-kernel always runs full tiles and masks its stores.

namespace qat::detail {
namespace {

constexpr std::int64_t MR = 8, NR = 48;  // 8x48 tile = 24 zmm accumulators
constexpr std::int64_t KC = 256, MC = 128, NC = 3072;

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

// dst[t * dst_stride + r] = alpha * src[r * src_stride + t] for an 8x8 block (r, t < 8).
QAT_AVX512 inline void transpose8x8(const float* src, std::int64_t src_stride, float* dst,
                                    std::int64_t dst_stride, float alpha) {
  const __m256 a = _mm256_set1_ps(alpha);
  __m256 r[8], t[8];
  for (int i = 0; i < 8; ++i) r[i] = _mm256_mul_ps(a, _mm256_loadu_ps(src + i * src_stride));
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

// dst[panel][k][0..MR) = alpha * op(A)(i0 + panel*MR + r, k0 + k), rows beyond mc zeroed.
QAT_AVX512 void pack_a(bool trans, const float* A, std::int64_t lda, std::int64_t i0, std::int64_t k0,
            std::int64_t mc, std::int64_t kc, float alpha, float* dst) {
  for (std::int64_t p = 0; p < mc; p += MR) {
    const std::int64_t rows = std::min(MR, mc - p);
    float* panel = dst + p * kc;
    std::int64_t k_done = 0;
    if (!trans && rows == MR) {  // 8 rows x 8 k at a time through registers
      for (; k_done + 8 <= kc; k_done += 8)
        transpose8x8(A + (i0 + p) * lda + k0 + k_done, lda, panel + k_done * MR, MR, alpha);
    }
    for (std::int64_t k = k_done; k < kc; ++k) {
      float* out = panel + k * MR;
      for (std::int64_t r = 0; r < rows; ++r) {
        const std::int64_t i = i0 + p + r, kk = k0 + k;
        out[r] = alpha * (trans ? A[kk * lda + i] : A[i * lda + kk]);
      }
      for (std::int64_t r = rows; r < MR; ++r) out[r] = 0.0f;
    }
  }
}

// dst[panel][k][0..NR) = op(B)(k0 + k, j0 + panel*NR + c), columns beyond nc zeroed.
QAT_AVX512 void pack_b(bool trans, const float* B, std::int64_t ldb, std::int64_t k0, std::int64_t j0,
            std::int64_t kc, std::int64_t nc, float* dst) {
  for (std::int64_t p = 0; p < nc; p += NR) {
    const std::int64_t cols = std::min(NR, nc - p);
    float* panel = dst + p * kc;
    if (!trans) {
      for (std::int64_t k = 0; k < kc; ++k) {
        const float* src = B + (k0 + k) * ldb + j0 + p;
        float* out = panel + k * NR;
        std::memcpy(out, src, cols * sizeof(float));
        if (cols < NR) std::memset(out + cols, 0, (NR - cols) * sizeof(float));
      }
    } else {
      std::int64_t c = 0, k8 = kc / 8 * 8;
      for (; c + 8 <= cols; c += 8) {  // 8 columns x 8 k at a time through registers
        const float* src = B + (j0 + p + c) * ldb + k0;
        for (std::int64_t k = 0; k < k8; k += 8) transpose8x8(src + k, ldb, panel + k * NR + c, NR, 1.0f);
        for (std::int64_t k = k8; k < kc; ++k)
          for (std::int64_t cc = 0; cc < 8; ++cc) panel[k * NR + c + cc] = src[cc * ldb + k];
      }
      for (; c < cols; ++c) {
        const float* src = B + (j0 + p + c) * ldb + k0;
        for (std::int64_t k = 0; k < kc; ++k) panel[k * NR + c] = src[k];
      }
      for (std::int64_t c = cols; c < NR; ++c)
        for (std::int64_t k = 0; k < kc; ++k) panel[k * NR + c] = 0.0f;
    }
  }
}

// C[0..m, 0..n) += a_panel (MR x kc) * b_panel (kc x NR); m <= MR, n <= NR.
QAT_AVX512 void micro_kernel(std::int64_t kc, const float* a, const float* b, float* C,
                             std::int64_t ldc, std::int64_t m, std::int64_t n) {
  __m512 c[MR][3];
  for (auto& row : c) row[0] = row[1] = row[2] = _mm512_setzero_ps();
  for (std::int64_t k = 0; k < kc; ++k) {
    const __m512 b0 = _mm512_load_ps(b), b1 = _mm512_load_ps(b + 16), b2 = _mm512_load_ps(b + 32);
    for (std::int64_t r = 0; r < MR; ++r) {
      const __m512 ar = _mm512_set1_ps(a[r]);
      c[r][0] = _mm512_fmadd_ps(ar, b0, c[r][0]);
      c[r][1] = _mm512_fmadd_ps(ar, b1, c[r][1]);
      c[r][2] = _mm512_fmadd_ps(ar, b2, c[r][2]);
    }
    a += MR;
    b += NR;
  }
  if (m == MR && n == NR) {
    for (std::int64_t r = 0; r < MR; ++r)
      for (int v = 0; v < 3; ++v) {
        float* p = C + r * ldc + 16 * v;
        _mm512_storeu_ps(p, _mm512_add_ps(_mm512_loadu_ps(p), c[r][v]));
      }
    return;
  }
  for (std::int64_t r = 0; r < m; ++r)
    for (int v = 0; v < 3; ++v) {
      const std::int64_t left = n - 16 * v;
      if (left <= 0) break;
      const __mmask16 mask = left >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << left) - 1);
      float* p = C + r * ldc + 16 * v;
      _mm512_mask_storeu_ps(p, mask, _mm512_add_ps(_mm512_maskz_loadu_ps(mask, p), c[r][v]));
    }
}

void scale_c(std::int64_t M, std::int64_t N, float beta, float* C, std::int64_t ldc) {
  if (beta == 1.0f) return;
  for (std::int64_t i = 0; i < M; ++i) {
    float* row = C + i * ldc;
    if (beta == 0.0f) std::memset(row, 0, N * sizeof(float));  // BLAS: C is not read
    else for (std::int64_t j = 0; j < N; ++j) row[j] *= beta;
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

void sgemm(bool trans_a, bool trans_b, std::int64_t M, std::int64_t N, std::int64_t K, float alpha,
           const float* A, std::int64_t lda, const float* B, std::int64_t ldb, float beta, float* C,
           std::int64_t ldc) {
  scale_c(M, N, beta, C, ldc);
  if (K == 0 || alpha == 0.0f) return;
  PackBuffers& bufs = buffers();
  const bool parallel = get_num_threads() > 1 && M * N * K > (1 << 21);
  for (std::int64_t jc = 0; jc < N; jc += NC) {
    const std::int64_t nc = std::min(NC, N - jc);
    for (std::int64_t pc = 0; pc < K; pc += KC) {
      const std::int64_t kc = std::min(KC, K - pc);
      pack_b(trans_b, B, ldb, pc, jc, kc, nc, bufs.b);
      for (std::int64_t ic = 0; ic < M; ic += MC) {
        const std::int64_t mc = std::min(MC, M - ic);
        pack_a(trans_a, A, lda, ic, pc, mc, kc, alpha, bufs.a);
        const float* pa = bufs.a;
        const float* pb = bufs.b;
        const std::int64_t n_panels = (nc + NR - 1) / NR;
        // Tiles write disjoint parts of C, so threads never change any element's sum order.
#pragma omp parallel for schedule(static) if (parallel)
        for (std::int64_t jp = 0; jp < n_panels; ++jp) {
          const std::int64_t jr = jp * NR;
          for (std::int64_t ir = 0; ir < mc; ir += MR)
            micro_kernel(kc, pa + ir * kc, pb + jr * kc, C + (ic + ir) * ldc + jc + jr, ldc,
                         std::min(MR, mc - ir), std::min(NR, nc - jr));
        }
      }
    }
  }
}

}  // namespace qat::detail
