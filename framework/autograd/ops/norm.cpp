// Batch normalisation (Ioffe & Szegedy 2015) over x viewed as (N, C, S), S the product of the
// spatial dimensions. Statistics are accumulated in double (kernels/cpu/norm.h); channels run in
// parallel, each in a fixed order, so results do not depend on the thread count. On CUDA, one
// block per channel sums in double in a fixed tree (batch_norm_cuda).
#include "framework/kernels/cpu/norm.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "framework/autograd/node.h"
#include "framework/autograd/ops.h"
#include "framework/distributed/replica.h"
#include "framework/kernels/cuda/kernels.h"
#include "framework/tensor/dispatch.h"

namespace qat {

using Grads = std::vector<Tensor>;
using Inputs = std::vector<Tensor>;
using i64 = std::int64_t;
constexpr i64 kParallelMin = 1 << 16;  // elements below which threads cost more than they save

namespace {

struct BnView {
  i64 N, C, S;
  i64 M() const { return N * S; }  // values per channel
};

void require_channel_vector(const Tensor& t, i64 C, const char* arg) {
  require_float(t, "batch_norm", arg);
  QAT_REQUIRE(t.dim() == 1 && t.size(0) == C, "batch_norm", "argument '", arg, "' must have shape [", C,
              "], got ", t.shape());
}

BnView bn_view(const Tensor& x, const Tensor& rm, const Tensor& rv, const Tensor& w, const Tensor& b,
               bool training, double momentum, double eps) {
  require_float(x, "batch_norm", "x");
  QAT_REQUIRE(x.dim() >= 2 && x.dim() <= 4, "batch_norm",
              "x must be (N, C), (N, C, L) or (N, C, H, W), got shape ", x.shape());
  QAT_REQUIRE(x.numel() > 0, "batch_norm", "x of shape ", x.shape(), " is empty");
  BnView v{x.size(0), x.size(1), x.numel() / (x.size(0) * x.size(1))};
  for (const auto& [t, arg] : {std::pair{&w, "weight"}, std::pair{&b, "bias"}}) {
    if (!t->defined()) continue;
    require_channel_vector(*t, v.C, arg);
    QAT_REQUIRE(t->dtype() == x.dtype(), "batch_norm", "argument '", arg, "' is ",
                dtype_name(t->dtype()), " but x is ", dtype_name(x.dtype()));
  }
  QAT_REQUIRE(rm.defined() == rv.defined(), "batch_norm",
              "running_mean and running_var must be given together");
  if (rm.defined()) {
    require_channel_vector(rm, v.C, "running_mean");
    require_channel_vector(rv, v.C, "running_var");
  }
  QAT_REQUIRE(training || rm.defined(), "batch_norm", "eval mode needs running_mean and running_var");
  QAT_REQUIRE(!training || v.M() > 1, "batch_norm",
              "expected more than 1 value per channel when training, got x of shape ", x.shape());
  QAT_REQUIRE(momentum >= 0 && momentum <= 1, "batch_norm", "momentum must be in [0, 1], got ",
              momentum);
  QAT_REQUIRE(eps >= 0, "batch_norm", "eps must be non-negative, got ", eps);
  return v;
}

// The channel values as doubles, whatever the float dtype of t.
std::vector<double> read_channels(const Tensor& t) {
  return detail::dispatch_float(t.dtype(), "batch_norm", [&]<class T>() {
    const T* p = t.data<T>();
    return std::vector<double>(p, p + t.numel());
  });
}

// SyncBatchNorm (data-parallel training): the statistics of the global batch. Each replica's
// (count, mean, M2 = sum (x - mean)^2) per channel are gathered and combined in rank order
// (Chan et al. 1979: mean += d n_r / n, M2 += M2_r + d^2 n_prev n_r / n), so every replica gets
// the same bits. Returns the global count.
double combine_over_replicas(const distributed::ProcessGroup& group, i64 M, std::vector<double>& mean,
                             std::vector<double>& var) {
  const std::size_t C = mean.size();
  Tensor mine = Tensor::empty(Shape{static_cast<i64>(1 + 2 * C)}, DType::Float64);
  double* m = mine.data<double>();
  m[0] = static_cast<double>(M);
  for (std::size_t c = 0; c < C; ++c) {
    m[1 + c] = mean[c];
    m[1 + C + c] = var[c] * static_cast<double>(M);
  }
  const Tensor all = const_cast<distributed::ProcessGroup&>(group).all_gather(mine);
  const double* a = all.data<double>();
  double n = 0;
  std::vector<double> gmean(C, 0.0), m2(C, 0.0);
  for (int r = 0; r < group.world_size(); ++r) {
    const double* row = a + r * (1 + 2 * C);
    const double nr = row[0], total = n + nr;
    for (std::size_t c = 0; c < C; ++c) {
      const double d = row[1 + c] - gmean[c];
      gmean[c] += d * nr / total;
      m2[c] += row[1 + C + c] + d * d * n * nr / total;
    }
    n = total;
  }
  for (std::size_t c = 0; c < C; ++c) {
    mean[c] = gmean[c];
    var[c] = std::max(m2[c] / n, 0.0);
  }
  return n;
}

// The CUDA path: the statistics (and the running update) per channel, then y = x a + shift;
// backward the per-channel sums, then dx (kernels.h, batch_norm_*). Saves mean and invstd
// (double, on the device) for the backward, as the CPU path.
Tensor batch_norm_cuda(const Tensor& x, const Tensor& running_mean, const Tensor& running_var,
                       const Tensor& weight, const Tensor& bias, const BnView& v, bool training,
                       double momentum, double eps) {
  QAT_REQUIRE(
      !training || !distributed::replica_group() || distributed::replica_group()->world_size() == 1,
      "batch_norm",
      "synchronized statistics (data-parallel training) are not implemented on "
      "CUDA yet (x ",
      x.shape(), " is on cuda)");
  QAT_REQUIRE(
      !running_mean.defined() || (running_mean.dtype() == x.dtype() && running_var.dtype() == x.dtype()),
      "batch_norm", "on CUDA running_mean and running_var must have x's dtype ", dtype_name(x.dtype()),
      ", got ", dtype_name(running_mean.dtype()), " and ", dtype_name(running_var.dtype()));
  Tensor out = Tensor::empty(x.shape(), x.dtype(), Device::CUDA);
  Tensor mean = Tensor::empty(Shape{v.C}, DType::Float64, Device::CUDA);
  Tensor invstd = Tensor::empty(Shape{v.C}, DType::Float64, Device::CUDA);
  detail::dispatch_float(x.dtype(), "batch_norm", [&]<class T>() {
    auto ptr = [](const Tensor& t) { return t.defined() ? t.cuda_data<T>() : nullptr; };
    Tensor affine = Tensor::empty(Shape{2 * v.C}, x.dtype(), Device::CUDA);  // a, then shift
    T* a = affine.cuda_data<T>();
    kernels::cuda::batch_norm_stats(x.cuda_data<T>(), ptr(weight), ptr(bias), ptr(running_mean),
                                    ptr(running_var), mean.cuda_data<double>(),
                                    invstd.cuda_data<double>(), a, a + v.C, v.N, v.C, v.S, training,
                                    momentum, eps);
    kernels::cuda::batch_norm_affine(x.cuda_data<T>(), a, a + v.C, out.cuda_data<T>(), v.N, v.C, v.S);
  });
  autograd::record(
      out, "batch_norm", {x, weight, bias},
      [v, training, mean, invstd](const Tensor& g, const Inputs& in, Grads& gi) {
        const Tensor &X = in[0], &Wt = in[1], &B = in[2];
        common_device("batch_norm_backward", {{"grad", &g}, {"x", &X}});
        const bool need_x = X.requires_grad(), need_w = Wt.defined() && Wt.requires_grad(),
                   need_b = B.defined() && B.requires_grad();
        if (need_x) gi[0] = Tensor::empty(X.shape(), X.dtype(), Device::CUDA);
        if (need_w) gi[1] = Tensor::empty(Wt.shape(), Wt.dtype(), Device::CUDA);
        if (need_b) gi[2] = Tensor::empty(B.shape(), B.dtype(), Device::CUDA);
        detail::dispatch_float(g.dtype(), "batch_norm_backward", [&]<class T>() {
          auto ptr = [](const Tensor& t, bool need) { return need ? t.cuda_data<T>() : nullptr; };
          Tensor scratch = Tensor::empty(Shape{4 * v.C}, g.dtype(), Device::CUDA);
          kernels::cuda::batch_norm_backward(g.cuda_data<T>(), X.cuda_data<T>(), ptr(Wt, Wt.defined()),
                                             mean.cuda_data<double>(), invstd.cuda_data<double>(),
                                             ptr(gi[0], need_x), ptr(gi[1], need_w), ptr(gi[2], need_b),
                                             scratch.cuda_data<T>(), v.N, v.C, v.S, training);
        });
      });
  return out;
}

}  // namespace

// y = (x - mean) * invstd * w + b, with (mean, var) the batch's (biased) statistics in training
// and the running ones in eval;  xhat = (x - mean) * invstd,  dw = sum(g xhat),  db = sum(g);
// training: dx = w invstd (g - db/M - xhat dw/M);  eval: dx = g w invstd
Tensor batch_norm(const Tensor& x, Tensor running_mean, Tensor running_var, const Tensor& weight,
                  const Tensor& bias, bool training, double momentum, double eps) {
  const Device dev = common_device("batch_norm", {{"x", &x},
                                                  {"running_mean", &running_mean},
                                                  {"running_var", &running_var},
                                                  {"weight", &weight},
                                                  {"bias", &bias}});
  const BnView v = bn_view(x, running_mean, running_var, weight, bias, training, momentum, eps);
  if (dev == Device::CUDA)
    return batch_norm_cuda(x, running_mean, running_var, weight, bias, v, training, momentum, eps);
  // In a data-parallel training forward, the statistics are the global batch's (SyncBatchNorm).
  distributed::ProcessGroupPtr replicas = training ? distributed::replica_group() : nullptr;
  if (replicas && replicas->world_size() == 1) replicas = nullptr;
  double count = static_cast<double>(v.M());  // values per channel in the (global) batch
  std::vector<double> mean(v.C), invstd(v.C);
  Tensor out = Tensor::empty(x.shape(), x.dtype());
  detail::dispatch_float(x.dtype(), "batch_norm", [&]<class T>() {
    const T* px = x.data<T>();
    T* py = out.data<T>();
    const T* pw = weight.defined() ? weight.data<T>() : nullptr;
    const T* pb = bias.defined() ? bias.data<T>() : nullptr;
    std::vector<double> var(v.C);
    if (!training) {
      mean = read_channels(running_mean);
      var = read_channels(running_var);
    }
    // shifted by the channel's first value p:  mean = p + s1/M,  var = s2/M - (s1/M)^2
    auto moments = [&](i64 c) {
      const T* xc = px + c * v.S;
      const double p = xc[0], M = static_cast<double>(v.M());
      double s1 = 0, s2 = 0;
      kernels::channel_moments(xc, v.N, v.S, v.C * v.S, p, &s1, &s2);
      mean[c] = p + s1 / M;
      var[c] = std::max(s2 / M - (s1 / M) * (s1 / M), 0.0);
    };
    const bool local_stats = training && !replicas;
    if (replicas) {  // statistics of every channel first, then the global batch's
#pragma omp parallel for schedule(static) if (v.N * v.C * v.S >= kParallelMin)
      for (i64 c = 0; c < v.C; ++c) moments(c);
      count = combine_over_replicas(*replicas, v.M(), mean, var);
    }
    // one channel at a time, statistics then y = x a + b, so that the second pass over the
    // channel's values finds them in cache
#pragma omp parallel for schedule(static) if (v.N * v.C * v.S >= kParallelMin)
    for (i64 c = 0; c < v.C; ++c) {
      const T* xc = px + c * v.S;
      if (local_stats) moments(c);
      invstd[c] = 1.0 / std::sqrt(var[c] + eps);
      const double scale = invstd[c] * (pw ? pw[c] : 1.0);
      const T a = static_cast<T>(scale), b = static_cast<T>((pb ? pb[c] : 0.0) - mean[c] * scale);
      kernels::channel_affine(xc, py + c * v.S, v.N, v.S, v.C * v.S, a, b);
    }
    if (training && running_mean.defined()) {
      // running = (1 - momentum) running + momentum batch, with the unbiased variance
      const double unbias = count / (count - 1);
      detail::dispatch_float(running_mean.dtype(), "batch_norm", [&]<class R>() {
        R* rm = running_mean.data<R>();
        for (i64 c = 0; c < v.C; ++c)
          rm[c] = static_cast<R>((1 - momentum) * rm[c] + momentum * mean[c]);
      });
      detail::dispatch_float(running_var.dtype(), "batch_norm", [&]<class R>() {
        R* rv = running_var.data<R>();
        for (i64 c = 0; c < v.C; ++c)
          rv[c] = static_cast<R>((1 - momentum) * rv[c] + momentum * var[c] * unbias);
      });
    }
  });
  // training: dx = k (g - sum(g)/M - xhat sum(g xhat)/M), with M and both sums over the global
  // batch when synced (each replica keeps its own dw = sum(g xhat), db = sum(g): DDP averages
  // them as any parameter gradient)
  autograd::record(
      out, "batch_norm", {x, weight, bias},
      [v, training, count, replicas, mean = std::move(mean), invstd = std::move(invstd)](
          const Tensor& g, const Inputs& in, Grads& gi) {
        const Tensor &X = in[0], &Wt = in[1], &B = in[2];
        const bool need_x = X.requires_grad(), need_w = Wt.defined() && Wt.requires_grad(),
                   need_b = B.defined() && B.requires_grad();
        if (need_x) gi[0] = Tensor::empty(X.shape(), X.dtype());
        if (need_w) gi[1] = Tensor::empty(Wt.shape(), Wt.dtype());
        if (need_b) gi[2] = Tensor::empty(B.shape(), B.dtype());
        detail::dispatch_float(g.dtype(), "batch_norm_backward", [&]<class T>() {
          const T* pg = g.data<T>();
          const T* px = X.data<T>();
          const T* pw = Wt.defined() ? Wt.data<T>() : nullptr;
          // sum(g), sum(g * xhat) of channel c; the parameter gradients
          auto grad_sums = [&](i64 c, double* sg, double* sgx) {
            *sg = *sgx = 0;
            kernels::channel_grad_sums(pg + c * v.S, px + c * v.S, v.N, v.S, v.C * v.S, mean[c], sg,
                                       sgx);
            *sgx *= invstd[c];
            if (need_w) gi[1].data<T>()[c] = static_cast<T>(*sgx);
            if (need_b) gi[2].data<T>()[c] = static_cast<T>(*sg);
          };
          auto input_grad = [&](i64 c, double sg, double sgx) {
            const double k = invstd[c] * (pw ? pw[c] : 1.0);
            const double mg = training ? sg / count : 0, kx = training ? k * invstd[c] * sgx / count : 0;
            // dx = k (g - mg) - kx (x - m) = k (g - mg - xhat mgx)
            kernels::channel_backward(pg + c * v.S, px + c * v.S, gi[0].data<T>() + c * v.S, v.N, v.S,
                                      v.C * v.S, k, mg, kx, mean[c]);
          };
          if (!replicas || !need_x) {
#pragma omp parallel for schedule(static) if (v.N * v.C * v.S >= kParallelMin)
            for (i64 c = 0; c < v.C; ++c) {
              double sg, sgx;
              grad_sums(c, &sg, &sgx);
              if (need_x) input_grad(c, sg, sgx);
            }
            return;
          }
          std::vector<double> sums(2 * v.C);  // [sum(g)..., sum(g xhat)...], then over replicas
#pragma omp parallel for schedule(static) if (v.N * v.C * v.S >= kParallelMin)
          for (i64 c = 0; c < v.C; ++c) grad_sums(c, &sums[c], &sums[v.C + c]);
          replicas->all_reduce(sums.data(), 2 * v.C, DType::Float64, distributed::ReduceOp::Sum);
#pragma omp parallel for schedule(static) if (v.N * v.C * v.S >= kParallelMin)
          for (i64 c = 0; c < v.C; ++c) input_grad(c, sums[c], sums[v.C + c]);
        });
      });
  return out;
}

}  // namespace qat
