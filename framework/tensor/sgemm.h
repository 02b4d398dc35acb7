#pragma once
// Internal: the library's own single-precision GEMM (BLIS-style packing and a register-blocked
// micro-kernel per instruction set: 8x48 on AVX-512, 6x16 on AVX2, 4x2 generic; implemented in
// framework/kernels/cpu/sgemm.cpp, runtime-dispatched). It is what detail::gemm<float> runs when
// sgemm_available(); elsewhere the system BLAS serves. The functions below run the kernel of the
// current path (cpu::isa()) whatever sgemm_available() says. Each element of C is accumulated
// in the same order whatever the thread count, so results do not depend on the number of threads.
#include <cstdint>

namespace qat::detail {

/// True if gemm<float> runs this GEMM: on the AVX2 and AVX-512 paths (cpu::isa()), unless
/// QAT_GEMM=blas. The generic path runs the system BLAS (faster there, measured).
bool sgemm_available();

/// Rows of C per micro-kernel tile (MR) of gemm<float> on the current path, 0 where the system
/// BLAS serves. A GEMM whose rows are split into calls at multiples of it computes every row with
/// the same tiles, hence the same sums, as one call (the kernel for the last rows of a tile
/// accumulates in a different order).
std::int64_t sgemm_row_tile();

/// Columns of C per micro-kernel tile (NR: 48 on AVX-512, 16 on AVX2) of gemm<float> on the
/// current path, 0 where the system BLAS serves.
std::int64_t sgemm_col_tile();

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
/// consecutive are loaded together (up to a vector), so rows of positions are vector loads.
void sgemm_gather_b(bool trans_a, std::int64_t M, std::int64_t N, std::int64_t K, float alpha,
                    const float* A, std::int64_t lda, const float* b, const std::int64_t* k_offset,
                    const std::int64_t* col_offset, float beta, float* C, std::int64_t ldc);

}  // namespace qat::detail
