// Elementwise kernels, compiled once per instruction set (see tensor/simd.h). The loops are
// written plainly: inside HWY_BEFORE_NAMESPACE the compiler vectorises them for each target.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "framework/kernels/cpu/elementwise.cpp"
#include "framework/kernels/cpu/elementwise.h"

#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include "framework/tensor/simd.h"

HWY_BEFORE_NAMESPACE();
namespace qat::kernels::HWY_NAMESPACE {

template <class T>
void add_inplace_t(T* __restrict dst, const T* __restrict src, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) dst[i] += src[i];
}
template <class T>
void add_t(const T* __restrict a, const T* __restrict b, T* __restrict out, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}
template <class T>
void scale_inplace_t(T* __restrict dst, T s, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) dst[i] *= s;
}

void AddInplaceF(float* d, const float* s, std::int64_t n) { add_inplace_t(d, s, n); }
void AddInplaceD(double* d, const double* s, std::int64_t n) { add_inplace_t(d, s, n); }
void AddF(const float* a, const float* b, float* o, std::int64_t n) { add_t(a, b, o, n); }
void AddD(const double* a, const double* b, double* o, std::int64_t n) { add_t(a, b, o, n); }
void ScaleInplaceF(float* d, float s, std::int64_t n) { scale_inplace_t(d, s, n); }
void ScaleInplaceD(double* d, double s, std::int64_t n) { scale_inplace_t(d, s, n); }

}  // namespace qat::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace qat::kernels {

HWY_EXPORT(AddInplaceF);
HWY_EXPORT(AddInplaceD);
HWY_EXPORT(AddF);
HWY_EXPORT(AddD);
HWY_EXPORT(ScaleInplaceF);
HWY_EXPORT(ScaleInplaceD);

void add_inplace(float* d, const float* s, std::int64_t n) { QAT_DISPATCH(AddInplaceF)(d, s, n); }
void add_inplace(double* d, const double* s, std::int64_t n) { QAT_DISPATCH(AddInplaceD)(d, s, n); }
void add(const float* a, const float* b, float* o, std::int64_t n) { QAT_DISPATCH(AddF)(a, b, o, n); }
void add(const double* a, const double* b, double* o, std::int64_t n) { QAT_DISPATCH(AddD)(a, b, o, n); }
void scale_inplace(float* d, float s, std::int64_t n) { QAT_DISPATCH(ScaleInplaceF)(d, s, n); }
void scale_inplace(double* d, double s, std::int64_t n) { QAT_DISPATCH(ScaleInplaceD)(d, s, n); }

}  // namespace qat::kernels
#endif  // HWY_ONCE
