// Shape ops. Tensors are contiguous, so reshape shares storage and transpose copies.
#include <cstring>

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
  const int d0 = x.shape().axis(dim0, "transpose"), d1 = x.shape().axis(dim1, "transpose");
  Tensor out = d0 == d1 ? x.clone() : swap_dims(x, d0, d1);
  autograd::record(out, "transpose", {x}, [d0, d1](const Tensor& g, const Inputs&, Grads& gi) {
    gi[0] = d0 == d1 ? g : swap_dims(g, d0, d1);
  });
  return out;
}

// Concatenation along `dim`: out = [x_0 | x_1 | ...];  dx_i = the slice of g that x_i filled.
Tensor cat(const std::vector<Tensor>& xs, int dim) {
  QAT_REQUIRE(!xs.empty(), "cat", "needs at least one tensor");
  for (std::size_t i = 0; i < xs.size(); ++i) {
    require_float(xs[i], "cat", "xs");
    QAT_REQUIRE(xs[i].dtype() == xs[0].dtype(), "cat", "input ", i, " is ", dtype_name(xs[i].dtype()),
                ", input 0 is ", dtype_name(xs[0].dtype()));
  }
  const Shape& s0 = xs[0].shape();
  QAT_REQUIRE(s0.rank() >= 1, "cat", "cannot concatenate rank-0 tensors");
  const int d = s0.axis(dim, "cat");
  std::int64_t outer = 1, total = 0;
  for (int k = 0; k < d; ++k) outer *= s0[k];
  std::vector<std::int64_t> inner(xs.size());
  for (std::size_t i = 0; i < xs.size(); ++i) {
    const Shape& si = xs[i].shape();
    bool fits = si.rank() == s0.rank();
    for (int k = 0; fits && k < si.rank(); ++k) fits = k == d || si[k] == s0[k];
    QAT_REQUIRE(fits, "cat", "input ", i, " of shape ", si, " does not match input 0 of shape ", s0,
                " outside dimension ", d);
    inner[i] = outer == 0 ? 0 : si.numel() / outer;
    total += si[d];
  }
  Shape out_shape = s0;
  out_shape[d] = total;
  Tensor out = Tensor::empty(out_shape, xs[0].dtype());
  const std::size_t es = element_size(xs[0].dtype());
  const std::int64_t row = out_shape.numel() / std::max<std::int64_t>(outer, 1);
  auto* po = static_cast<char*>(out.raw_data());
  for (std::int64_t o = 0, at = 0; o < outer; ++o)
    for (std::size_t i = 0; i < xs.size(); ++i, at += inner[i - 1])
      std::memcpy(po + static_cast<std::size_t>(at) * es,
                  static_cast<const char*>(xs[i].raw_data()) + static_cast<std::size_t>(o * inner[i]) * es,
                  static_cast<std::size_t>(inner[i]) * es);
  autograd::record(out, "cat", xs, [outer, inner, row, es](const Tensor& g, const Inputs& in, Grads& gi) {
    std::int64_t offset = 0;
    for (std::size_t i = 0; i < in.size(); ++i) {
      if (in[i].requires_grad()) {
        Tensor gx = Tensor::empty(in[i].shape(), g.dtype());
        for (std::int64_t o = 0; o < outer; ++o)
          std::memcpy(static_cast<char*>(gx.raw_data()) + static_cast<std::size_t>(o * inner[i]) * es,
                      static_cast<const char*>(g.raw_data()) + static_cast<std::size_t>(o * row + offset) * es,
                      static_cast<std::size_t>(inner[i]) * es);
        gi[i] = gx;
      }
      offset += inner[i];
    }
  });
  return out;
}

}  // namespace qat
