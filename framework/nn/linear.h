#pragma once
#include "framework/nn/module.h"

namespace qat::nn {

/// y = x W^T + b. weight (out, in) Kaiming-uniform(a = sqrt 5), bias U(+-1/sqrt(in)), as PyTorch.
class Linear : public Module {
 public:
  Linear(std::int64_t in_features, std::int64_t out_features, bool bias = true);
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;

  std::int64_t in_features() const { return in_features_; }
  std::int64_t out_features() const { return out_features_; }
  const Tensor& weight() const { return weight_; }
  const Tensor& bias() const { return bias_; }  // undefined without bias

 private:
  std::int64_t in_features_, out_features_;
  Tensor weight_, bias_;
};

}  // namespace qat::nn
