#pragma once
#include "framework/nn/module.h"

namespace qat::nn {

/// Batch normalisation per channel (Ioffe & Szegedy 2015), PyTorch's _BatchNorm: weight 1,
/// bias 0; buffers running_mean 0, running_var 1, num_batches_tracked. BatchNorm1d and
/// BatchNorm2d differ only in the input shapes they accept.
class BatchNorm : public Module {
 public:
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
  /// running_mean finite, running_var finite and >= 0, num_batches_tracked >= 0.
  void check_state(const StateView& state, std::vector<std::string>& problems) const override;
  /// Frozen statistics: the layer normalises with its running statistics and never updates them,
  /// as in eval mode, even while the model trains, until freeze_stats(false). A runtime switch
  /// like the training flag, not saved in checkpoints.
  void freeze_stats(bool on = true) { frozen_ = on; }
  bool stats_frozen() const { return frozen_; }

  std::int64_t num_features() const { return num_features_; }
  double eps() const { return eps_; }
  double momentum() const { return momentum_; }
  const Tensor& weight() const { return weight_; }  // undefined without affine
  const Tensor& bias() const { return bias_; }
  const Tensor& running_mean() const { return running_mean_; }
  const Tensor& running_var() const { return running_var_; }

 protected:
  BatchNorm(std::string type, std::int64_t num_features, double eps, double momentum, bool affine);
  /// Throws, naming the layer, unless x has a shape this layer normalises.
  virtual void check_input(const Tensor& x) const = 0;

 private:
  std::int64_t num_features_;
  double eps_, momentum_;
  bool frozen_ = false;
  Tensor weight_, bias_, running_mean_, running_var_, num_batches_tracked_;
};

/// Batch norm over (N, C) or (N, C, L), per channel C (PyTorch's BatchNorm1d).
class BatchNorm1d : public BatchNorm {
 public:
  explicit BatchNorm1d(std::int64_t num_features, double eps = 1e-5, double momentum = 0.1,
                       bool affine = true)
      : BatchNorm("BatchNorm1d", num_features, eps, momentum, affine) {}

 protected:
  void check_input(const Tensor& x) const override;
};

/// Batch norm over (N, C, H, W), per channel C (PyTorch's BatchNorm2d).
class BatchNorm2d : public BatchNorm {
 public:
  explicit BatchNorm2d(std::int64_t num_features, double eps = 1e-5, double momentum = 0.1,
                       bool affine = true)
      : BatchNorm("BatchNorm2d", num_features, eps, momentum, affine) {}

 protected:
  void check_input(const Tensor& x) const override;
};

}  // namespace qat::nn
