#pragma once
// Parameter-free layers: activations, reshaping, pooling, dropout.
#include "framework/autograd/ops.h"
#include "framework/nn/module.h"
#include "framework/tensor/random.h"

namespace qat::nn {

class ReLU : public Module {
 public:
  ReLU() : Module("ReLU") {}
  Tensor forward(const Tensor& x) override { return relu(x); }
};

class Identity : public Module {
 public:
  Identity() : Module("Identity") {}
  Tensor forward(const Tensor& x) override { return x; }
};

/// Merges dimensions start_dim..end_dim (default: everything but the batch).
class Flatten : public Module {
 public:
  explicit Flatten(int start_dim = 1, int end_dim = -1)
      : Module("Flatten"), start_dim_(start_dim), end_dim_(end_dim) {}
  Tensor forward(const Tensor& x) override { return flatten(x, start_dim_, end_dim_); }

 private:
  int start_dim_, end_dim_;
};

/// Inverted dropout with probability p in training mode, identity in eval mode. Draws from
/// the default generator unless given one (which must outlive the module).
class Dropout : public Module {
 public:
  explicit Dropout(double p = 0.5, Generator* gen = nullptr);
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
  double p() const { return p_; }

 private:
  double p_;
  Generator* gen_;
};

class MaxPool2d : public Module {
 public:
  explicit MaxPool2d(const Pool2dParams& params) : Module("MaxPool2d"), params_(params) {}
  explicit MaxPool2d(std::int64_t kernel) : MaxPool2d(Pool2dParams{.kernel = {kernel, kernel}}) {}
  Tensor forward(const Tensor& x) override { return max_pool2d(x, params_); }
  std::string extra_repr() const override;
  const Pool2dParams& params() const { return params_; }
  const Pool2dParams* max_pool_params() const override { return &params_; }

 private:
  Pool2dParams params_;
};

class AvgPool2d : public Module {
 public:
  explicit AvgPool2d(const Pool2dParams& params) : Module("AvgPool2d"), params_(params) {}
  explicit AvgPool2d(std::int64_t kernel) : AvgPool2d(Pool2dParams{.kernel = {kernel, kernel}}) {}
  Tensor forward(const Tensor& x) override { return avg_pool2d(x, params_); }
  std::string extra_repr() const override;
  const Pool2dParams& params() const { return params_; }

 private:
  Pool2dParams params_;
};

class AdaptiveAvgPool2d : public Module {
 public:
  explicit AdaptiveAvgPool2d(Pair output_size)
      : Module("AdaptiveAvgPool2d"), output_size_(output_size) {}
  Tensor forward(const Tensor& x) override { return adaptive_avg_pool2d(x, output_size_); }
  std::string extra_repr() const override;
  Pair output_size() const { return output_size_; }

 private:
  Pair output_size_;
};

}  // namespace qat::nn
