#pragma once
#include "framework/nn/module.h"

namespace qat::nn {

/// Batch normalisation over (N, C, H, W) per channel (Ioffe & Szegedy 2015), PyTorch's
/// BatchNorm2d: weight 1, bias 0; buffers running_mean 0, running_var 1, num_batches_tracked.
class BatchNorm2d : public Module {
 public:
  explicit BatchNorm2d(std::int64_t num_features, double eps = 1e-5, double momentum = 0.1,
                       bool affine = true);
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

 private:
  std::int64_t num_features_;
  double eps_, momentum_;
  bool frozen_ = false;
  Tensor weight_, bias_, running_mean_, running_var_, num_batches_tracked_;
};

}  // namespace qat::nn
