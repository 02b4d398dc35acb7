// log_softmax and the losses. cross_entropy fuses log_softmax and NLL so that its backward is
// one pass: dlogits = g/N * (softmax - onehot(labels)).
#include <cmath>
#include <limits>

#include "framework/autograd/node.h"
#include "framework/autograd/ops.h"
#include "framework/tensor/dispatch.h"

namespace qat {

using Grads = std::vector<Tensor>;
using Inputs = std::vector<Tensor>;

namespace {
// y = x - max - log(sum(exp(x - max))) over a strided row of n values.
template <class T>
void log_softmax_row(const T* x, T* y, std::int64_t n, std::int64_t stride) {
  T m = -std::numeric_limits<T>::infinity();
  for (std::int64_t k = 0; k < n; ++k) m = std::max(m, x[k * stride]);
  T s = 0;
  for (std::int64_t k = 0; k < n; ++k) s += std::exp(x[k * stride] - m);
  const T lse = m + std::log(s);
  for (std::int64_t k = 0; k < n; ++k) y[k * stride] = x[k * stride] - lse;
}
}  // namespace

// y = log_softmax(x);  dx = g - softmax(x) * sum(g)  along dim
Tensor log_softmax(const Tensor& x, int dim) {
  require_float(x, "log_softmax", "x");
  const Shape& s = x.shape();
  const int d = s.axis(dim, "log_softmax");
  std::int64_t outer = 1, n = s.rank() ? s[d] : 1, inner = 1;
  for (int i = 0; i < s.rank(); ++i) {
    if (i < d) outer *= s[i];
    if (i > d) inner *= s[i];
  }
  Tensor out = Tensor::empty(s, x.dtype());
  detail::dispatch_float(x.dtype(), "log_softmax", [&]<class T>() {
    for (std::int64_t o = 0; o < outer; ++o)
      for (std::int64_t i = 0; i < inner; ++i)
        log_softmax_row(x.data<T>() + o * n * inner + i, out.data<T>() + o * n * inner + i, n, inner);
  });
  autograd::record(out, "log_softmax", {x},
                   [y = out.detach(), outer, n, inner](const Tensor& g, const Inputs&, Grads& gi) {
                     gi[0] = Tensor::empty(g.shape(), g.dtype());
                     detail::dispatch_float(g.dtype(), "log_softmax_backward", [&]<class T>() {
                       for (std::int64_t o = 0; o < outer; ++o)
                         for (std::int64_t i = 0; i < inner; ++i) {
                           const std::int64_t base = o * n * inner + i;
                           const T* pg = g.data<T>() + base;
                           const T* py = y.data<T>() + base;
                           T* pd = gi[0].data<T>() + base;
                           T gsum = 0;
                           for (std::int64_t k = 0; k < n; ++k) gsum += pg[k * inner];
                           for (std::int64_t k = 0; k < n; ++k)
                             pd[k * inner] = pg[k * inner] - std::exp(py[k * inner]) * gsum;
                         }
                     });
                   });
  return out;
}

// loss = -1/N sum_i log_softmax(x_i)[y_i];  dx_i = g/N * (softmax(x_i) - onehot(y_i))
Tensor cross_entropy(const Tensor& logits, const Tensor& labels) {
  require_float(logits, "cross_entropy", "logits");
  require_rank(logits, 2, "cross_entropy", "logits");
  QAT_REQUIRE(labels.defined() && (labels.dtype() == DType::Int64 || labels.dtype() == DType::Int32),
              "cross_entropy", "labels must be an int64 or int32 tensor, got ",
              labels.defined() ? dtype_name(labels.dtype()) : "undefined");
  QAT_REQUIRE(labels.dim() == 1 && labels.size(0) == logits.size(0), "cross_entropy", "labels of shape ",
              labels.shape(), " do not match logits of shape ", logits.shape());
  const std::int64_t N = logits.size(0), C = logits.size(1);
  QAT_REQUIRE(N > 0, "cross_entropy", "empty batch");
  const Tensor targets = labels.dtype() == DType::Int64 ? labels : labels.to(DType::Int64);
  const std::int64_t* y = targets.data<std::int64_t>();
  for (std::int64_t i = 0; i < N; ++i)
    QAT_REQUIRE(y[i] >= 0 && y[i] < C, "cross_entropy", "label ", y[i], " at index ", i,
                " is out of range [0, ", C, ")");
  Tensor logp = Tensor::empty(logits.shape(), logits.dtype());
  Tensor out = Tensor::empty(Shape{}, logits.dtype());
  detail::dispatch_float(logits.dtype(), "cross_entropy", [&]<class T>() {
    double total = 0;
    for (std::int64_t i = 0; i < N; ++i) {
      log_softmax_row(logits.data<T>() + i * C, logp.data<T>() + i * C, C, 1);
      total -= logp.data<T>()[i * C + y[i]];
    }
    *out.data<T>() = static_cast<T>(total / static_cast<double>(N));
  });
  autograd::record(out, "cross_entropy", {logits},
                   [logp, targets, N, C](const Tensor& g, const Inputs&, Grads& gi) {
                     gi[0] = Tensor::empty(logp.shape(), logp.dtype());
                     detail::dispatch_float(g.dtype(), "cross_entropy_backward", [&]<class T>() {
                       const T scale = *g.data<T>() / static_cast<T>(N);
                       const T* lp = logp.data<T>();
                       const std::int64_t* y = targets.data<std::int64_t>();
                       T* d = gi[0].data<T>();
                       for (std::int64_t i = 0; i < N; ++i) {
                         for (std::int64_t c = 0; c < C; ++c)
                           d[i * C + c] = std::exp(lp[i * C + c]) * scale;
                         d[i * C + y[i]] -= scale;
                       }
                     });
                   });
  return out;
}

// loss = mean((a - b)^2);  da = g * 2(a - b)/n,  db = -da
Tensor mse_loss(const Tensor& input, const Tensor& target) {
  require_float(input, "mse_loss", "input");
  require_float(target, "mse_loss", "target");
  QAT_REQUIRE(input.shape() == target.shape() && input.dtype() == target.dtype(), "mse_loss", "input ",
              dtype_name(input.dtype()), input.shape(), " and target ", dtype_name(target.dtype()),
              target.shape(), " must match");
  QAT_REQUIRE(input.numel() > 0, "mse_loss", "empty input");
  const std::int64_t n = input.numel();
  Tensor out = Tensor::empty(Shape{}, input.dtype());
  detail::dispatch_float(input.dtype(), "mse_loss", [&]<class T>() {
    const T* a = input.data<T>();
    const T* b = target.data<T>();
    double s = 0;
    for (std::int64_t i = 0; i < n; ++i) s += double(a[i] - b[i]) * double(a[i] - b[i]);
    *out.data<T>() = static_cast<T>(s / static_cast<double>(n));
  });
  autograd::record(out, "mse_loss", {input, target}, [n](const Tensor& g, const Inputs& in, Grads& gi) {
    Tensor da = Tensor::empty(in[0].shape(), in[0].dtype());
    detail::dispatch_float(g.dtype(), "mse_loss_backward", [&]<class T>() {
      const T k = *g.data<T>() * T(2) / static_cast<T>(n);
      const T* a = in[0].data<T>();
      const T* b = in[1].data<T>();
      T* d = da.data<T>();
      for (std::int64_t i = 0; i < n; ++i) d[i] = k * (a[i] - b[i]);
    });
    if (in[1].requires_grad()) gi[1] = neg(da);
    if (in[0].requires_grad()) gi[0] = da;
  });
  return out;
}

}  // namespace qat
