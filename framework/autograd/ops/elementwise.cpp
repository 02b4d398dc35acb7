// Elementwise arithmetic with NumPy broadcasting (planned in ops/broadcast.h: the innermost loop
// runs over merged contiguous dimensions with unit or zero strides).
#include "framework/kernels/cpu/elementwise.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <vector>

#include "framework/autograd/node.h"
#include "framework/autograd/ops.h"
#include "framework/autograd/ops/broadcast.h"
#include "framework/autograd/ops/pointwise.h"
#include "framework/kernels/cpu/reduce.h"
#include "framework/kernels/cuda/kernels.h"
#include "framework/tensor/dispatch.h"
#include "framework/tensor/parallel.h"

namespace qat {
namespace detail {
namespace {

constexpr std::int64_t kParallelMin = 1 << 16;  // elements below which threads cost more than they save

void require_same_dtype(const Tensor& a, const Tensor& b, const char* fn) {
  require_float(a, fn, "a");
  require_float(b, fn, "b");
  QAT_REQUIRE(a.dtype() == b.dtype(), fn, "dtype mismatch: a is ", dtype_name(a.dtype()), ", b is ",
              dtype_name(b.dtype()));
}

// The CUDA form of a broadcast plan.
kernels::cuda::BroadcastDims cuda_dims(const BroadcastPlan& p) {
  kernels::cuda::BroadcastDims d;
  d.rank = p.rank;
  for (int k = 0; k < p.rank; ++k) d.size[k] = p.size[k], d.sa[k] = p.sa[k], d.sb[k] = p.sb[k];
  return d;
}

// out = f(a, b) with broadcasting.
Tensor binary_forward(const Tensor& a, const Tensor& b, const char* fn, kernels::BinaryOp op) {
  require_same_dtype(a, b, fn);
  const Device device = common_device(fn, {{"a", &a}, {"b", &b}});
  const Shape out_shape = broadcast_shapes(a.shape(), b.shape(), fn);
  Tensor out = Tensor::empty(out_shape, a.dtype(), device);
  if (device == Device::CUDA) {
    if (out.numel() == 0) return out;
    const auto dims = cuda_dims(BroadcastPlan::make(out_shape, a.shape(), b.shape(), true));
    dispatch_float(a.dtype(), fn, [&]<class T>() {
      kernels::cuda::binary(op, a.cuda_data<T>(), b.cuda_data<T>(), out.cuda_data<T>(), dims,
                            out.numel());
    });
    return out;
  }
  dispatch_float(a.dtype(), fn, [&]<class T>() {
    const T* pa = a.data<T>();
    const T* pb = b.data<T>();
    T* po = out.data<T>();
    if (out.numel() == 0) return;
    const BroadcastPlan p = BroadcastPlan::make(out_shape, a.shape(), b.shape(), true);
    const int r = p.rank;
    const std::int64_t n = p.size[r - 1], ia = p.sa[r - 1], ib = p.sb[r - 1];
    // elements [begin, end), each computed alone: any split over threads gives the same bits
    parallel_for(out.numel(), kParallelMin, [&](std::int64_t begin, std::int64_t end) {
      std::array<std::int64_t, Shape::kMaxDims> idx{};
      std::int64_t row = begin / n, at = begin % n;  // position in the rows of n elements
      for (int d = r - 2; d >= 0; --d) idx[d] = row % p.size[d], row /= p.size[d];
      for (std::int64_t base = begin; base < end;) {
        std::int64_t oa = 0, ob = 0;
        for (int d = 0; d + 1 < r; ++d) oa += idx[d] * p.sa[d], ob += idx[d] * p.sb[d];
        const std::int64_t len = std::min(n - at, end - base);
        kernels::binary(op, pa + oa + at * ia, ia, pb + ob + at * ib, ib, po + base, len);
        base += len, at = 0;
        for (int d = r - 2; d >= 0 && ++idx[d] == p.size[d]; --d) idx[d] = 0;  // odometer
      }
    });
  });
  return out;
}

}  // namespace

BroadcastPlan BroadcastPlan::make(const Shape& out, const Shape& a, const Shape& b, bool binary) {
  // strides of an input aligned to the output's trailing dimensions, 0 where broadcast
  auto strides = [&](const Shape& in) {
    std::array<std::int64_t, Shape::kMaxDims> st{};
    const int lead = out.rank() - in.rank();
    std::int64_t acc = 1;
    for (int d = out.rank() - 1; d >= 0; --d) {
      const int k = d - lead;
      const std::int64_t n = k >= 0 ? in[k] : 1;
      st[d] = (n == 1) ? 0 : acc;
      acc *= n;
    }
    return st;
  };
  const auto st_a = strides(a), st_b = binary ? strides(b) : std::array<std::int64_t, Shape::kMaxDims>{};
  BroadcastPlan p;
  for (int d = 0; d < out.rank(); ++d) {  // drop size-1 dimensions, merge contiguous runs
    if (out[d] == 1) continue;
    if (p.rank > 0) {
      const int q = p.rank - 1;
      if (p.sa[q] == st_a[d] * out[d] && p.sb[q] == st_b[d] * out[d]) {
        p.size[q] *= out[d];
        p.sa[q] = st_a[d];
        p.sb[q] = st_b[d];
        continue;
      }
    }
    p.size[p.rank] = out[d];
    p.sa[p.rank] = st_a[d];
    p.sb[p.rank] = st_b[d];
    ++p.rank;
  }
  if (p.rank == 0) p = BroadcastPlan{1, {1}, {0}, {0}};
  return p;
}

kernels::cuda::ReduceDims reduce_dims(const Shape& in, const Shape& out) {
  kernels::cuda::ReduceDims d;
  const int lead = in.rank() - out.rank();
  std::int64_t stride = 1;
  std::array<std::int64_t, Shape::kMaxDims> strides{};
  for (int k = in.rank() - 1; k >= 0; --k) strides[k] = stride, stride *= in[k];
  for (int k = 0; k < in.rank(); ++k) {
    if (in[k] == 1) continue;
    const bool reduced = k < lead || out[k - lead] == 1;
    if (reduced) {
      d.red_size[d.red_rank] = in[k], d.red_stride[d.red_rank++] = strides[k];
      d.n_red *= in[k];
    } else {
      d.kept_size[d.kept_rank] = in[k], d.kept_stride[d.kept_rank++] = strides[k];
      d.n_out *= in[k];
    }
  }
  return d;
}

Tensor sum_to(const Tensor& grad, const Shape& shape) {
  if (grad.shape() == shape) return grad;
  QAT_CHECK(grad.dim() >= shape.rank(), "sum_to: ", grad.shape(), " -> ", shape);
  if (grad.device() == Device::CUDA) {
    Tensor out = Tensor::zeros(shape, grad.dtype(), Device::CUDA);
    if (grad.numel() == 0) return out;
    const auto dims = reduce_dims(grad.shape(), shape);
    dispatch_float(grad.dtype(), "sum_to", [&]<class T>() {
      kernels::cuda::sum(grad.cuda_data<T>(), out.cuda_data<T>(), dims, 1.0);
    });
    return out;
  }
  Tensor out = Tensor::zeros(shape, grad.dtype());
  if (grad.numel() == 0) return out;
  // iterate over grad; `sa` holds the strides of the output (0 where it was broadcast)
  const BroadcastPlan p = BroadcastPlan::make(grad.shape(), shape, Shape{}, false);
  dispatch_float(grad.dtype(), "sum_to", [&]<class T>() {
    const T* g = grad.data<T>();
    T* o = out.data<T>();
    const int r = p.rank;
    const std::int64_t n = p.size[r - 1], so = p.sa[r - 1], total = grad.numel();
    // the rows' sums first (over threads: each row summed alone), then added in row order
    std::vector<T> row_sums;
    if (so == 0 && get_num_threads() > 1 && total >= kParallelMin) {
      row_sums.resize(total / n);
      parallel_for(total / n, 1, [&](std::int64_t b, std::int64_t e) {
        for (std::int64_t i = b; i < e; ++i) row_sums[i] = kernels::sum(g + i * n, n);
      });
    }
    std::array<std::int64_t, Shape::kMaxDims> idx{};
    for (std::int64_t base = 0; base < total; base += n) {
      std::int64_t off = 0;
      for (int d = 0; d + 1 < r; ++d) off += idx[d] * p.sa[d];
      if (so == 0) {
        o[off] += row_sums.empty() ? kernels::sum(g + base, n) : row_sums[base / n];
      } else {
        kernels::add_inplace(o + off, g + base, n);
      }
      for (int d = r - 2; d >= 0 && ++idx[d] == p.size[d]; --d) idx[d] = 0;
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
  Tensor out = detail::binary_forward(a, b, "add", kernels::BinaryOp::Add);
  autograd::record(out, "add", {a, b}, [](const Tensor& g, const Inputs& in, Grads& gi) {
    if (in[0].requires_grad()) gi[0] = sum_to(g, in[0].shape());
    if (in[1].requires_grad()) gi[1] = sum_to(g, in[1].shape());
  });
  return out;
}

// d(a-b) = (g, -g)
Tensor sub(const Tensor& a, const Tensor& b) {
  Tensor out = detail::binary_forward(a, b, "sub", kernels::BinaryOp::Sub);
  autograd::record(out, "sub", {a, b}, [](const Tensor& g, const Inputs& in, Grads& gi) {
    if (in[0].requires_grad()) gi[0] = sum_to(g, in[0].shape());
    if (in[1].requires_grad()) gi[1] = sum_to(neg(g), in[1].shape());
  });
  return out;
}

// d(a*b) = (g*b, g*a)
Tensor mul(const Tensor& a, const Tensor& b) {
  Tensor out = detail::binary_forward(a, b, "mul", kernels::BinaryOp::Mul);
  autograd::record(out, "mul", {a, b}, [](const Tensor& g, const Inputs& in, Grads& gi) {
    if (in[0].requires_grad()) gi[0] = sum_to(mul(g, in[1]), in[0].shape());
    if (in[1].requires_grad()) gi[1] = sum_to(mul(g, in[0]), in[1].shape());
  });
  return out;
}

// d(a/b) = (g/b, -g*a/b^2)
Tensor div(const Tensor& a, const Tensor& b) {
  Tensor out = detail::binary_forward(a, b, "div", kernels::BinaryOp::Div);
  autograd::record(out, "div", {a, b}, [](const Tensor& g, const Inputs& in, Grads& gi) {
    if (in[0].requires_grad()) gi[0] = sum_to(div(g, in[1]), in[0].shape());
    if (in[1].requires_grad()) gi[1] = sum_to(neg(div(mul(g, in[0]), mul(in[1], in[1]))), in[1].shape());
  });
  return out;
}

using detail::scalar_map;
using kernels::cuda::UnaryOp;

// d(-x) = -g
Tensor neg(const Tensor& x) {
  Tensor out = scalar_map(x, "neg", UnaryOp::Neg, 0.0, [](auto v) { return -v; });
  autograd::record(out, "neg", {x}, [](const Tensor& g, const Inputs&, Grads& gi) { gi[0] = neg(g); });
  return out;
}

// d(x+s) = g
Tensor add(const Tensor& x, double s) {
  Tensor out = scalar_map(x, "add", UnaryOp::AddScalar, s,
                          [s](auto v) { return v + static_cast<decltype(v)>(s); });
  autograd::record(out, "add_scalar", {x}, [](const Tensor& g, const Inputs&, Grads& gi) { gi[0] = g; });
  return out;
}

// d(x*s) = g*s
Tensor mul(const Tensor& x, double s) {
  Tensor out = scalar_map(x, "mul", UnaryOp::MulScalar, s,
                          [s](auto v) { return v * static_cast<decltype(v)>(s); });
  autograd::record(out, "mul_scalar", {x},
                   [s](const Tensor& g, const Inputs&, Grads& gi) { gi[0] = mul(g, s); });
  return out;
}

// d(x/s) = g/s
Tensor div(const Tensor& x, double s) {
  QAT_REQUIRE(s != 0.0, "div", "division by the scalar 0");
  Tensor out = scalar_map(x, "div", UnaryOp::DivScalar, s,
                          [s](auto v) { return v / static_cast<decltype(v)>(s); });
  autograd::record(out, "div_scalar", {x},
                   [s](const Tensor& g, const Inputs&, Grads& gi) { gi[0] = div(g, s); });
  return out;
}

// d(s-x) = -g
Tensor rsub(double s, const Tensor& x) {
  Tensor out = scalar_map(x, "rsub", UnaryOp::RSubScalar, s,
                          [s](auto v) { return static_cast<decltype(v)>(s) - v; });
  autograd::record(out, "rsub", {x}, [](const Tensor& g, const Inputs&, Grads& gi) { gi[0] = neg(g); });
  return out;
}

// d(s/x) = -g*s/x^2
Tensor rdiv(double s, const Tensor& x) {
  Tensor out = scalar_map(x, "rdiv", UnaryOp::RDivScalar, s,
                          [s](auto v) { return static_cast<decltype(v)>(s) / v; });
  autograd::record(out, "rdiv", {x}, [s](const Tensor& g, const Inputs& in, Grads& gi) {
    gi[0] = mul(div(g, mul(in[0], in[0])), -s);
  });
  return out;
}

// d(x^e) = g*e*x^(e-1)
Tensor pow(const Tensor& x, double e) {
  Tensor out = scalar_map(x, "pow", UnaryOp::Pow, e, [e](auto v) {
    return static_cast<decltype(v)>(std::pow(v, static_cast<decltype(v)>(e)));
  });
  autograd::record(out, "pow", {x}, [e](const Tensor& g, const Inputs& in, Grads& gi) {
    gi[0] = mul(g, mul(pow(in[0], e - 1.0), e));
  });
  return out;
}

}  // namespace qat
