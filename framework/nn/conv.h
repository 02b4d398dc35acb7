#pragma once
#include "framework/autograd/ops.h"
#include "framework/nn/module.h"

namespace qat::nn {

/// 2-D convolution over (N, C, H, W). weight (out, in/groups, kh, kw) Kaiming-uniform(a = sqrt 5),
/// bias U(+-1/sqrt(fan_in)), as PyTorch.
class Conv2d : public Module {
 public:
  Conv2d(std::int64_t in_channels, std::int64_t out_channels, Pair kernel_size,
         const Conv2dParams& params = {}, bool bias = true);
  Conv2d(std::int64_t in_channels, std::int64_t out_channels, std::int64_t kernel_size,
         const Conv2dParams& params = {}, bool bias = true)
      : Conv2d(in_channels, out_channels, Pair{kernel_size, kernel_size}, params, bias) {}
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;

  std::int64_t in_channels() const { return in_channels_; }
  std::int64_t out_channels() const { return out_channels_; }
  Pair kernel_size() const { return kernel_size_; }
  const Conv2dParams& params() const { return params_; }
  const Tensor& weight() const { return weight_; }
  const Tensor& bias() const { return bias_; }

 private:
  std::int64_t in_channels_, out_channels_;
  Pair kernel_size_;
  Conv2dParams params_;
  Tensor weight_, bias_;
};

/// Helper: "stride=(1, 1), padding=(2, 2)" style text for summaries.
std::string conv_params_repr(const Conv2dParams& p);

}  // namespace qat::nn
