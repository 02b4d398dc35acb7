// Shape ops. Tensors are contiguous, so reshape shares storage and transpose copies.
#include <cstring>
#include <string>

#include "framework/autograd/node.h"
#include "framework/autograd/ops.h"
#include "framework/tensor/dispatch.h"

namespace qat {

using Grads = std::vector<Tensor>;
using Inputs = std::vector<Tensor>;

namespace {
Shape infer_shape(const Shape& from, const std::vector<std::int64_t>& dims, const char* fn) {
  int infer = -1;
  std::int64_t known = 1;
  for (std::size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] == -1) {
      QAT_REQUIRE(infer < 0, fn, "only one dimension can be -1, got two (positions ", infer, " and ", i,
                  ")");
      infer = static_cast<int>(i);
    } else {
      QAT_REQUIRE(dims[i] >= 0, fn, "invalid dimension ", dims[i], " at position ", i);
      known *= dims[i];
    }
  }
  std::vector<std::int64_t> out = dims;
  if (infer >= 0) {
    QAT_REQUIRE(known != 0 && from.numel() % known == 0, fn,
                "cannot infer the -1 dimension when "
                "reshaping ",
                from, " (", from.numel(), " elements)");
    out[infer] = from.numel() / known;
  }
  const Shape s(out);
  QAT_REQUIRE(s.numel() == from.numel(), fn, "cannot reshape ", from, " (", from.numel(),
              " elements) to ", s, " (", s.numel(), " elements)");
  return s;
}
}  // namespace

// Same data, new shape;  dx = reshape(g, x.shape)
Tensor reshape(const Tensor& x, const std::vector<std::int64_t>& dims) {
  Tensor out = x.view_as_shape(infer_shape(x.shape(), dims, "reshape"));
  autograd::record(out, "reshape", {x}, [](const Tensor& g, const Inputs& in, Grads& gi) {
    gi[0] = g.view_as_shape(in[0].shape());
  });
  return out;
}

Tensor flatten(const Tensor& x, int start_dim, int end_dim) {
  const Shape& s = x.shape();
  if (s.rank() == 0) return reshape(x, {1});
  const int a = s.axis(start_dim, "flatten"), b = s.axis(end_dim, "flatten");
  QAT_REQUIRE(a <= b, "flatten", "start_dim ", start_dim, " comes after end_dim ", end_dim,
              " for shape ", s);
  std::vector<std::int64_t> dims;
  for (int i = 0; i < a; ++i) dims.push_back(s[i]);
  std::int64_t merged = 1;
  for (int i = a; i <= b; ++i) merged *= s[i];
  dims.push_back(merged);
  for (int i = b + 1; i < s.rank(); ++i) dims.push_back(s[i]);
  return reshape(x, dims);
}

namespace {
// Copies x with dimensions d0 and d1 swapped: view x as (A, n0, B, n1, C) and write (A, n1, B, n0, C).
Tensor swap_dims(const Tensor& x, int d0, int d1) {
  if (d0 > d1) std::swap(d0, d1);
  const Shape& s = x.shape();
  Shape os = s;
  std::swap(os[d0], os[d1]);
  Tensor out = Tensor::empty(os, x.dtype());
  std::int64_t A = 1, B = 1, C = 1;
  for (int i = 0; i < d0; ++i) A *= s[i];
  for (int i = d0 + 1; i < d1; ++i) B *= s[i];
  for (int i = d1 + 1; i < s.rank(); ++i) C *= s[i];
  const std::int64_t n0 = s[d0], n1 = s[d1];
  detail::dispatch_any(x.dtype(), [&]<class T>() {
    const T* src = x.data<T>();
    T* dst = out.data<T>();
    for (std::int64_t a = 0; a < A; ++a)
      for (std::int64_t i = 0; i < n0; ++i)
        for (std::int64_t b = 0; b < B; ++b)
          for (std::int64_t j = 0; j < n1; ++j) {
            const T* from = src + (((a * n0 + i) * B + b) * n1 + j) * C;
            T* to = dst + (((a * n1 + j) * B + b) * n0 + i) * C;
            for (std::int64_t c = 0; c < C; ++c) to[c] = from[c];
          }
  });
  return out;
}
}  // namespace

// dx = transpose(g, dim0, dim1)
Tensor transpose(const Tensor& x, int dim0, int dim1) {
  require_cpu("transpose", {{"x", &x}});
  const int d0 = x.shape().axis(dim0, "transpose"), d1 = x.shape().axis(dim1, "transpose");
  Tensor out = d0 == d1 ? x.clone() : swap_dims(x, d0, d1);
  autograd::record(out, "transpose", {x}, [d0, d1](const Tensor& g, const Inputs&, Grads& gi) {
    gi[0] = d0 == d1 ? g : swap_dims(g, d0, d1);
  });
  return out;
}

// ---- cat ----------------------------------------------------------------------------------

Shape cat_shape(const std::vector<Shape>& shapes, int dim, const char* fn) {
  QAT_REQUIRE(!shapes.empty(), fn, "expects at least one tensor, got an empty list");
  const Shape& first = shapes[0];
  QAT_REQUIRE(first.rank() > 0, fn, "cannot concatenate a 0-dimensional tensor (input 0)");
  const int d = first.axis(dim, fn);
  Shape out = first;
  for (std::size_t i = 1; i < shapes.size(); ++i) {
    const Shape& s = shapes[i];
    QAT_REQUIRE(s.rank() == first.rank(), fn, "input ", i, " has shape ", s, " of rank ", s.rank(),
                " but input 0 has shape ", first, " of rank ", first.rank());
    for (int k = 0; k < s.rank(); ++k)
      QAT_REQUIRE(k == d || s[k] == first[k], fn, "input ", i, " has shape ", s,
                  " but input 0 has shape ", first, ": sizes must match except along dim ", d);
    out[d] += s[d];
  }
  return out;
}

namespace {
// Views a tensor of `s` as (outer, s[d], inner) around dim d.
std::int64_t outer_of(const Shape& s, int d) {
  std::int64_t n = 1;
  for (int k = 0; k < d; ++k) n *= s[k];
  return n;
}
std::int64_t inner_of(const Shape& s, int d) {
  std::int64_t n = 1;
  for (int k = d + 1; k < s.rank(); ++k) n *= s[k];
  return n;
}
}  // namespace

// out[a, off_i + j, c] = x_i[a, j, c] (x_i viewed as (outer, n_i, inner), off_i = n_0 + ... + n_{i-1});
// dx_i[a, j, c] = g[a, off_i + j, c]
Tensor cat(const std::vector<Tensor>& xs, int dim) {
  constexpr const char* fn = "cat";
  std::vector<Shape> shapes;
  for (std::size_t i = 0; i < xs.size(); ++i) {
    QAT_REQUIRE(xs[i].defined(), fn, "input ", i, " is an undefined tensor");
    QAT_REQUIRE(is_floating(xs[i].dtype()), fn, "input ", i, " must be float32 or float64, got ",
                dtype_name(xs[i].dtype()), " of shape ", xs[i].shape());
    QAT_REQUIRE(xs[i].dtype() == xs[0].dtype(), fn, "input ", i, " is ", dtype_name(xs[i].dtype()),
                " but input 0 is ", dtype_name(xs[0].dtype()));
    if (xs[i].device() != Device::CPU) {
      const std::string arg = detail::concat("input ", i);
      require_cpu(fn, {{arg.c_str(), &xs[i]}});
    }
    shapes.push_back(xs[i].shape());
  }
  const Shape os = cat_shape(shapes, dim, fn);
  const int d = os.axis(dim, fn);
  const std::int64_t outer = outer_of(os, d), inner = inner_of(os, d), row = os[d] * inner;
  Tensor out = Tensor::empty(os, xs[0].dtype());
  const std::size_t esize = element_size(out.dtype());
  std::int64_t off = 0;  // elements of an output row before x_i's block
  for (const Tensor& x : xs) {
    const std::int64_t n = x.shape()[d] * inner;
    const auto* src = static_cast<const std::uint8_t*>(x.raw_data());
    auto* dst = static_cast<std::uint8_t*>(out.raw_data());
    for (std::int64_t a = 0; a < outer; ++a)
      std::memcpy(dst + (a * row + off) * esize, src + a * n * esize, n * esize);
    off += n;
  }
  autograd::record(out, "cat", xs, [d](const Tensor& g, const Inputs& in, Grads& gi) {
    const std::int64_t outer = outer_of(g.shape(), d), inner = inner_of(g.shape(), d),
                       row = g.shape()[d] * inner;
    const std::size_t esize = element_size(g.dtype());
    std::int64_t off = 0;
    for (std::size_t i = 0; i < in.size(); ++i) {
      const std::int64_t n = in[i].shape()[d] * inner;
      if (in[i].requires_grad()) {
        gi[i] = Tensor::empty(in[i].shape(), g.dtype());
        const auto* src = static_cast<const std::uint8_t*>(g.raw_data());
        auto* dst = static_cast<std::uint8_t*>(gi[i].raw_data());
        for (std::int64_t a = 0; a < outer; ++a)
          std::memcpy(dst + a * n * esize, src + (a * row + off) * esize, n * esize);
      }
      off += n;
    }
  });
  return out;
}

}  // namespace qat
