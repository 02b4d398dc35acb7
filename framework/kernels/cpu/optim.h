#pragma once
// Internal: optimizer step kernels on raw parameter arrays, runtime-dispatched (tensor/simd.h).
// Scalars are rounded to T by the caller and the operations happen in PyTorch's order, so
// float32 results match PyTorch 1.13 to the last bit or so.
#include <cstdint>

namespace qat::kernels {

template <class T>
struct SgdScalars {
  T wd, momentum, keep, neg_lr;  // keep = 1 - dampening
  bool decay, first, nesterov;
};

/// torch.optim.SGD:  g' = g + wd*p (if decay);  b = first ? g' : momentum*b + keep*g' (buf
/// non-null);  d = nesterov ? g' + momentum*b : b (or g' without momentum);  p = p + neg_lr*d
void sgd_step(std::int64_t n, float* p, const float* g, float* buf, const SgdScalars<float>& s);
void sgd_step(std::int64_t n, double* p, const double* g, double* buf, const SgdScalars<double>& s);

template <class T>
struct AdamScalars {
  T b1, b2, one_minus_b1, one_minus_b2, wd, shrink, bc2_sqrt, eps, neg_step_size;
  bool l2, decoupled;
};

/// torch.optim.Adam / AdamW:  g' = g + wd*p (l2) or p *= shrink (decoupled);  m = b1*m + (1-b1)*g';
/// v = b2*v + (1-b2)*g'^2 (v_max = max(v_max, v) with v_max non-null);
/// p += neg_step_size * m / (sqrt(v)/bc2_sqrt + eps)
void adam_step(std::int64_t n, float* p, const float* g, float* m, float* v, float* v_max,
               const AdamScalars<float>& s);
void adam_step(std::int64_t n, double* p, const double* g, double* m, double* v, double* v_max,
               const AdamScalars<double>& s);

}  // namespace qat::kernels
