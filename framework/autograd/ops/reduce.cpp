// Reductions over all elements or one axis. A tensor reduced along `dim` is viewed as
// (outer, n, inner) with n = size(dim).
#include "framework/kernels/cpu/reduce.h"

#include <limits>

#include "framework/autograd/node.h"
#include "framework/autograd/ops.h"
#include "framework/kernels/cuda/kernels.h"
#include "framework/tensor/dispatch.h"

namespace qat {

using Grads = std::vector<Tensor>;
using Inputs = std::vector<Tensor>;

namespace {
struct AxisView {
  int dim;
  std::int64_t outer = 1, n = 1, inner = 1;
  Shape out_shape;
};

AxisView axis_view(const Tensor& x, int dim, bool keepdim, const char* fn) {
  require_float(x, fn, "x");
  AxisView v;
  v.dim = x.shape().axis(dim, fn);
  const Shape& s = x.shape();
  for (int i = 0; i < s.rank(); ++i) {
    if (i < v.dim) v.outer *= s[i];
    if (i > v.dim) v.inner *= s[i];
    if (i == v.dim) v.n = s[i];
    if (i != v.dim || keepdim) v.out_shape.push_back(i == v.dim ? 1 : s[i]);
  }
  return v;
}

// The CUDA sum over the axis: kept (outer, inner), reduced n.
kernels::cuda::ReduceDims cuda_dims(const AxisView& v) {
  kernels::cuda::ReduceDims d;
  d.kept_rank = 2;
  d.kept_size[0] = v.outer, d.kept_stride[0] = v.n * v.inner;
  d.kept_size[1] = v.inner, d.kept_stride[1] = 1;
  d.red_rank = 1;
  d.red_size[0] = v.n, d.red_stride[0] = v.inner;
  d.n_out = v.outer * v.inner;
  d.n_red = v.n;
  return d;
}

// g (reduced shape) broadcast back along the axis, times `scale`.
Tensor expand_along(const Tensor& g, const Shape& x_shape, const AxisView& v, double scale) {
  if (g.device() == Device::CUDA) {  // out[o, k, i] = g[o, i] * scale
    Tensor out = Tensor::empty(x_shape, g.dtype(), Device::CUDA);
    if (out.numel() == 0) return out;
    const Tensor s = Tensor::full(Shape{1}, scale, g.dtype(), Device::CUDA);
    kernels::cuda::BroadcastDims d;
    d.rank = 3;
    d.size[0] = v.outer, d.size[1] = v.n, d.size[2] = v.inner;
    d.sa[0] = v.inner, d.sa[1] = 0, d.sa[2] = 1;
    detail::dispatch_float(g.dtype(), "reduce_backward", [&]<class T>() {
      kernels::cuda::binary(kernels::BinaryOp::Mul, g.cuda_data<T>(), s.cuda_data<T>(),
                            out.cuda_data<T>(), d, out.numel());
    });
    return out;
  }
  Tensor out = Tensor::empty(x_shape, g.dtype());
  detail::dispatch_float(g.dtype(), "reduce_backward", [&]<class T>() {
    const T* pg = g.data<T>();
    T* po = out.data<T>();
    const T s = static_cast<T>(scale);
    for (std::int64_t o = 0; o < v.outer; ++o)
      for (std::int64_t k = 0; k < v.n; ++k)
        for (std::int64_t i = 0; i < v.inner; ++i)
          po[(o * v.n + k) * v.inner + i] = pg[o * v.inner + i] * s;
  });
  return out;
}

Tensor reduce_sum(const Tensor& x, const AxisView& v) {
  Tensor out = Tensor::zeros(v.out_shape, x.dtype());
  detail::dispatch_float(x.dtype(), "sum", [&]<class T>() {
    const T* px = x.data<T>();
    T* po = out.data<T>();
    for (std::int64_t o = 0; o < v.outer; ++o) {
      if (v.inner == 1) {  // a contiguous run, e.g. the whole tensor
        po[o] = kernels::sum(px + o * v.n, v.n);
        continue;
      }
      kernels::sum_rows(px + o * v.n * v.inner, v.n, v.inner, po + o * v.inner);
    }
  });
  return out;
}

AxisView whole(const Tensor& x, const char* fn) {
  require_float(x, fn, "x");
  AxisView v;
  v.dim = 0;
  v.n = x.numel();
  return v;  // out_shape: rank 0
}

// First index of the maximum along the axis (NaN counts as maximal, as in PyTorch).
Tensor argmax_impl(const Tensor& x, const AxisView& v) {
  QAT_REQUIRE(v.n > 0, "max", "cannot reduce an empty dimension of shape ", x.shape());
  if (x.device() == Device::CUDA) {
    Tensor idx = Tensor::empty(v.out_shape, DType::Int64, Device::CUDA);
    detail::dispatch_float(x.dtype(), "argmax", [&]<class T>() {
      kernels::cuda::argmax(x.cuda_data<T>(), idx.cuda_data<std::int64_t>(), static_cast<T*>(nullptr),
                            v.outer, v.n, v.inner);
    });
    return idx;
  }
  Tensor idx = Tensor::empty(v.out_shape, DType::Int64);
  detail::dispatch_float(x.dtype(), "argmax", [&]<class T>() {
    const T* px = x.data<T>();
    std::int64_t* pi = idx.data<std::int64_t>();
    for (std::int64_t o = 0; o < v.outer; ++o)
      for (std::int64_t i = 0; i < v.inner; ++i) {
        std::int64_t best = 0;
        T bv = px[o * v.n * v.inner + i];
        for (std::int64_t k = 1; k < v.n && bv == bv; ++k) {
          const T cand = px[(o * v.n + k) * v.inner + i];
          if (cand > bv || cand != cand) best = k, bv = cand;
        }
        pi[o * v.inner + i] = best;
      }
  });
  return idx;
}

// On CUDA: out and the argmax from one kernel;  dx = g put at the argmax (kernels::cuda::put_along)
Tensor max_cuda(const Tensor& x, const AxisView& v, const char* name) {
  QAT_REQUIRE(v.n > 0, name, "cannot reduce an empty dimension of shape ", x.shape());
  Tensor idx = Tensor::empty(v.out_shape, DType::Int64, Device::CUDA);
  Tensor out = Tensor::empty(v.out_shape, x.dtype(), Device::CUDA);
  detail::dispatch_float(x.dtype(), name, [&]<class T>() {
    kernels::cuda::argmax(x.cuda_data<T>(), idx.cuda_data<std::int64_t>(), out.cuda_data<T>(), v.outer,
                          v.n, v.inner);
  });
  autograd::record(out, name, {x}, [v, idx](const Tensor& g, const Inputs& in, Grads& gi) {
    common_device("max_backward", {{"grad", &g}, {"x", &in[0]}});
    gi[0] = Tensor::zeros(in[0].shape(), g.dtype(), Device::CUDA);
    detail::dispatch_float(g.dtype(), "max_backward", [&]<class T>() {
      kernels::cuda::put_along(g.cuda_data<T>(), idx.cuda_data<std::int64_t>(), gi[0].cuda_data<T>(),
                               v.outer, v.n, v.inner);
    });
  });
  return out;
}

Tensor max_impl(const Tensor& x, const AxisView& v, const char* name) {
  if (x.device() == Device::CUDA) return max_cuda(x, v, name);
  Tensor idx = argmax_impl(x, v);
  Tensor out = Tensor::empty(v.out_shape, x.dtype());
  detail::dispatch_float(x.dtype(), name, [&]<class T>() {
    const T* px = x.data<T>();
    const std::int64_t* pi = idx.data<std::int64_t>();
    T* po = out.data<T>();
    for (std::int64_t o = 0; o < v.outer; ++o)
      for (std::int64_t i = 0; i < v.inner; ++i)
        po[o * v.inner + i] = px[(o * v.n + pi[o * v.inner + i]) * v.inner + i];
  });
  // dx = g at the first argmax, 0 elsewhere
  autograd::record(out, name, {x}, [v, idx](const Tensor& g, const Inputs& in, Grads& gi) {
    gi[0] = Tensor::zeros(in[0].shape(), g.dtype());
    detail::dispatch_float(g.dtype(), "max_backward", [&]<class T>() {
      const T* pg = g.data<T>();
      const std::int64_t* pi = idx.data<std::int64_t>();
      T* pd = gi[0].data<T>();
      for (std::int64_t o = 0; o < v.outer; ++o)
        for (std::int64_t i = 0; i < v.inner; ++i)
          pd[(o * v.n + pi[o * v.inner + i]) * v.inner + i] = pg[o * v.inner + i];
    });
  });
  return out;
}

Tensor sum_impl(const Tensor& x, const AxisView& v, double scale, const char* name) {
  Tensor out;
  if (x.device() == Device::CUDA) {  // scale applied in the kernel, in double as below
    out = Tensor::zeros(v.out_shape, x.dtype(), Device::CUDA);
    detail::dispatch_float(x.dtype(), name, [&]<class T>() {
      if (out.numel() > 0) kernels::cuda::sum(x.cuda_data<T>(), out.cuda_data<T>(), cuda_dims(v), scale);
    });
  } else {
    out = reduce_sum(x, v);
  }
  if (scale != 1.0 && x.device() == Device::CPU) {
    detail::dispatch_float(out.dtype(), name, [&]<class T>() {
      T* p = out.data<T>();
      for (std::int64_t i = 0; i < out.numel(); ++i) p[i] = static_cast<T>(p[i] * scale);
    });
  }
  // dx = g * scale broadcast along the reduced axis
  autograd::record(out, name, {x}, [v, scale](const Tensor& g, const Inputs& in, Grads& gi) {
    gi[0] = expand_along(g, in[0].shape(), v, scale);
  });
  return out;
}
}  // namespace

Tensor sum(const Tensor& x) { return sum_impl(x, whole(x, "sum"), 1.0, "sum"); }

Tensor sum(const Tensor& x, int dim, bool keepdim) {
  return sum_impl(x, axis_view(x, dim, keepdim, "sum"), 1.0, "sum");
}

Tensor mean(const Tensor& x) {
  QAT_REQUIRE(x.numel() > 0, "mean", "mean of an empty tensor of shape ", x.shape());
  return sum_impl(x, whole(x, "mean"), 1.0 / static_cast<double>(x.numel()), "mean");
}

Tensor mean(const Tensor& x, int dim, bool keepdim) {
  const AxisView v = axis_view(x, dim, keepdim, "mean");
  QAT_REQUIRE(v.n > 0, "mean", "mean over an empty dimension of shape ", x.shape());
  return sum_impl(x, v, 1.0 / static_cast<double>(v.n), "mean");
}

Tensor max(const Tensor& x) { return max_impl(x, whole(x, "max"), "max"); }

Tensor max(const Tensor& x, int dim, bool keepdim) {
  return max_impl(x, axis_view(x, dim, keepdim, "max"), "max");
}

Tensor argmax(const Tensor& x, int dim) { return argmax_impl(x, axis_view(x, dim, false, "argmax")); }

}  // namespace qat
