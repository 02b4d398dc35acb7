#include "framework/nn/batchnorm.h"

#include <limits>

#include "framework/autograd/ops.h"
#include "framework/kernels/cuda/kernels.h"
#include "framework/nn/state_check.h"

namespace qat::nn {

BatchNorm::BatchNorm(std::string type, std::int64_t num_features, double eps, double momentum,
                     bool affine)
    : Module(std::move(type)), num_features_(num_features), eps_(eps), momentum_(momentum) {
  QAT_REQUIRE(num_features > 0, type_name(), "num_features must be positive, got ", num_features);
  QAT_REQUIRE(eps > 0, type_name(), "eps must be positive, got ", eps);
  QAT_REQUIRE(momentum >= 0 && momentum <= 1, type_name(), "momentum must be in [0, 1], got ", momentum);
  if (affine) {
    weight_ = register_parameter("weight", Tensor::ones(Shape{num_features}));
    bias_ = register_parameter("bias", Tensor::zeros(Shape{num_features}));
  }
  running_mean_ = register_buffer("running_mean", Tensor::zeros(Shape{num_features}));
  running_var_ = register_buffer("running_var", Tensor::ones(Shape{num_features}));
  num_batches_tracked_ = register_buffer("num_batches_tracked", Tensor::zeros(Shape{}, DType::Int64));
}

void BatchNorm1d::check_input(const Tensor& x) const {
  QAT_REQUIRE(x.defined() && (x.dim() == 2 || x.dim() == 3) && x.size(1) == num_features(),
              "BatchNorm1d::forward", "expected input (N, ", num_features(), ") or (N, ", num_features(),
              ", L), got ", x.defined() ? x.shape().str() : "undefined");
}

void BatchNorm2d::check_input(const Tensor& x) const {
  QAT_REQUIRE(x.defined() && x.dim() == 4 && x.size(1) == num_features(), "BatchNorm2d::forward",
              "expected input (N, ", num_features(), ", H, W), got ",
              x.defined() ? x.shape().str() : "undefined");
}

Tensor BatchNorm::forward(const Tensor& x) {
  check_input(x);
  const bool batch_stats = is_training() && !frozen_;  // frozen: as in eval mode
  if (batch_stats && num_batches_tracked_.device() == Device::CUDA)
    kernels::cuda::increment(num_batches_tracked_.cuda_data<std::int64_t>());  // no host sync
  else if (batch_stats)
    ++*num_batches_tracked_.data<std::int64_t>();
  return batch_norm(x, running_mean_, running_var_, weight_, bias_, batch_stats, momentum_, eps_);
}

std::string BatchNorm::extra_repr() const {
  return std::to_string(num_features_) + ", eps=" + std::to_string(eps_) +
         ", momentum=" + std::to_string(momentum_) + (weight_.defined() ? "" : ", affine=false") +
         (frozen_ ? ", stats frozen" : "");
}

// Running statistics a forward can use: var + eps > 0 needs var >= 0 (0 is a channel that never
// varied); the counter only grows.
void BatchNorm::check_state(const StateView& state, std::vector<std::string>& problems) const {
  check::finite(problems, state, "running_mean");
  check::in_range(problems, state, "running_var", 0, std::numeric_limits<double>::max(), "a variance");
  check::in_range(problems, state, "num_batches_tracked", 0,
                  static_cast<double>(std::numeric_limits<std::int64_t>::max()), "a batch count");
}

}  // namespace qat::nn
