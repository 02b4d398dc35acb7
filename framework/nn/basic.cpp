#include "framework/nn/basic.h"

#include <string>

namespace qat::nn {
namespace {
std::string pair_str(Pair p) { return "(" + std::to_string(p[0]) + ", " + std::to_string(p[1]) + ")"; }
std::string pool_repr(const Pool2dParams& p) {
  const Pair stride = p.stride == Pair{0, 0} ? p.kernel : p.stride;
  return "kernel_size=" + pair_str(p.kernel) + ", stride=" + pair_str(stride) +
         ", padding=" + pair_str(p.padding);
}
}  // namespace

Dropout::Dropout(double p, Generator* gen) : Module("Dropout"), p_(p), gen_(gen) {
  QAT_REQUIRE(p >= 0.0 && p <= 1.0, "Dropout", "p must be in [0, 1], got ", p);
}

Tensor Dropout::forward(const Tensor& x) {
  return dropout(x, p_, is_training(), gen_ ? *gen_ : default_generator());
}

std::string Dropout::extra_repr() const { return "p=" + std::to_string(p_); }
std::string MaxPool2d::extra_repr() const { return pool_repr(params_); }
std::string AvgPool2d::extra_repr() const {
  return pool_repr(params_) + (params_.count_include_pad ? "" : ", count_include_pad=false");
}
std::string AdaptiveAvgPool2d::extra_repr() const { return "output_size=" + pair_str(output_size_); }

}  // namespace qat::nn
