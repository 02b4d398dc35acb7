#include "framework/nn/conv.h"

#include <cmath>

#include "framework/nn/init.h"

namespace qat::nn {

Conv2d::Conv2d(std::int64_t in_channels, std::int64_t out_channels, Pair kernel_size,
               const Conv2dParams& params, bool bias)
    : Module("Conv2d"),
      in_channels_(in_channels),
      out_channels_(out_channels),
      kernel_size_(kernel_size),
      params_(params) {
  QAT_REQUIRE(in_channels > 0 && out_channels > 0, "Conv2d", "in_channels (", in_channels,
              ") and out_channels (", out_channels, ") must be positive");
  QAT_REQUIRE(kernel_size[0] > 0 && kernel_size[1] > 0, "Conv2d", "kernel_size (", kernel_size[0], ", ",
              kernel_size[1], ") must be positive");
  QAT_REQUIRE(params.groups > 0 && in_channels % params.groups == 0 && out_channels % params.groups == 0,
              "Conv2d", "groups (", params.groups, ") must divide in_channels (", in_channels,
              ") and out_channels (", out_channels, ")");
  Tensor w =
      Tensor::empty(Shape{out_channels, in_channels / params.groups, kernel_size[0], kernel_size[1]});
  init::kaiming_uniform_(w, std::sqrt(5.0));
  weight_ = register_parameter("weight", w);
  if (bias) {
    Tensor b = Tensor::empty(Shape{out_channels});
    const double bound = 1.0 / std::sqrt(static_cast<double>(init::fan_in(w)));
    init::uniform_(b, -bound, bound);
    bias_ = register_parameter("bias", b);
  }
}

Tensor Conv2d::forward(const Tensor& x) { return conv2d(x, weight_, bias_, params_); }

std::string conv_params_repr(const Conv2dParams& p) {
  auto pair = [](Pair v) { return "(" + std::to_string(v[0]) + ", " + std::to_string(v[1]) + ")"; };
  std::string s = "stride=" + pair(p.stride) + ", padding=" + pair(p.padding);
  if (p.dilation != Pair{1, 1}) s += ", dilation=" + pair(p.dilation);
  if (p.groups != 1) s += ", groups=" + std::to_string(p.groups);
  return s;
}

std::string Conv2d::extra_repr() const {
  return std::to_string(in_channels_) + ", " + std::to_string(out_channels_) + ", kernel_size=(" +
         std::to_string(kernel_size_[0]) + ", " + std::to_string(kernel_size_[1]) + "), " +
         conv_params_repr(params_) + (bias_.defined() ? "" : ", bias=false");
}

}  // namespace qat::nn
