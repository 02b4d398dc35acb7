#pragma once
// Internal: reduction CPU kernels on raw arrays, runtime-dispatched (tensor/simd.h).
#include <cstdint>

namespace qat::kernels {

/// sum of p[0..n) in a fixed order, the same on every path: 64 bytes x 4 of independent
/// partial sums (lane l adds p[l], p[l + L], ...), added up in order, then the tail.
float sum(const float* p, std::int64_t n);
double sum(const double* p, std::int64_t n);

/// out[i] += sum_k x[k * n + i] for k in [0, rows): the column sums of a (rows, n) matrix
/// (e.g. a bias gradient summed over the batch), added row by row in order.
void sum_rows(const float* x, std::int64_t rows, std::int64_t n, float* out);
void sum_rows(const double* x, std::int64_t rows, std::int64_t n, double* out);

/// Whether every p[0..n) is finite (no NaN, no +-inf): one vectorised pass, no early exit.
bool all_finite(const float* p, std::int64_t n);
bool all_finite(const double* p, std::int64_t n);

}  // namespace qat::kernels
