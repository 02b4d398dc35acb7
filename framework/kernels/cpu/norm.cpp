// Batch-norm kernels, compiled once per instruction set (see tensor/simd.h). The channel sums
// use Highway vectors of doubles with a fixed order; the elementwise passes are plain loops that
// the compiler vectorises per target.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "framework/kernels/cpu/norm.cpp"
#include "framework/kernels/cpu/norm.h"

#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include "framework/tensor/simd.h"

HWY_BEFORE_NAMESPACE();
namespace qat::kernels::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using i64 = std::int64_t;
constexpr i64 L = 16;  // partial sums: enough independent chains to hide the add latency

// Two sums over the channel's elements, u = x - m and v = g (kGrad) or u:  s1 = sum v,
// s2 = sum v u. Lane l of each full block of L = 16 in a run goes to partial sum l (held in K
// vectors of doubles, lane k*N + l of the block in lane l of vector k), the rest of the run to
// the tail; then tail + sum_l partial[l], in order. So the order is that of a scalar loop with 16
// partial sums, whatever the vector width.
template <bool kGrad, class T>
void two_sums(const T* __restrict g, const T* __restrict x, i64 N, i64 S, i64 stride, double m,
              double* s1, double* s2) {
  const hn::ScalableTag<double> dd;
  const hn::Rebind<T, decltype(dd)> dt;
  constexpr i64 Nd = static_cast<i64>(hn::MaxLanes(dd)), K = L / Nd;
  static_assert(K * Nd == L, "the L partial sums must fill whole vectors");
  auto load = [&](const T* p) {
    if constexpr (sizeof(T) == sizeof(double)) {
      return hn::LoadU(dd, p);
    } else {
      return hn::PromoteTo(dd, hn::LoadU(dt, p));
    }
  };
  hn::Vec<decltype(dd)> a1[K], a2[K];
  for (i64 k = 0; k < K; ++k) a1[k] = a2[k] = hn::Zero(dd);
  const auto mv = hn::Set(dd, m);
  double t1 = 0, t2 = 0;
  for (i64 n = 0; n < N; ++n) {
    const T* xp = x + n * stride;
    const T* gp = kGrad ? g + n * stride : nullptr;
    i64 i = 0;
    for (; i + L <= S; i += L)
      for (i64 k = 0; k < K; ++k) {
        const auto u = hn::Sub(load(xp + i + k * Nd), mv);
        const auto v = kGrad ? load(gp + i + k * Nd) : u;
        a1[k] = hn::Add(a1[k], v);
        a2[k] = hn::MulAdd(v, u, a2[k]);
      }
    for (; i < S; ++i) {
      const double u = double(xp[i]) - m, v = kGrad ? double(gp[i]) : u;
      t1 += v;
      t2 += v * u;
    }
  }
  HWY_ALIGN double p1[L], p2[L];
  for (i64 k = 0; k < K; ++k) {
    hn::Store(a1[k], dd, p1 + k * Nd);
    hn::Store(a2[k], dd, p2 + k * Nd);
  }
  for (i64 l = 0; l < L; ++l) t1 += p1[l], t2 += p2[l];
  *s1 = t1;
  *s2 = t2;
}

template <class T>
void affine_t(const T* __restrict x, T* __restrict y, i64 N, i64 S, i64 stride, T a, T b) {
  for (i64 n = 0; n < N; ++n)
    for (i64 i = n * stride, end = i + S; i < end; ++i) y[i] = x[i] * a + b;
}
// in T, as PyTorch's CPU kernel computes it
template <class T>
void backward_t(const T* __restrict g, const T* __restrict x, T* __restrict d, i64 N, i64 S, i64 stride,
                double k, double mg, double kx, double m) {
  const T kt = static_cast<T>(k), mgt = static_cast<T>(mg), kxt = static_cast<T>(kx),
          mt = static_cast<T>(m);
  for (i64 n = 0; n < N; ++n)
    for (i64 i = n * stride, end = i + S; i < end; ++i) d[i] = kt * (g[i] - mgt) - kxt * (x[i] - mt);
}

void MomentsF(const float* x, i64 N, i64 S, i64 st, double m, double* s1, double* s2) {
  two_sums<false>(x, x, N, S, st, m, s1, s2);
}
void MomentsD(const double* x, i64 N, i64 S, i64 st, double m, double* s1, double* s2) {
  two_sums<false>(x, x, N, S, st, m, s1, s2);
}
void GradSumsF(const float* g, const float* x, i64 N, i64 S, i64 st, double m, double* a, double* b) {
  two_sums<true>(g, x, N, S, st, m, a, b);
}
void GradSumsD(const double* g, const double* x, i64 N, i64 S, i64 st, double m, double* a, double* b) {
  two_sums<true>(g, x, N, S, st, m, a, b);
}
void AffineF(const float* x, float* y, i64 N, i64 S, i64 st, float a, float b) {
  affine_t(x, y, N, S, st, a, b);
}
void AffineD(const double* x, double* y, i64 N, i64 S, i64 st, double a, double b) {
  affine_t(x, y, N, S, st, a, b);
}
void BackwardF(const float* g, const float* x, float* d, i64 N, i64 S, i64 st, double k, double mg,
               double kx, double m) {
  backward_t(g, x, d, N, S, st, k, mg, kx, m);
}
void BackwardD(const double* g, const double* x, double* d, i64 N, i64 S, i64 st, double k, double mg,
               double kx, double m) {
  backward_t(g, x, d, N, S, st, k, mg, kx, m);
}

}  // namespace qat::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace qat::kernels {
using i64 = std::int64_t;

HWY_EXPORT(MomentsF);
HWY_EXPORT(MomentsD);
HWY_EXPORT(GradSumsF);
HWY_EXPORT(GradSumsD);
HWY_EXPORT(AffineF);
HWY_EXPORT(AffineD);
HWY_EXPORT(BackwardF);
HWY_EXPORT(BackwardD);

void channel_moments(const float* x, i64 N, i64 S, i64 st, double m, double* s1, double* s2) {
  QAT_DISPATCH(MomentsF)(x, N, S, st, m, s1, s2);
}
void channel_moments(const double* x, i64 N, i64 S, i64 st, double m, double* s1, double* s2) {
  QAT_DISPATCH(MomentsD)(x, N, S, st, m, s1, s2);
}
void channel_grad_sums(const float* g, const float* x, i64 N, i64 S, i64 st, double m, double* sg,
                       double* sgx) {
  QAT_DISPATCH(GradSumsF)(g, x, N, S, st, m, sg, sgx);
}
void channel_grad_sums(const double* g, const double* x, i64 N, i64 S, i64 st, double m, double* sg,
                       double* sgx) {
  QAT_DISPATCH(GradSumsD)(g, x, N, S, st, m, sg, sgx);
}
void channel_affine(const float* x, float* y, i64 N, i64 S, i64 st, float a, float b) {
  QAT_DISPATCH(AffineF)(x, y, N, S, st, a, b);
}
void channel_affine(const double* x, double* y, i64 N, i64 S, i64 st, double a, double b) {
  QAT_DISPATCH(AffineD)(x, y, N, S, st, a, b);
}
void channel_backward(const float* g, const float* x, float* d, i64 N, i64 S, i64 st, double k,
                      double mg, double kx, double m) {
  QAT_DISPATCH(BackwardF)(g, x, d, N, S, st, k, mg, kx, m);
}
void channel_backward(const double* g, const double* x, double* d, i64 N, i64 S, i64 st, double k,
                      double mg, double kx, double m) {
  QAT_DISPATCH(BackwardD)(g, x, d, N, S, st, k, mg, kx, m);
}

}  // namespace qat::kernels
#endif  // HWY_ONCE
