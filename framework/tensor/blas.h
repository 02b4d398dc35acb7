#pragma once
// Internal: GEMM. float32 runs the library's own kernel on the AVX2 and AVX-512 paths
// (tensor/sgemm.h), else the system CBLAS (OpenBLAS, loaded at first use); float64 always BLAS.
// The system BLAS runs on one thread over fixed row blocks, so its bits do not depend on threads.
#include <cstdint>
#include <string>

namespace qat::detail {

/// C(M,N) = alpha * op(A)(M,K) * op(B)(K,N) + beta * C, row-major; op = transpose if trans_*.
template <class T>
void gemm(bool trans_a, bool trans_b, std::int64_t M, std::int64_t N, std::int64_t K, T alpha,
          const T* A, std::int64_t lda, const T* B, std::int64_t ldb, T beta, T* C, std::int64_t ldc);

/// C(M,N) = alpha * A(M,K) * op(B)(K,N) + beta * C with A(i, k) = a[row_offset[i] + k_offset[k]]
/// (an im2col matrix read from a padded image). float32 gathers inside the kernel
/// (sgemm_gather_a); elsewhere A is built first.
template <class T>
void gemm_gather_a(std::int64_t M, std::int64_t N, std::int64_t K, T alpha, const T* a,
                   const std::int64_t* row_offset, const std::int64_t* k_offset, bool trans_b,
                   const T* B, std::int64_t ldb, T beta, T* C, std::int64_t ldc);

/// C(M,N) = alpha * op(A)(M,K) * B(K,N) + beta * C with B(k, j) = b[k_offset[k] + col_offset[j]]
/// (an im2col matrix with positions as columns). float32 gathers inside the kernel
/// (sgemm_gather_b); elsewhere B is built first.
template <class T>
void gemm_gather_b(bool trans_a, std::int64_t M, std::int64_t N, std::int64_t K, T alpha, const T* A,
                   std::int64_t lda, const T* b, const std::int64_t* k_offset,
                   const std::int64_t* col_offset, T beta, T* C, std::int64_t ldc);

/// Always the system CBLAS (the reference that tests and benchmarks compare gemm against).
template <class T>
void blas_gemm(bool trans_a, bool trans_b, std::int64_t M, std::int64_t N, std::int64_t K, T alpha,
               const T* A, std::int64_t lda, const T* B, std::int64_t ldb, T beta, T* C,
               std::int64_t ldc);

/// Which BLAS library and kernel set is in use, e.g. "libopenblas.so.0 (SkylakeX)".
std::string blas_info();

}  // namespace qat::detail
