// The float GEMM's packing (kernels/cpu/sgemm.cpp): the per-thread panel buffers and the copies
// of A and B blocks into the micro-kernel's panels. Included in that file's namespace once per
// Highway target (no include guard), from the names it declares there: i64, MR, NR, MC, KC,
// NC, imin.

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

// Transposed A: dst[panel][k][0..MR) = A(k0 + k, i0 + panel*MR + r), rows beyond mc zeroed.
void pack_a_trans(const float* A, i64 lda, i64 i0, i64 k0, i64 mc, i64 kc, float* dst) {
  for (i64 p = 0; p < mc; p += MR) {
    const i64 rows = imin(MR, mc - p);
    float* panel = dst + p * kc;
    for (i64 k = 0; k < kc; ++k) {
      const float* src = A + (k0 + k) * lda + i0 + p;
      for (i64 r = 0; r < rows; ++r) panel[k * MR + r] = src[r];
      for (i64 r = rows; r < MR; ++r) panel[k * MR + r] = 0.0f;
    }
  }
}

// B: dst[panel][k][0..NR) = B(k0 + k, j0 + panel*NR + c); columns beyond nc left unset.
void pack_b(const float* B, i64 ldb, i64 k0, i64 j0, i64 kc, i64 nc, float* dst) {
  for (i64 p = 0; p < nc; p += NR)
    for (i64 k = 0; k < kc; ++k)
      std::memcpy(dst + p * kc + k * NR, B + (k0 + k) * ldb + j0 + p, imin(NR, nc - p) * sizeof(float));
}

#if HWY_TARGET <= HWY_AVX2
// dst[t * dst_stride + r] = src[r * src_stride + t] for an 8x8 block (r, t < 8).
inline void transpose8x8(const float* src, i64 src_stride, float* dst, i64 dst_stride) {
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
#endif

// Transposed B: dst[panel][k][0..NR) = B(j0 + panel*NR + c, k0 + k); the kernel masks the
// columns beyond nc, so they are left unset.
void pack_b_trans(const float* B, i64 ldb, i64 k0, i64 j0, i64 kc, i64 nc, float* dst) {
  for (i64 p = 0; p < nc; p += NR) {
    const i64 cols = imin(NR, nc - p);
    float* panel = dst + p * kc;
    i64 c = 0;
#if HWY_TARGET <= HWY_AVX2
    const i64 k8 = kc / 8 * 8;
    for (; c + 8 <= cols; c += 8) {  // 8 columns x 8 k at a time through registers
      const float* src = B + (j0 + p + c) * ldb + k0;
      for (i64 k = 0; k < k8; k += 8) transpose8x8(src + k, ldb, panel + k * NR + c, NR);
      for (i64 k = k8; k < kc; ++k)
        for (i64 cc = 0; cc < 8; ++cc) panel[k * NR + c + cc] = src[cc * ldb + k];
    }
#endif
    for (; c < cols; ++c) {
      const float* src = B + (j0 + p + c) * ldb + k0;
      for (i64 k = 0; k < kc; ++k) panel[k * NR + c] = src[k];
    }
  }
}
