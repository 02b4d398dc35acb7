#pragma once
// Internal: the library's own single-precision GEMM for CPUs with AVX-512 (BLIS-style packing
// and an 8x48 register-blocked micro-kernel). It is what detail::gemm<float> runs when
// sgemm_available(); elsewhere the system BLAS serves. Each element of C is accumulated in the
// same order whatever the thread count, so results do not depend on the number of threads.
#include <cstdint>

namespace qat::detail {

/// True if this CPU has AVX-512F and QAT_GEMM is not set to "blas".
bool sgemm_available();

/// C = alpha * op(A) * op(B) + beta * C, row-major (same contract as cblas_sgemm).
void sgemm(bool trans_a, bool trans_b, std::int64_t M, std::int64_t N, std::int64_t K, float alpha,
           const float* A, std::int64_t lda, const float* B, std::int64_t ldb, float beta, float* C,
           std::int64_t ldc);

/// C = alpha * A * op(B) + beta * C, where A (M x K) is read through offsets into `a`:
///   A(i, k) = a[row_offset[i] + k_offset[k]]
/// e.g. the im2col matrix of a padded image, with the output positions as rows and the kernel
/// taps as k (or the other way round), without building it. B and C as in sgemm.
void sgemm_gather_a(std::int64_t M, std::int64_t N, std::int64_t K, float alpha, const float* a,
                    const std::int64_t* row_offset, const std::int64_t* k_offset, bool trans_b,
                    const float* B, std::int64_t ldb, float beta, float* C, std::int64_t ldc);

/// C = alpha * op(A) * B + beta * C, where B (K x N) is read through offsets into `b`:
///   B(k, j) = b[k_offset[k] + col_offset[j]]
/// e.g. the im2col matrix with the output positions as columns. Columns whose offsets are
/// consecutive are loaded together (up to 16), so rows of positions are vector loads.
void sgemm_gather_b(bool trans_a, std::int64_t M, std::int64_t N, std::int64_t K, float alpha,
                    const float* A, std::int64_t lda, const float* b, const std::int64_t* k_offset,
                    const std::int64_t* col_offset, float beta, float* C, std::int64_t ldc);

}  // namespace qat::detail
