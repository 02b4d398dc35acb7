#pragma once
// Internal: one-pass elementwise maps used by the pointwise ops and their backward functions.
#include "framework/kernels/cuda/kernels.h"
#include "framework/tensor/dispatch.h"
#include "framework/tensor/parallel.h"
#include "framework/tensor/tensor.h"

namespace qat::detail {

/// elements below which threads cost more than they save (each element is computed alone, so
/// the split never changes a result)
constexpr std::int64_t kMapParallelMin = 1 << 16;

/// out[i] = f(x[i]) (CPU only: a CUDA tensor throws "<fn>: not implemented on CUDA yet")
template <class F>
Tensor map(const Tensor& x, const char* fn, F f) {
  require_float(x, fn, "x");
  require_cpu(fn, {{"x", &x}});
  Tensor out = Tensor::empty(x.shape(), x.dtype());
  dispatch_float(x.dtype(), fn, [&]<class T>() {
    const T* px = x.data<T>();
    T* po = out.data<T>();
    parallel_for(x.numel(), kMapParallelMin, [&](std::int64_t b, std::int64_t e) {
      for (std::int64_t i = b; i < e; ++i) po[i] = f(px[i]);
    });
  });
  return out;
}

/// out[i] = f(a[i], b[i]) for same-shape tensors (e.g. gradient and saved activation).
template <class F>
Tensor map2(const Tensor& a, const Tensor& b, const char* fn, F f) {
  QAT_CHECK(a.shape() == b.shape() && a.dtype() == b.dtype(), fn);
  require_cpu(fn, {{"a", &a}, {"b", &b}});
  Tensor out = Tensor::empty(a.shape(), a.dtype());
  dispatch_float(a.dtype(), fn, [&]<class T>() {
    const T* pa = a.data<T>();
    const T* pb = b.data<T>();
    T* po = out.data<T>();
    parallel_for(a.numel(), kMapParallelMin, [&](std::int64_t b, std::int64_t e) {
      for (std::int64_t i = b; i < e; ++i) po[i] = f(pa[i], pb[i]);
    });
  });
  return out;
}

/// out[i] = f(x[i]) on the CPU, the CUDA kernel `op` with scalar s on CUDA (the same float ops).
template <class F>
Tensor scalar_map(const Tensor& x, const char* fn, kernels::cuda::UnaryOp op, double s, F f) {
  if (!x.defined() || x.device() == Device::CPU) return map(x, fn, f);
  require_float(x, fn, "x");
  Tensor out = Tensor::empty(x.shape(), x.dtype(), x.device());
  dispatch_float(x.dtype(), fn, [&]<class T>() {
    kernels::cuda::unary(op, x.cuda_data<T>(), out.cuda_data<T>(), x.numel(), s);
  });
  return out;
}

/// The backward of a pointwise op from the gradient g and a saved tensor s: f(g[i], s[i]) on the
/// CPU, the CUDA kernel `op` (the same float ops) on CUDA.
template <class F>
Tensor grad_map(const Tensor& g, const Tensor& s, const char* fn, kernels::cuda::GradOp op, F f) {
  if (common_device(fn, {{"grad", &g}, {"saved", &s}}) == Device::CPU) return map2(g, s, fn, f);
  QAT_CHECK(g.shape() == s.shape() && g.dtype() == s.dtype(), fn);
  Tensor out = Tensor::empty(g.shape(), g.dtype(), Device::CUDA);
  dispatch_float(g.dtype(), fn, [&]<class T>() {
    kernels::cuda::unary_backward(op, g.cuda_data<T>(), s.cuda_data<T>(), out.cuda_data<T>(), g.numel());
  });
  return out;
}

}  // namespace qat::detail
