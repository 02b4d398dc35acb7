// GEMM through cuBLAS (kernels.h). Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T,
// so cuBLAS gets B first. Pedantic math mode: FP32 stays FP32 (no TF32), as on the CPU.
#include <cublas_v2.h>

#include <mutex>

#include "framework/kernels/cuda/check.h"
#include "framework/kernels/cuda/kernels.h"

namespace qat::kernels::cuda {
namespace {

const char* status_text(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_NOT_INITIALIZED:
      return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED:
      return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE:
      return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH:
      return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_EXECUTION_FAILED:
      return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR:
      return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return "CUBLAS_STATUS_NOT_SUPPORTED";
    default:
      return "cuBLAS error";
  }
}

void check(cublasStatus_t s, const char* call) {
  if (s == CUBLAS_STATUS_SUCCESS) return;
  throw Error(qat::detail::concat("gemm: ", call,
                                  " failed on cuda:", std::max(::qat::cuda::detail::current_device(), 0),
                                  ": ", status_text(s)));
}

cublasHandle_t handle() {
  static cublasHandle_t h = [] {
    cudaStream_t st = ::qat::cuda::detail::stream("gemm");
    cublasHandle_t created = nullptr;
    check(cublasCreate(&created), "cublasCreate");
    check(cublasSetStream(created, st), "cublasSetStream");
    check(cublasSetMathMode(created, CUBLAS_PEDANTIC_MATH), "cublasSetMathMode");
    return created;
  }();
  return h;
}

cublasOperation_t op(bool t) { return t ? CUBLAS_OP_T : CUBLAS_OP_N; }

}  // namespace

void gemm(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k, float alpha,
          const float* a, std::int64_t lda, const float* b, std::int64_t ldb, float beta, float* c,
          std::int64_t ldc) {
  if (m == 0 || n == 0) return;
  check(cublasSgemm(handle(), op(trans_b), op(trans_a), static_cast<int>(n), static_cast<int>(m),
                    static_cast<int>(k), &alpha, b, static_cast<int>(ldb), a, static_cast<int>(lda),
                    &beta, c, static_cast<int>(ldc)),
        "cublasSgemm");
}

void gemm(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k, double alpha,
          const double* a, std::int64_t lda, const double* b, std::int64_t ldb, double beta, double* c,
          std::int64_t ldc) {
  if (m == 0 || n == 0) return;
  check(cublasDgemm(handle(), op(trans_b), op(trans_a), static_cast<int>(n), static_cast<int>(m),
                    static_cast<int>(k), &alpha, b, static_cast<int>(ldb), a, static_cast<int>(lda),
                    &beta, c, static_cast<int>(ldc)),
        "cublasDgemm");
}

}  // namespace qat::kernels::cuda

namespace qat::kernels::cuda {

void gemm_batched(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k,
                  float alpha, const float* a, std::int64_t lda, std::int64_t stride_a, const float* b,
                  std::int64_t ldb, std::int64_t stride_b, float beta, float* c, std::int64_t ldc,
                  std::int64_t stride_c, std::int64_t batch) {
  if (m == 0 || n == 0 || batch == 0) return;
  check(cublasSgemmStridedBatched(handle(), op(trans_b), op(trans_a), static_cast<int>(n),
                                  static_cast<int>(m), static_cast<int>(k), &alpha, b,
                                  static_cast<int>(ldb), stride_b, a, static_cast<int>(lda), stride_a,
                                  &beta, c, static_cast<int>(ldc), stride_c, static_cast<int>(batch)),
        "cublasSgemmStridedBatched");
}

void gemm_batched(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k,
                  double alpha, const double* a, std::int64_t lda, std::int64_t stride_a,
                  const double* b, std::int64_t ldb, std::int64_t stride_b, double beta, double* c,
                  std::int64_t ldc, std::int64_t stride_c, std::int64_t batch) {
  if (m == 0 || n == 0 || batch == 0) return;
  check(cublasDgemmStridedBatched(handle(), op(trans_b), op(trans_a), static_cast<int>(n),
                                  static_cast<int>(m), static_cast<int>(k), &alpha, b,
                                  static_cast<int>(ldb), stride_b, a, static_cast<int>(lda), stride_a,
                                  &beta, c, static_cast<int>(ldc), stride_c, static_cast<int>(batch)),
        "cublasDgemmStridedBatched");
}

}  // namespace qat::kernels::cuda
