// log_softmax and the losses. cross_entropy fuses log_softmax and NLL so that its backward is
// one pass: dlogits = g/N * (softmax - onehot(labels)). On CUDA (log_softmax, cross_entropy,
// mse_loss) the kernels of kernels/cuda/loss.cu: the same formulas, a row per thread.
#include <cmath>
#include <limits>

#include "framework/autograd/node.h"
#include "framework/autograd/ops.h"
#include "framework/kernels/cuda/kernels.h"
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
  if (x.device() == Device::CUDA) {
    Tensor out = Tensor::empty(s, x.dtype(), Device::CUDA);
    detail::dispatch_float(x.dtype(), "log_softmax", [&]<class T>() {
      kernels::cuda::log_softmax(x.cuda_data<T>(), out.cuda_data<T>(), outer, n, inner);
    });
    autograd::record(out, "log_softmax", {x},
                     [y = out.detach(), outer, n, inner](const Tensor& g, const Inputs&, Grads& gi) {
                       common_device("log_softmax_backward", {{"grad", &g}, {"y", &y}});
                       gi[0] = Tensor::empty(g.shape(), g.dtype(), Device::CUDA);
                       detail::dispatch_float(g.dtype(), "log_softmax_backward", [&]<class T>() {
                         kernels::cuda::log_softmax_backward(g.cuda_data<T>(), y.cuda_data<T>(),
                                                             gi[0].cuda_data<T>(), outer, n, inner);
                       });
                     });
    return out;
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
  const Device dev = common_device("cross_entropy", {{"logits", &logits}, {"labels", &labels}});
  require_float(logits, "cross_entropy", "logits");
  require_rank(logits, 2, "cross_entropy", "logits");
  QAT_REQUIRE(labels.defined() && (labels.dtype() == DType::Int64 || labels.dtype() == DType::Int32),
              "cross_entropy", "labels must be an int64 or int32 tensor, got ",
              labels.defined() ? dtype_name(labels.dtype()) : "undefined");
  QAT_REQUIRE(labels.dim() == 1 && labels.size(0) == logits.size(0), "cross_entropy", "labels of shape ",
              labels.shape(), " do not match logits of shape ", logits.shape());
  const std::int64_t N = logits.size(0), C = logits.size(1);
  QAT_REQUIRE(N > 0, "cross_entropy", "empty batch");
  // the labels are checked on the host (on CUDA: a copy of N labels, which waits for them)
  const Tensor host = labels.to(Device::CPU);
  const Tensor targets = host.dtype() == DType::Int64 ? host : host.to(DType::Int64);
  const std::int64_t* y = targets.data<std::int64_t>();
  for (std::int64_t i = 0; i < N; ++i)
    QAT_REQUIRE(y[i] >= 0 && y[i] < C, "cross_entropy", "label ", y[i], " at index ", i,
                " is out of range [0, ", C, ")");
  if (dev == Device::CUDA) {
    const Tensor dy = labels.dtype() == DType::Int64 ? labels : targets.to(Device::CUDA);
    Tensor logp = Tensor::empty(logits.shape(), logits.dtype(), Device::CUDA);
    Tensor out = Tensor::empty(Shape{}, logits.dtype(), Device::CUDA);
    detail::dispatch_float(logits.dtype(), "cross_entropy", [&]<class T>() {
      kernels::cuda::cross_entropy(logits.cuda_data<T>(), dy.cuda_data<std::int64_t>(),
                                   logp.cuda_data<T>(), out.cuda_data<T>(), N, C);
    });
    autograd::record(out, "cross_entropy", {logits},
                     [logp, dy, N, C](const Tensor& g, const Inputs&, Grads& gi) {
                       common_device("cross_entropy_backward", {{"grad", &g}, {"logp", &logp}});
                       gi[0] = Tensor::empty(logp.shape(), logp.dtype(), Device::CUDA);
                       detail::dispatch_float(g.dtype(), "cross_entropy_backward", [&]<class T>() {
                         kernels::cuda::cross_entropy_backward(g.cuda_data<T>(), logp.cuda_data<T>(),
                                                               dy.cuda_data<std::int64_t>(),
                                                               gi[0].cuda_data<T>(), N, C);
                       });
                     });
    return out;
  }
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
  const Device dev = common_device("mse_loss", {{"input", &input}, {"target", &target}});
  require_float(input, "mse_loss", "input");
  require_float(target, "mse_loss", "target");
  QAT_REQUIRE(input.shape() == target.shape() && input.dtype() == target.dtype(), "mse_loss", "input ",
              dtype_name(input.dtype()), input.shape(), " and target ", dtype_name(target.dtype()),
              target.shape(), " must match");
  QAT_REQUIRE(input.numel() > 0, "mse_loss", "empty input");
  const std::int64_t n = input.numel();
  if (dev == Device::CUDA) {
    Tensor out = Tensor::empty(Shape{}, input.dtype(), Device::CUDA);
    detail::dispatch_float(input.dtype(), "mse_loss", [&]<class T>() {
      kernels::cuda::mse(input.cuda_data<T>(), target.cuda_data<T>(), out.cuda_data<T>(), n);
    });
    autograd::record(out, "mse_loss", {input, target},
                     [n](const Tensor& g, const Inputs& in, Grads& gi) {
                       common_device("mse_loss_backward", {{"grad", &g}, {"input", &in[0]}});
                       Tensor da = Tensor::empty(in[0].shape(), in[0].dtype(), Device::CUDA);
                       detail::dispatch_float(g.dtype(), "mse_loss_backward", [&]<class T>() {
                         kernels::cuda::mse_backward(g.cuda_data<T>(), in[0].cuda_data<T>(),
                                                     in[1].cuda_data<T>(), da.cuda_data<T>(), n);
                       });
                       if (in[1].requires_grad()) gi[1] = neg(da);
                       if (in[0].requires_grad()) gi[0] = da;
                     });
    return out;
  }
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

// Hinton et al. 2015 ("Distilling the Knowledge in a Neural Network"), as PyTorch's
// F.kl_div(F.log_softmax(s / T, 1), F.softmax(t / T, 1), reduction="batchmean"):
//   p = softmax(t / T), log q = log_softmax(s / T),  loss = 1/N sum_i sum_c p_ic (log p_ic - log q_ic)
// With d = log p - log q and KL_i = sum_c p_ic d_ic:
//   ds_ic = g/(N T) (q_ic - p_ic),   dt_ic = g/(N T) p_ic (d_ic - KL_i)
// (dt: dKL_i/dlog p_c = p_c (d_c + 1), through log_softmax: p_c (d_c + 1) - p_c sum_k p_k (d_k + 1)).
Tensor kl_div_softmax(const Tensor& student_logits, const Tensor& teacher_logits, double temperature) {
  require_cpu("kl_div_softmax",
              {{"student_logits", &student_logits}, {"teacher_logits", &teacher_logits}});
  require_float(student_logits, "kl_div_softmax", "student_logits");
  require_float(teacher_logits, "kl_div_softmax", "teacher_logits");
  require_rank(student_logits, 2, "kl_div_softmax", "student_logits");
  QAT_REQUIRE(student_logits.shape() == teacher_logits.shape() &&
                  student_logits.dtype() == teacher_logits.dtype(),
              "kl_div_softmax", "student_logits ", dtype_name(student_logits.dtype()),
              student_logits.shape(), " and teacher_logits ", dtype_name(teacher_logits.dtype()),
              teacher_logits.shape(), " must match");
  QAT_REQUIRE(std::isfinite(temperature) && temperature > 0, "kl_div_softmax",
              "temperature must be finite and > 0, got ", temperature);
  const std::int64_t N = student_logits.size(0), C = student_logits.size(1);
  QAT_REQUIRE(N > 0 && C > 0, "kl_div_softmax", "empty logits of shape ", student_logits.shape());
  Tensor logq = Tensor::empty(student_logits.shape(), student_logits.dtype());
  Tensor logp = Tensor::empty(student_logits.shape(), student_logits.dtype());
  Tensor out = Tensor::empty(Shape{}, student_logits.dtype());
  detail::dispatch_float(student_logits.dtype(), "kl_div_softmax", [&]<class T>() {
    std::vector<T> row(static_cast<std::size_t>(C));
    const T inv_t = static_cast<T>(1.0 / temperature);
    double total = 0;
    for (std::int64_t i = 0; i < N; ++i) {
      for (std::int64_t c = 0; c < C; ++c) row[c] = student_logits.data<T>()[i * C + c] * inv_t;
      log_softmax_row(row.data(), logq.data<T>() + i * C, C, 1);
      for (std::int64_t c = 0; c < C; ++c) row[c] = teacher_logits.data<T>()[i * C + c] * inv_t;
      log_softmax_row(row.data(), logp.data<T>() + i * C, C, 1);
      for (std::int64_t c = 0; c < C; ++c) {
        const T lp = logp.data<T>()[i * C + c];
        const T p = std::exp(lp);
        if (p > 0) total += double(p) * double(lp - logq.data<T>()[i * C + c]);  // 0 log 0 = 0
      }
    }
    *out.data<T>() = static_cast<T>(total / static_cast<double>(N));
  });
  autograd::record(out, "kl_div_softmax", {student_logits, teacher_logits},
                   [logq, logp, N, C, temperature](const Tensor& g, const Inputs& in, Grads& gi) {
                     const bool ds = in[0].requires_grad(), dt = in[1].requires_grad();
                     if (ds) gi[0] = Tensor::empty(logq.shape(), logq.dtype());
                     if (dt) gi[1] = Tensor::empty(logp.shape(), logp.dtype());
                     detail::dispatch_float(g.dtype(), "kl_div_softmax_backward", [&]<class T>() {
                       const T k = *g.data<T>() / static_cast<T>(static_cast<double>(N) * temperature);
                       for (std::int64_t i = 0; i < N; ++i) {
                         const T* lq = logq.data<T>() + i * C;
                         const T* lp = logp.data<T>() + i * C;
                         if (ds)
                           for (std::int64_t c = 0; c < C; ++c)
                             gi[0].data<T>()[i * C + c] = k * (std::exp(lq[c]) - std::exp(lp[c]));
                         if (dt) {
                           T kl = 0;
                           for (std::int64_t c = 0; c < C; ++c) {
                             const T p = std::exp(lp[c]);
                             if (p > 0) kl += p * (lp[c] - lq[c]);
                           }
                           for (std::int64_t c = 0; c < C; ++c) {
                             const T p = std::exp(lp[c]);
                             gi[1].data<T>()[i * C + c] = p > 0 ? k * p * (lp[c] - lq[c] - kl) : T(0);
                           }
                         }
                       }
                     });
                   });
  return out;
}

// Hinton et al. 2015, Sec. 2: the soft-target term is multiplied by T^2 so that its gradient
// keeps its size when T changes:  (1 - w) CE(s, y) + w T^2 KL(softmax(t/T) || softmax(s/T)).
Tensor distillation_loss(const Tensor& student_logits, const Tensor& teacher_logits,
                         const Tensor& labels, double weight, double temperature) {
  QAT_REQUIRE(std::isfinite(weight) && weight >= 0 && weight <= 1, "distillation_loss",
              "weight must be in [0, 1], got ", weight);
  const Tensor kl = kl_div_softmax(student_logits, teacher_logits, temperature);
  const Tensor ce = cross_entropy(student_logits, labels);
  return add(mul(ce, 1.0 - weight), mul(kl, weight * temperature * temperature));
}

}  // namespace qat
