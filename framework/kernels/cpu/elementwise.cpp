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
using i64 = std::int64_t;

template <class T>
void add_inplace_t(T* __restrict dst, const T* __restrict src, i64 n) {
  for (i64 i = 0; i < n; ++i) dst[i] += src[i];
}
template <class T>
void add_t(const T* __restrict a, const T* __restrict b, T* __restrict out, i64 n) {
  for (i64 i = 0; i < n; ++i) out[i] = a[i] + b[i];
}
template <class T>
void scale_inplace_t(T* __restrict dst, T s, i64 n) {
  for (i64 i = 0; i < n; ++i) dst[i] *= s;
}

// o[i] = f(a[i * sa], b[i * sb]), each stride case its own vectorised loop.
template <class T, class F>
inline void binary_run(const T* __restrict a, i64 sa, const T* __restrict b, i64 sb, T* __restrict o,
                       i64 n, F f) {
  if (sa == 1 && sb == 1) {
    for (i64 i = 0; i < n; ++i) o[i] = f(a[i], b[i]);
  } else if (sa == 1 && sb == 0) {
    const T y = *b;
    for (i64 i = 0; i < n; ++i) o[i] = f(a[i], y);
  } else if (sa == 0 && sb == 1) {
    const T x = *a;
    for (i64 i = 0; i < n; ++i) o[i] = f(x, b[i]);
  } else {
    for (i64 i = 0; i < n; ++i) o[i] = f(a[i * sa], b[i * sb]);
  }
}
template <class T>
void binary_t(BinaryOp op, const T* a, i64 sa, const T* b, i64 sb, T* o, i64 n) {
  switch (op) {
    case BinaryOp::Add:
      return binary_run(a, sa, b, sb, o, n, [](T x, T y) { return x + y; });
    case BinaryOp::Sub:
      return binary_run(a, sa, b, sb, o, n, [](T x, T y) { return x - y; });
    case BinaryOp::Mul:
      return binary_run(a, sa, b, sb, o, n, [](T x, T y) { return x * y; });
    case BinaryOp::Div:
      return binary_run(a, sa, b, sb, o, n, [](T x, T y) { return x / y; });
  }
}

template <class T>
void relu_t(const T* __restrict x, T* __restrict y, i64 n) {
  for (i64 i = 0; i < n; ++i) {
    const T v = x[i];
    y[i] = v > 0 ? v : T(0);
  }
}
template <class T>
void relu_backward_t(const T* __restrict g, const T* __restrict x, T* __restrict d, i64 n) {
  for (i64 i = 0; i < n; ++i) {
    const T gi = g[i];  // loaded unconditionally: a select, not a masked load
    d[i] = x[i] > 0 ? gi : T(0);
  }
}

// out = byte / 255, a correctly rounded division (as torchvision's ToTensor; byte * (1 / 255.f)
// would differ in the last bit for some bytes), vectorised as a division of the widened bytes.
void UnitFromBytes(const std::uint8_t* __restrict px, float* __restrict out, i64 n) {
  for (i64 i = 0; i < n; ++i) out[i] = static_cast<float>(px[i]) / 255.0f;
}

void AddInplaceF(float* d, const float* s, i64 n) { add_inplace_t(d, s, n); }
void AddInplaceD(double* d, const double* s, i64 n) { add_inplace_t(d, s, n); }
void AddF(const float* a, const float* b, float* o, i64 n) { add_t(a, b, o, n); }
void AddD(const double* a, const double* b, double* o, i64 n) { add_t(a, b, o, n); }
void ScaleInplaceF(float* d, float s, i64 n) { scale_inplace_t(d, s, n); }
void ScaleInplaceD(double* d, double s, i64 n) { scale_inplace_t(d, s, n); }
void BinaryF(BinaryOp op, const float* a, i64 sa, const float* b, i64 sb, float* o, i64 n) {
  binary_t(op, a, sa, b, sb, o, n);
}
void BinaryD(BinaryOp op, const double* a, i64 sa, const double* b, i64 sb, double* o, i64 n) {
  binary_t(op, a, sa, b, sb, o, n);
}
void ReluF(const float* x, float* y, i64 n) { relu_t(x, y, n); }
void ReluD(const double* x, double* y, i64 n) { relu_t(x, y, n); }
void ReluBackwardF(const float* g, const float* x, float* d, i64 n) { relu_backward_t(g, x, d, n); }
void ReluBackwardD(const double* g, const double* x, double* d, i64 n) { relu_backward_t(g, x, d, n); }

}  // namespace qat::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace qat::kernels {
using i64 = std::int64_t;

HWY_EXPORT(UnitFromBytes);
HWY_EXPORT(AddInplaceF);
HWY_EXPORT(AddInplaceD);
HWY_EXPORT(AddF);
HWY_EXPORT(AddD);
HWY_EXPORT(ScaleInplaceF);
HWY_EXPORT(ScaleInplaceD);
HWY_EXPORT(BinaryF);
HWY_EXPORT(BinaryD);
HWY_EXPORT(ReluF);
HWY_EXPORT(ReluD);
HWY_EXPORT(ReluBackwardF);
HWY_EXPORT(ReluBackwardD);

void unit_from_bytes(const std::uint8_t* px, float* out, i64 n) {
  QAT_DISPATCH(UnitFromBytes)(px, out, n);
}
void add_inplace(float* d, const float* s, i64 n) { QAT_DISPATCH(AddInplaceF)(d, s, n); }
void add_inplace(double* d, const double* s, i64 n) { QAT_DISPATCH(AddInplaceD)(d, s, n); }
void add(const float* a, const float* b, float* o, i64 n) { QAT_DISPATCH(AddF)(a, b, o, n); }
void add(const double* a, const double* b, double* o, i64 n) { QAT_DISPATCH(AddD)(a, b, o, n); }
void scale_inplace(float* d, float s, i64 n) { QAT_DISPATCH(ScaleInplaceF)(d, s, n); }
void scale_inplace(double* d, double s, i64 n) { QAT_DISPATCH(ScaleInplaceD)(d, s, n); }
void binary(BinaryOp op, const float* a, i64 sa, const float* b, i64 sb, float* o, i64 n) {
  QAT_DISPATCH(BinaryF)(op, a, sa, b, sb, o, n);
}
void binary(BinaryOp op, const double* a, i64 sa, const double* b, i64 sb, double* o, i64 n) {
  QAT_DISPATCH(BinaryD)(op, a, sa, b, sb, o, n);
}
void relu(const float* x, float* y, i64 n) { QAT_DISPATCH(ReluF)(x, y, n); }
void relu(const double* x, double* y, i64 n) { QAT_DISPATCH(ReluD)(x, y, n); }
void relu_backward(const float* g, const float* x, float* d, i64 n) {
  QAT_DISPATCH(ReluBackwardF)(g, x, d, n);
}
void relu_backward(const double* g, const double* x, double* d, i64 n) {
  QAT_DISPATCH(ReluBackwardD)(g, x, d, n);
}

}  // namespace qat::kernels
#endif  // HWY_ONCE
