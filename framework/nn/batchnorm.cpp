#include "framework/nn/batchnorm.h"

#include <limits>

#include "framework/autograd/ops.h"
#include "framework/nn/state_check.h"

namespace qat::nn {

BatchNorm2d::BatchNorm2d(std::int64_t num_features, double eps, double momentum, bool affine)
    : Module("BatchNorm2d"), num_features_(num_features), eps_(eps), momentum_(momentum) {
  QAT_REQUIRE(num_features > 0, "BatchNorm2d", "num_features must be positive, got ", num_features);
  QAT_REQUIRE(eps > 0, "BatchNorm2d", "eps must be positive, got ", eps);
  QAT_REQUIRE(momentum >= 0 && momentum <= 1, "BatchNorm2d", "momentum must be in [0, 1], got ",
              momentum);
  if (affine) {
    weight_ = register_parameter("weight", Tensor::ones(Shape{num_features}));
    bias_ = register_parameter("bias", Tensor::zeros(Shape{num_features}));
  }
  running_mean_ = register_buffer("running_mean", Tensor::zeros(Shape{num_features}));
  running_var_ = register_buffer("running_var", Tensor::ones(Shape{num_features}));
  num_batches_tracked_ = register_buffer("num_batches_tracked", Tensor::zeros(Shape{}, DType::Int64));
}

Tensor BatchNorm2d::forward(const Tensor& x) {
  QAT_REQUIRE(x.defined() && x.dim() == 4 && x.size(1) == num_features_, "BatchNorm2d::forward",
              "expected input (N, ", num_features_, ", H, W), got ",
              x.defined() ? x.shape().str() : "undefined");
  const bool batch_stats = is_training() && !frozen_;  // frozen: as in eval mode
  if (batch_stats) ++*num_batches_tracked_.data<std::int64_t>();
  return batch_norm(x, running_mean_, running_var_, weight_, bias_, batch_stats, momentum_, eps_);
}

std::string BatchNorm2d::extra_repr() const {
  return std::to_string(num_features_) + ", eps=" + std::to_string(eps_) +
         ", momentum=" + std::to_string(momentum_) + (weight_.defined() ? "" : ", affine=false") +
         (frozen_ ? ", stats frozen" : "");
}

// Running statistics a forward can use: var + eps > 0 needs var >= 0 (0 is a channel that never
// varied); the counter only grows.
void BatchNorm2d::check_state(const StateView& state, std::vector<std::string>& problems) const {
  check::finite(problems, state, "running_mean");
  check::in_range(problems, state, "running_var", 0, std::numeric_limits<double>::max(), "a variance");
  check::in_range(problems, state, "num_batches_tracked", 0,
                  static_cast<double>(std::numeric_limits<std::int64_t>::max()), "a batch count");
}

}  // namespace qat::nn
