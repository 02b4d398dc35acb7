// Pointwise nonlinearities: forward and backward side by side, on the CPU or CUDA (clamp: CPU).
#include <algorithm>
#include <cmath>

#include "framework/autograd/node.h"
#include "framework/autograd/ops.h"
#include "framework/autograd/ops/pointwise.h"
#include "framework/kernels/cpu/elementwise.h"
#include "framework/tensor/parallel.h"

namespace qat {

using Grads = std::vector<Tensor>;
using Inputs = std::vector<Tensor>;
using i64 = std::int64_t;
constexpr i64 kParallelMin = 1 << 16;  // elements below which threads cost more than they save

// relu(x) = max(x, 0);  dx = g * [x > 0]
Tensor relu(const Tensor& x) {
  require_float(x, "relu", "x");
  Tensor out = Tensor::empty(x.shape(), x.dtype(), x.device());
  detail::dispatch_float(x.dtype(), "relu", [&]<class T>() {
    if (x.device() == Device::CUDA)
      return kernels::cuda::unary(kernels::cuda::UnaryOp::Relu, x.cuda_data<T>(), out.cuda_data<T>(),
                                  x.numel(), 0.0);
    const T* px = x.data<T>();
    T* po = out.data<T>();
    parallel_for(x.numel(), kParallelMin, [&](i64 b, i64 e) { kernels::relu(px + b, po + b, e - b); });
  });
  autograd::record(out, "relu", {x}, [](const Tensor& g, const Inputs& in, Grads& gi) {
    QAT_CHECK(g.shape() == in[0].shape() && g.dtype() == in[0].dtype(), "relu_backward");
    const Device device = common_device("relu_backward", {{"grad", &g}, {"x", &in[0]}});
    gi[0] = Tensor::empty(g.shape(), g.dtype(), device);
    detail::dispatch_float(g.dtype(), "relu_backward", [&]<class T>() {
      if (device == Device::CUDA)
        return kernels::cuda::relu_backward(g.cuda_data<T>(), in[0].cuda_data<T>(), gi[0].cuda_data<T>(),
                                            g.numel());
      const T* pg = g.data<T>();
      const T* px = in[0].data<T>();
      T* pd = gi[0].data<T>();
      parallel_for(g.numel(), kParallelMin,
                   [&](i64 b, i64 e) { kernels::relu_backward(pg + b, px + b, pd + b, e - b); });
    });
  });
  return out;
}

// y = 1 / (1 + e^-x);  dx = g * y * (1 - y)
Tensor sigmoid(const Tensor& x) {
  Tensor out = detail::scalar_map(x, "sigmoid", kernels::cuda::UnaryOp::Sigmoid, 0,
                                  [](auto v) { return 1 / (1 + std::exp(-v)); });
  autograd::record(out, "sigmoid", {x}, [y = out.detach()](const Tensor& g, const Inputs&, Grads& gi) {
    gi[0] = detail::grad_map(g, y, "sigmoid_backward", kernels::cuda::GradOp::Sigmoid,
                             [](auto gv, auto yv) { return gv * yv * (1 - yv); });
  });
  return out;
}

// y = tanh(x);  dx = g * (1 - y^2)
Tensor tanh(const Tensor& x) {
  Tensor out = detail::scalar_map(x, "tanh", kernels::cuda::UnaryOp::Tanh, 0,
                                  [](auto v) { return std::tanh(v); });
  autograd::record(out, "tanh", {x}, [y = out.detach()](const Tensor& g, const Inputs&, Grads& gi) {
    gi[0] = detail::grad_map(g, y, "tanh_backward", kernels::cuda::GradOp::Tanh,
                             [](auto gv, auto yv) { return gv * (1 - yv * yv); });
  });
  return out;
}

// y = e^x;  dx = g * y
Tensor exp(const Tensor& x) {
  Tensor out =
      detail::scalar_map(x, "exp", kernels::cuda::UnaryOp::Exp, 0, [](auto v) { return std::exp(v); });
  autograd::record(out, "exp", {x}, [y = out.detach()](const Tensor& g, const Inputs&, Grads& gi) {
    gi[0] = detail::grad_map(g, y, "exp_backward", kernels::cuda::GradOp::Exp,
                             [](auto gv, auto yv) { return gv * yv; });
  });
  return out;
}

// y = ln x;  dx = g / x
Tensor log(const Tensor& x) {
  Tensor out =
      detail::scalar_map(x, "log", kernels::cuda::UnaryOp::Log, 0, [](auto v) { return std::log(v); });
  autograd::record(out, "log", {x}, [](const Tensor& g, const Inputs& in, Grads& gi) {
    gi[0] = detail::grad_map(g, in[0], "log_backward", kernels::cuda::GradOp::Log,
                             [](auto gv, auto xv) { return gv / xv; });
  });
  return out;
}

// y = min(max(x, lo), hi);  dx = g * [lo <= x <= hi]  (PyTorch's convention at the bounds)
Tensor clamp(const Tensor& x, double lo, double hi) {
  QAT_REQUIRE(lo <= hi, "clamp", "lo (", lo, ") must not exceed hi (", hi, ")");
  Tensor out = detail::map(x, "clamp", [lo, hi](auto v) {
    using T = decltype(v);
    return std::min(std::max(v, static_cast<T>(lo)), static_cast<T>(hi));
  });
  autograd::record(out, "clamp", {x}, [lo, hi](const Tensor& g, const Inputs& in, Grads& gi) {
    gi[0] = detail::map2(g, in[0], "clamp_backward", [lo, hi](auto gv, auto xv) {
      using T = decltype(gv);
      return (xv >= static_cast<T>(lo) && xv <= static_cast<T>(hi)) ? gv : T(0);
    });
  });
  return out;
}

}  // namespace qat
