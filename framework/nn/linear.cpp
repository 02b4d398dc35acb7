#include "framework/nn/linear.h"

#include <cmath>

#include "framework/autograd/ops.h"
#include "framework/nn/init.h"

namespace qat::nn {

Linear::Linear(std::int64_t in_features, std::int64_t out_features, bool bias)
    : Module("Linear"), in_features_(in_features), out_features_(out_features) {
  QAT_REQUIRE(in_features > 0 && out_features > 0, "Linear", "in_features (", in_features,
              ") and out_features (", out_features, ") must be positive");
  Tensor w = Tensor::empty(Shape{out_features, in_features});
  init::kaiming_uniform_(w, std::sqrt(5.0));
  weight_ = register_parameter("weight", w);
  if (bias) {
    Tensor b = Tensor::empty(Shape{out_features});
    const double bound = 1.0 / std::sqrt(static_cast<double>(in_features));
    init::uniform_(b, -bound, bound);
    bias_ = register_parameter("bias", b);
  }
}

Tensor Linear::forward(const Tensor& x) { return linear(x, weight_, bias_); }

std::string Linear::extra_repr() const {
  return "in_features=" + std::to_string(in_features_) +
         ", out_features=" + std::to_string(out_features_) +
         ", bias=" + (bias_.defined() ? "true" : "false");
}

}  // namespace qat::nn
