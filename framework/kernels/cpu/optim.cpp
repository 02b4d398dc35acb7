// Optimizer step kernels, compiled once per instruction set (see tensor/simd.h): one fused pass
// each, plain loops that the compiler vectorises per target. Branches on the options are taken
// outside the loops (a lambda per case) so that every loop body is straight-line.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "framework/kernels/cpu/optim.cpp"
#include "framework/kernels/cpu/optim.h"

#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <cmath>

#include "framework/tensor/simd.h"

HWY_BEFORE_NAMESPACE();
namespace qat::kernels::HWY_NAMESPACE {
using i64 = std::int64_t;

template <class T, bool kDecay, bool kMomentum, bool kFirst, bool kNesterov>
void sgd_loop(i64 n, T* __restrict p, const T* __restrict g, T* __restrict buf, const SgdScalars<T> s) {
  for (i64 i = 0; i < n; ++i) {
    T d = g[i];
    if constexpr (kDecay) d = d + s.wd * p[i];
    if constexpr (kMomentum) {
      const T b = kFirst ? d : buf[i] * s.momentum + s.keep * d;
      buf[i] = b;
      d = kNesterov ? d + s.momentum * b : b;
    }
    p[i] = p[i] + s.neg_lr * d;
  }
}

template <class T, bool kDecay>
void sgd_t(i64 n, T* p, const T* g, T* buf, const SgdScalars<T>& s) {
  if (buf == nullptr) return sgd_loop<T, kDecay, false, false, false>(n, p, g, buf, s);
  if (s.first) {
    return s.nesterov ? sgd_loop<T, kDecay, true, true, true>(n, p, g, buf, s)
                      : sgd_loop<T, kDecay, true, true, false>(n, p, g, buf, s);
  }
  return s.nesterov ? sgd_loop<T, kDecay, true, false, true>(n, p, g, buf, s)
                    : sgd_loop<T, kDecay, true, false, false>(n, p, g, buf, s);
}

template <class T, bool kL2, bool kDecoupled, bool kAmsgrad>
void adam_loop(i64 n, T* __restrict p, const T* __restrict gr, T* __restrict m, T* __restrict v,
               T* __restrict v_max, const AdamScalars<T> s) {
  for (i64 i = 0; i < n; ++i) {
    T g = gr[i];
    if constexpr (kL2) g = g + s.wd * p[i];
    T pi = p[i];
    if constexpr (kDecoupled) pi = pi * s.shrink;
    const T mi = m[i] * s.b1 + s.one_minus_b1 * g;
    const T vi = v[i] * s.b2 + s.one_minus_b2 * g * g;
    m[i] = mi;
    v[i] = vi;
    T second = vi;
    if constexpr (kAmsgrad) {
      second = v_max[i] < vi ? vi : v_max[i];  // std::max(v_max, v)
      v_max[i] = second;
    }
    const T denom = std::sqrt(second) / s.bc2_sqrt + s.eps;
    p[i] = pi + s.neg_step_size * mi / denom;
  }
}

template <class T>
void adam_t(i64 n, T* p, const T* g, T* m, T* v, T* v_max, const AdamScalars<T>& s) {
  const bool ams = v_max != nullptr;
  if (s.decoupled) {
    return ams ? adam_loop<T, false, true, true>(n, p, g, m, v, v_max, s)
               : adam_loop<T, false, true, false>(n, p, g, m, v, v_max, s);
  }
  if (s.l2) {
    return ams ? adam_loop<T, true, false, true>(n, p, g, m, v, v_max, s)
               : adam_loop<T, true, false, false>(n, p, g, m, v, v_max, s);
  }
  return ams ? adam_loop<T, false, false, true>(n, p, g, m, v, v_max, s)
             : adam_loop<T, false, false, false>(n, p, g, m, v, v_max, s);
}

void SgdF(i64 n, float* p, const float* g, float* b, const SgdScalars<float>& s) {
  s.decay ? sgd_t<float, true>(n, p, g, b, s) : sgd_t<float, false>(n, p, g, b, s);
}
void SgdD(i64 n, double* p, const double* g, double* b, const SgdScalars<double>& s) {
  s.decay ? sgd_t<double, true>(n, p, g, b, s) : sgd_t<double, false>(n, p, g, b, s);
}
void AdamF(i64 n, float* p, const float* g, float* m, float* v, float* vm, const AdamScalars<float>& s) {
  adam_t(n, p, g, m, v, vm, s);
}
void AdamD(i64 n, double* p, const double* g, double* m, double* v, double* vm,
           const AdamScalars<double>& s) {
  adam_t(n, p, g, m, v, vm, s);
}

}  // namespace qat::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace qat::kernels {
using i64 = std::int64_t;

HWY_EXPORT(SgdF);
HWY_EXPORT(SgdD);
HWY_EXPORT(AdamF);
HWY_EXPORT(AdamD);

void sgd_step(i64 n, float* p, const float* g, float* b, const SgdScalars<float>& s) {
  QAT_DISPATCH(SgdF)(n, p, g, b, s);
}
void sgd_step(i64 n, double* p, const double* g, double* b, const SgdScalars<double>& s) {
  QAT_DISPATCH(SgdD)(n, p, g, b, s);
}
void adam_step(i64 n, float* p, const float* g, float* m, float* v, float* vm,
               const AdamScalars<float>& s) {
  QAT_DISPATCH(AdamF)(n, p, g, m, v, vm, s);
}
void adam_step(i64 n, double* p, const double* g, double* m, double* v, double* vm,
               const AdamScalars<double>& s) {
  QAT_DISPATCH(AdamD)(n, p, g, m, v, vm, s);
}

}  // namespace qat::kernels
#endif  // HWY_ONCE
