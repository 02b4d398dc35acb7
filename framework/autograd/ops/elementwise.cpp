// Elementwise arithmetic with NumPy broadcasting. Broadcast forward passes go through xtensor
// adaptors over the tensors' buffers; same-shape inputs take a plain loop.
#include <array>
#include <cmath>

#include <xtensor/xadapt.hpp>
#include <xtensor/xarray.hpp>

#include "framework/autograd/node.h"
#include "framework/autograd/ops.h"
#include "framework/autograd/ops/broadcast.h"
#include "framework/autograd/ops/pointwise.h"
#include "framework/tensor/dispatch.h"

namespace qat {
namespace detail {
namespace {

std::vector<std::size_t> xshape(const Shape& s) { return {s.begin(), s.end()}; }

template <class T>
auto adapt(const Tensor& t) {
  return xt::adapt(t.data<T>(), static_cast<std::size_t>(t.numel()), xt::no_ownership(),
                   xshape(t.shape()));
}

void require_same_dtype(const Tensor& a, const Tensor& b, const char* fn) {
  require_float(a, fn, "a");
  require_float(b, fn, "b");
  QAT_REQUIRE(a.dtype() == b.dtype(), fn, "dtype mismatch: a is ", dtype_name(a.dtype()),
              ", b is ", dtype_name(b.dtype()));
}

// out = f(a, b) with broadcasting; same-shape inputs take a plain loop.
template <class F>
Tensor binary_forward(const Tensor& a, const Tensor& b, const char* fn, F f) {
  require_same_dtype(a, b, fn);
  const Shape out_shape = broadcast_shapes(a.shape(), b.shape(), fn);
  Tensor out = Tensor::empty(out_shape, a.dtype());
  dispatch_float(a.dtype(), fn, [&]<class T>() {
    if (a.shape() == b.shape()) {
      const T* pa = a.data<T>();
      const T* pb = b.data<T>();
      T* po = out.data<T>();
      const std::int64_t n = out.numel();
      for (std::int64_t i = 0; i < n; ++i) po[i] = f(pa[i], pb[i]);
    } else {
      auto xo = adapt<T>(out);
      xo = xt::make_lambda_xfunction([f](T x, T y) { return f(x, y); }, adapt<T>(a), adapt<T>(b));
    }
  });
  return out;
}

}  // namespace

Tensor sum_to(const Tensor& grad, const Shape& shape) {
  if (grad.shape() == shape) return grad;
  const Shape& gs = grad.shape();
  const int rank = gs.rank(), lead = rank - shape.rank();
  QAT_CHECK(lead >= 0, "sum_to: ", gs, " -> ", shape);
  // Stride of each grad dimension in the output; 0 where the dimension was broadcast.
  std::array<std::int64_t, Shape::kMaxDims> ostride{};
  std::int64_t st = 1;
  for (int i = rank - 1; i >= lead; --i) {
    ostride[i] = shape[i - lead] == 1 ? 0 : st;
    st *= shape[i - lead];
  }
  Tensor out = Tensor::zeros(shape, grad.dtype());
  dispatch_float(grad.dtype(), "sum_to", [&]<class T>() {
    const T* g = grad.data<T>();
    T* o = out.data<T>();
    const std::int64_t n = grad.numel();
    if (n == 0) return;
    const std::int64_t inner = gs[rank - 1];
    std::array<std::int64_t, Shape::kMaxDims> idx{};
    for (std::int64_t base = 0; base < n; base += inner) {
      std::int64_t off = 0;
      for (int i = 0; i < rank - 1; ++i) off += idx[i] * ostride[i];
      const std::int64_t s_in = ostride[rank - 1];
      for (std::int64_t j = 0; j < inner; ++j) o[off + j * s_in] += g[base + j];
      for (int i = rank - 2; i >= 0 && ++idx[i] == gs[i]; --i) idx[i] = 0;  // odometer
    }
  });
  return out;
}

}  // namespace detail

using detail::sum_to;
using Grads = std::vector<Tensor>;
using Inputs = std::vector<Tensor>;

// d(a+b) = (g, g)
Tensor add(const Tensor& a, const Tensor& b) {
  Tensor out = detail::binary_forward(a, b, "add", [](auto x, auto y) { return x + y; });
  autograd::record(out, "add", {a, b}, [](const Tensor& g, const Inputs& in, Grads& gi) {
    if (in[0].requires_grad()) gi[0] = sum_to(g, in[0].shape());
    if (in[1].requires_grad()) gi[1] = sum_to(g, in[1].shape());
  });
  return out;
}

// d(a-b) = (g, -g)
Tensor sub(const Tensor& a, const Tensor& b) {
  Tensor out = detail::binary_forward(a, b, "sub", [](auto x, auto y) { return x - y; });
  autograd::record(out, "sub", {a, b}, [](const Tensor& g, const Inputs& in, Grads& gi) {
    if (in[0].requires_grad()) gi[0] = sum_to(g, in[0].shape());
    if (in[1].requires_grad()) gi[1] = sum_to(neg(g), in[1].shape());
  });
  return out;
}

// d(a*b) = (g*b, g*a)
Tensor mul(const Tensor& a, const Tensor& b) {
  Tensor out = detail::binary_forward(a, b, "mul", [](auto x, auto y) { return x * y; });
  autograd::record(out, "mul", {a, b}, [](const Tensor& g, const Inputs& in, Grads& gi) {
    if (in[0].requires_grad()) gi[0] = sum_to(mul(g, in[1]), in[0].shape());
    if (in[1].requires_grad()) gi[1] = sum_to(mul(g, in[0]), in[1].shape());
  });
  return out;
}

// d(a/b) = (g/b, -g*a/b^2)
Tensor div(const Tensor& a, const Tensor& b) {
  Tensor out = detail::binary_forward(a, b, "div", [](auto x, auto y) { return x / y; });
  autograd::record(out, "div", {a, b}, [](const Tensor& g, const Inputs& in, Grads& gi) {
    if (in[0].requires_grad()) gi[0] = sum_to(div(g, in[1]), in[0].shape());
    if (in[1].requires_grad())
      gi[1] = sum_to(neg(div(mul(g, in[0]), mul(in[1], in[1]))), in[1].shape());
  });
  return out;
}

// d(-x) = -g
Tensor neg(const Tensor& x) {
  Tensor out = detail::map(x, "neg", [](auto v) { return -v; });
  autograd::record(out, "neg", {x}, [](const Tensor& g, const Inputs&, Grads& gi) { gi[0] = neg(g); });
  return out;
}

// d(x+s) = g
Tensor add(const Tensor& x, double s) {
  Tensor out = detail::map(x, "add", [s](auto v) { return v + static_cast<decltype(v)>(s); });
  autograd::record(out, "add_scalar", {x}, [](const Tensor& g, const Inputs&, Grads& gi) { gi[0] = g; });
  return out;
}

// d(x*s) = g*s
Tensor mul(const Tensor& x, double s) {
  Tensor out = detail::map(x, "mul", [s](auto v) { return v * static_cast<decltype(v)>(s); });
  autograd::record(out, "mul_scalar", {x}, [s](const Tensor& g, const Inputs&, Grads& gi) { gi[0] = mul(g, s); });
  return out;
}

// d(x/s) = g/s
Tensor div(const Tensor& x, double s) {
  QAT_REQUIRE(s != 0.0, "div", "division by the scalar 0");
  Tensor out = detail::map(x, "div", [s](auto v) { return v / static_cast<decltype(v)>(s); });
  autograd::record(out, "div_scalar", {x}, [s](const Tensor& g, const Inputs&, Grads& gi) { gi[0] = div(g, s); });
  return out;
}

// d(s-x) = -g
Tensor rsub(double s, const Tensor& x) {
  Tensor out = detail::map(x, "rsub", [s](auto v) { return static_cast<decltype(v)>(s) - v; });
  autograd::record(out, "rsub", {x}, [](const Tensor& g, const Inputs&, Grads& gi) { gi[0] = neg(g); });
  return out;
}

// d(s/x) = -g*s/x^2
Tensor rdiv(double s, const Tensor& x) {
  Tensor out = detail::map(x, "rdiv", [s](auto v) { return static_cast<decltype(v)>(s) / v; });
  autograd::record(out, "rdiv", {x}, [s](const Tensor& g, const Inputs& in, Grads& gi) {
    gi[0] = mul(div(g, mul(in[0], in[0])), -s);
  });
  return out;
}

// d(x^e) = g*e*x^(e-1)
Tensor pow(const Tensor& x, double e) {
  Tensor out = detail::map(x, "pow", [e](auto v) {
    return static_cast<decltype(v)>(std::pow(v, static_cast<decltype(v)>(e)));
  });
  autograd::record(out, "pow", {x}, [e](const Tensor& g, const Inputs& in, Grads& gi) {
    gi[0] = mul(g, mul(pow(in[0], e - 1.0), e));
  });
  return out;
}

}  // namespace qat
