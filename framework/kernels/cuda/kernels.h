#pragma once
// Internal: the framework's CUDA kernels (elementwise.cu, reduce.cu, gemm.cpp), called by the ops
// with device pointers; each queues work on the one stream and returns (no host sync). An empty
// range launches nothing. Float and double each. Without the CUDA backend they throw (none.cpp).
#include <cstdint>

#include "framework/kernels/cpu/elementwise.h"  // BinaryOp

namespace qat::kernels::cuda {

constexpr int kMaxDims = 8;  // Shape::kMaxDims

/// A broadcast for out = a op b: dimensions of the output with each input's element strides
/// (0 where broadcast), as ops/broadcast.h plans them.
struct BroadcastDims {
  int rank = 0;
  std::int64_t size[kMaxDims] = {}, sa[kMaxDims] = {}, sb[kMaxDims] = {};
};

/// out[i] = a[.] op b[.] over the n output elements.
void binary(BinaryOp op, const float* a, const float* b, float* out, const BroadcastDims& dims,
            std::int64_t n);
void binary(BinaryOp op, const double* a, const double* b, double* out, const BroadcastDims& dims,
            std::int64_t n);

/// Elementwise ops with one scalar s: -x, x + s, x * s, x / s, s - x, s / x, max(x, 0) (NaN -> 0,
/// as the CPU kernel), x^s.
enum class UnaryOp : int { Neg, AddScalar, MulScalar, DivScalar, RSubScalar, RDivScalar, Relu, Pow };
void unary(UnaryOp op, const float* x, float* y, std::int64_t n, double s);
void unary(UnaryOp op, const double* x, double* y, std::int64_t n, double s);

/// d[i] = x[i] > 0 ? g[i] : 0
void relu_backward(const float* g, const float* x, float* d, std::int64_t n);
void relu_backward(const double* g, const double* x, double* d, std::int64_t n);
/// dst[i] += src[i]
void add_inplace(float* dst, const float* src, std::int64_t n);
void add_inplace(double* dst, const double* src, std::int64_t n);
/// out[r, c] = row[c] for r < rows (a bias broadcast over rows)
void repeat_rows(const float* row, float* out, std::int64_t rows, std::int64_t cols);
void repeat_rows(const double* row, double* out, std::int64_t rows, std::int64_t cols);

/// A sum over some dimensions: output element j sums the input elements whose kept coordinates
/// are j's, over the reduced dimensions in row-major order.
struct ReduceDims {
  int kept_rank = 0, red_rank = 0;
  std::int64_t kept_size[kMaxDims] = {}, kept_stride[kMaxDims] = {};
  std::int64_t red_size[kMaxDims] = {}, red_stride[kMaxDims] = {};
  std::int64_t n_out = 1, n_red = 1;
};
/// out[j] = sum of its inputs, times `scale` in double when not 1 (as the CPU's mean). One block per
/// output; a thread sums a fixed strided subset in order and the block combines the partial sums in a
/// fixed tree: deterministic (no atomics), though not the CPU's order.
void sum(const float* in, float* out, const ReduceDims& dims, double scale);
void sum(const double* in, double* out, const ReduceDims& dims, double scale);

/// Row-major C (m x n) = alpha op(A) op(B) + beta C through cuBLAS (FP32 / FP64, no TF32),
/// op(A) m x k, op(B) k x n, leading dimensions as stored.
void gemm(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k, float alpha,
          const float* a, std::int64_t lda, const float* b, std::int64_t ldb, float beta, float* c,
          std::int64_t ldc);
void gemm(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k, double alpha,
          const double* a, std::int64_t lda, const double* b, std::int64_t ldb, double beta, double* c,
          std::int64_t ldc);

}  // namespace qat::kernels::cuda
