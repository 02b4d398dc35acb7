#pragma once
// Internal: GEMM. float32 runs the library's own AVX-512 kernel where the CPU has it
// (tensor/sgemm.h), else the system CBLAS (OpenBLAS, loaded at first use); float64 always BLAS.
#include <cstdint>
#include <string>

namespace qat::detail {

/// C(M,N) = alpha * op(A)(M,K) * op(B)(K,N) + beta * C, row-major; op = transpose if trans_*.
template <class T>
void gemm(bool trans_a, bool trans_b, std::int64_t M, std::int64_t N, std::int64_t K, T alpha,
          const T* A, std::int64_t lda, const T* B, std::int64_t ldb, T beta, T* C,
          std::int64_t ldc);

/// Always the system CBLAS (the reference that tests and benchmarks compare gemm against).
template <class T>
void blas_gemm(bool trans_a, bool trans_b, std::int64_t M, std::int64_t N, std::int64_t K, T alpha,
               const T* A, std::int64_t lda, const T* B, std::int64_t ldb, T beta, T* C,
               std::int64_t ldc);

/// Which BLAS library and kernel set is in use, e.g. "libopenblas.so.0 (SkylakeX)".
std::string blas_info();
void blas_set_num_threads(int n);

}  // namespace qat::detail
