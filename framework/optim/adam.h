#pragma once
#include <array>

#include "framework/optim/optimizer.h"

namespace qat::optim {

/// Adam (Kingma & Ba 2015) as torch.optim.Adam (PyTorch 1.13), weight decay as an L2 term:
///   g = grad + weight_decay * p
///   m = beta1 * m + (1 - beta1) * g;   v = beta2 * v + (1 - beta2) * g^2
///   v_max = max(v_max, v) and used instead of v  (amsgrad)
///   p -= lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
/// State per parameter: "exp_avg", "exp_avg_sq", "max_exp_avg_sq" (amsgrad) and the int64
/// counter "step".
class Adam : public Optimizer {
 public:
  struct Options {
    double lr = 1e-3;
    std::array<double, 2> betas{0.9, 0.999};
    double eps = 1e-8;
    double weight_decay = 0.0;
    bool amsgrad = false;
  };

  /// Throws if lr < 0, a beta is outside [0, 1), eps <= 0 or weight_decay < 0.
  Adam(NamedTensors params, const Options& options);

  const Options& options() const { return options_; }
  std::string kind() const override { return "adam"; }
  std::map<std::string, double> hyperparameters() const override;

 protected:
  Adam(NamedTensors params, const Options& options, const char* fn, bool decoupled);
  std::vector<Slot> slots() const override;
  void update(Tensor& param, const Tensor& grad, std::vector<Tensor>& state) override;
  void update_cuda(std::vector<CudaUpdate>& batch) override;

 private:
  Options options_;
  bool decoupled_;  // AdamW
};

/// AdamW (Loshchilov & Hutter 2019) as torch.optim.AdamW (PyTorch 1.13): Adam without the L2
/// term, with decoupled decay p *= 1 - lr * weight_decay before the Adam update.
class AdamW : public Adam {
 public:
  struct Options {
    double lr = 1e-3;
    std::array<double, 2> betas{0.9, 0.999};
    double eps = 1e-8;
    double weight_decay = 1e-2;
    bool amsgrad = false;
  };

  /// Throws if lr < 0, a beta is outside [0, 1), eps <= 0 or weight_decay < 0.
  AdamW(NamedTensors params, const Options& options);

  std::string kind() const override { return "adamw"; }
};

}  // namespace qat::optim
