// Reduction kernels, compiled once per instruction set (see tensor/simd.h). The partial sums
// are a fixed array, so the order (and the result) does not depend on the vector width.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "framework/kernels/cpu/reduce.cpp"
#include "framework/kernels/cpu/reduce.h"

#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include "framework/tensor/simd.h"

HWY_BEFORE_NAMESPACE();
namespace qat::kernels::HWY_NAMESPACE {
using i64 = std::int64_t;

template <class T>
T sum_t(const T* __restrict p, i64 n) {
  constexpr i64 L = 4 * 64 / sizeof(T);
  T acc[L] = {};
  i64 i = 0;
  for (; i + L <= n; i += L)
    for (i64 l = 0; l < L; ++l) acc[l] += p[i + l];
  T s = 0;
  for (i64 l = 0; l < L; ++l) s += acc[l];
  for (; i < n; ++i) s += p[i];
  return s;
}

template <class T>
void sum_rows_t(const T* __restrict x, i64 rows, i64 n, T* __restrict out) {
  for (i64 k = 0; k < rows; ++k)
    for (i64 i = 0; i < n; ++i) out[i] += x[k * n + i];
}

// x * 0 is 0 for a finite x and NaN for +-inf and NaN, so the sum is 0 iff every x is finite:
// one multiply-add per element in independent lanes (vectorised), no branch.
template <class T>
bool all_finite_t(const T* __restrict p, i64 n) {
  constexpr i64 L = 4 * 64 / sizeof(T);
  T acc[L] = {};
  i64 i = 0;
  for (; i + L <= n; i += L)
    for (i64 l = 0; l < L; ++l) acc[l] += p[i + l] * T(0);
  T s = 0;
  for (i64 l = 0; l < L; ++l) s += acc[l];
  for (; i < n; ++i) s += p[i] * T(0);
  return s == 0;
}

float SumF(const float* p, i64 n) { return sum_t(p, n); }
double SumD(const double* p, i64 n) { return sum_t(p, n); }
void SumRowsF(const float* x, i64 rows, i64 n, float* o) { sum_rows_t(x, rows, n, o); }
void SumRowsD(const double* x, i64 rows, i64 n, double* o) { sum_rows_t(x, rows, n, o); }
bool AllFiniteF(const float* p, i64 n) { return all_finite_t(p, n); }
bool AllFiniteD(const double* p, i64 n) { return all_finite_t(p, n); }

}  // namespace qat::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace qat::kernels {
using i64 = std::int64_t;

HWY_EXPORT(SumF);
HWY_EXPORT(SumD);
HWY_EXPORT(SumRowsF);
HWY_EXPORT(SumRowsD);
HWY_EXPORT(AllFiniteF);
HWY_EXPORT(AllFiniteD);

float sum(const float* p, i64 n) { return QAT_DISPATCH(SumF)(p, n); }
double sum(const double* p, i64 n) { return QAT_DISPATCH(SumD)(p, n); }
void sum_rows(const float* x, i64 rows, i64 n, float* o) { QAT_DISPATCH(SumRowsF)(x, rows, n, o); }
void sum_rows(const double* x, i64 rows, i64 n, double* o) { QAT_DISPATCH(SumRowsD)(x, rows, n, o); }
bool all_finite(const float* p, i64 n) { return QAT_DISPATCH(AllFiniteF)(p, n); }
bool all_finite(const double* p, i64 n) { return QAT_DISPATCH(AllFiniteD)(p, n); }

}  // namespace qat::kernels
#endif  // HWY_ONCE
