// Optimizer step kernels, compiled once per instruction set (see tensor/simd.h): one fused pass
// each (SGD a plain loop that the compiler vectorises per target, Adam in Highway ops). Branches on the
// options are taken outside the loops (a lambda per case) so that every loop body is straight-line.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "framework/kernels/cpu/optim.cpp"
#include "framework/kernels/cpu/optim.h"

#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <cmath>

#include "framework/tensor/simd.h"

HWY_BEFORE_NAMESPACE();
namespace qat::kernels::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
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

// Highway ops rather than a plain loop: std::sqrt sets errno, so the compiler would not vectorise
// it. The last partial vector goes through a stack buffer and the same vector code, so every
// element is computed alike wherever a thread's range starts (bit-identical across thread counts).
template <class T, bool kL2, bool kDecoupled, bool kAmsgrad>
void adam_loop(i64 n, T* __restrict p, const T* __restrict gr, T* __restrict m, T* __restrict v,
               T* __restrict v_max, const AdamScalars<T> s) {
  const hn::ScalableTag<T> d;
  const i64 N = static_cast<i64>(hn::Lanes(d));
  const auto b1 = hn::Set(d, s.b1), b2 = hn::Set(d, s.b2), c1 = hn::Set(d, s.one_minus_b1),
             c2 = hn::Set(d, s.one_minus_b2), wd = hn::Set(d, s.wd), shrink = hn::Set(d, s.shrink),
             bc2 = hn::Set(d, s.bc2_sqrt), eps = hn::Set(d, s.eps), step = hn::Set(d, s.neg_step_size);
  auto update = [&](T* pp, const T* gp, T* mp, T* vp, T* vmp) {
    auto g = hn::LoadU(d, gp);
    auto pv = hn::LoadU(d, pp);
    if constexpr (kL2) g = hn::MulAdd(wd, pv, g);                                  // g + wd p
    if constexpr (kDecoupled) pv = hn::Mul(pv, shrink);                            // p (1 - lr wd)
    const auto mv = hn::MulAdd(c1, g, hn::Mul(hn::LoadU(d, mp), b1));              // b1 m + (1-b1) g
    const auto vv = hn::MulAdd(hn::Mul(c2, g), g, hn::Mul(hn::LoadU(d, vp), b2));  // b2 v + (1-b2) g^2
    hn::StoreU(mv, d, mp);
    hn::StoreU(vv, d, vp);
    auto second = vv;
    if constexpr (kAmsgrad) {
      const auto old = hn::LoadU(d, vmp);
      second = hn::IfThenElse(hn::Lt(old, vv), vv, old);  // std::max(v_max, v)
      hn::StoreU(second, d, vmp);
    }
    const auto denom = hn::Add(hn::Div(hn::Sqrt(second), bc2), eps);
    hn::StoreU(hn::Add(pv, hn::Div(hn::Mul(step, mv), denom)), d, pp);
  };
  i64 i = 0;
  for (; i + N <= n; i += N) update(p + i, gr + i, m + i, v + i, kAmsgrad ? v_max + i : nullptr);
  if (i == n) return;
  HWY_ALIGN T buf[5][hn::MaxLanes(d)] = {};  // p, g, m, v, v_max of the tail, zero-padded
  const i64 r = n - i;
  for (i64 k = 0; k < r; ++k) {
    buf[0][k] = p[i + k], buf[1][k] = gr[i + k], buf[2][k] = m[i + k], buf[3][k] = v[i + k];
    if constexpr (kAmsgrad) buf[4][k] = v_max[i + k];
  }
  update(buf[0], buf[1], buf[2], buf[3], buf[4]);
  for (i64 k = 0; k < r; ++k) {
    p[i + k] = buf[0][k], m[i + k] = buf[2][k], v[i + k] = buf[3][k];
    if constexpr (kAmsgrad) v_max[i + k] = buf[4][k];
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
