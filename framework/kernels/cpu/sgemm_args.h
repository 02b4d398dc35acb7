#pragma once
// Internal: one call of the library's float GEMM (framework/kernels/cpu/sgemm.cpp and
// sgemm_dot.cpp), as the dispatched kernels receive it.
#include <cstdint>

namespace qat::kernels {

// C = alpha * op(A) * op(B) + beta * C, A or B possibly gathered.
struct SgemmArgs {
  std::int64_t M, N, K;
  float alpha, beta;
  const float* a;
  std::int64_t lda;
  bool trans_a;
  const std::int64_t *a_row, *a_kof;  // A(i, k) = a[a_row[i] + a_kof[k]] when set
  const float* b;
  std::int64_t ldb;
  bool trans_b;
  const std::int64_t *b_kof, *b_col;  // B(k, j) = b[b_kof[k] + b_col[j]] when set
  float* c;
  std::int64_t ldc;
};

// Rows of A up to which a plain A * B^T (B's rows are C's columns: a Linear layer's weight) runs
// as dot products (SgemmDotRun) instead of the packed GEMM: a batch of a few rows, where packing
// B would cost more than the products.
constexpr std::int64_t kSgemmDotMaxRows = 8;

inline bool sgemm_as_dots(const SgemmArgs& g) {
  return g.M <= kSgemmDotMaxRows && g.K > 0 && g.alpha != 0.0f && g.trans_b && !g.trans_a &&
         g.a_row == nullptr && g.b_col == nullptr && g.b_kof == nullptr;
}

// Runs one on the current path (sgemm_dot.cpp).
void sgemm_dot(const SgemmArgs& args);

}  // namespace qat::kernels
