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

}  // namespace qat::detail
