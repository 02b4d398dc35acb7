#pragma once
#include "framework/optim/optimizer.h"

namespace qat::optim {

/// Stochastic gradient descent with momentum, as torch.optim.SGD (PyTorch 1.13):
///   g = grad + weight_decay * p
///   buf = g on the first step, else momentum * buf + (1 - dampening) * g
///   g = nesterov ? g + momentum * buf : buf        (when momentum != 0)
///   p -= lr * g
class SGD : public Optimizer {
 public:
  struct Options {
    double lr = 0.01;
    double momentum = 0.0;
    double dampening = 0.0;
    double weight_decay = 0.0;
    bool nesterov = false;
  };

  /// Throws if lr, momentum or weight_decay is negative, or if nesterov is set without
  /// momentum > 0 and dampening == 0.
  SGD(NamedTensors params, const Options& options);

  const Options& options() const { return options_; }
  std::string kind() const override { return "sgd"; }
  std::map<std::string, double> hyperparameters() const override;

 protected:
  std::vector<Slot> slots() const override;
  void update(Tensor& param, const Tensor& grad, std::vector<Tensor>& state) override;
  void update_cuda(std::vector<CudaUpdate>& batch) override;

 private:
  Options options_;
};

}  // namespace qat::optim
