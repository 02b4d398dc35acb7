// The int8 layers without weights (quantized_layers.h): max pool, average pools on the input's
// grid, ReLU.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "framework/autograd/grad_mode.h"
#include "framework/tensor/parallel.h"
#include "modules/quant/kernels/cpu/int8_ops.h"
#include "modules/quant/quantized_layers.h"

namespace qat::quant {

// ---- parameter-free layers ------------------------------------------------------------------

Tensor QuantizedMaxPool2d::forward(const Tensor& x) {
  QAT_REQUIRE(x.defined() && x.dtype() == DType::UInt8 && x.is_quantized() && x.dim() == 4,
              "QuantizedMaxPool2d", "expects a quantized uint8 (N, C, H, W) input, got ",
              x.defined() ? x.str() : "an undefined tensor");
  const Pair k = params_.kernel, s = params_.stride == Pair{0, 0} ? params_.kernel : params_.stride;
  const Pair p = params_.padding;
  if (nhwc_) {  // (N, H, W, C): per output pixel, the max of its window's C-byte vectors
    const std::int64_t N = x.size(0), H = x.size(1), W = x.size(2), C = x.size(3);
    const std::int64_t Ho = (H + 2 * p[0] - k[0]) / s[0] + 1, Wo = (W + 2 * p[1] - k[1]) / s[1] + 1;
    Tensor y = Tensor::empty(Shape{N, Ho, Wo, C}, DType::UInt8);
    int8::kernels::max_pool_nhwc_u8(x.data<std::uint8_t>(), N, H, W, C, k[0], k[1], s[0], s[1], p[0],
                                    p[1], Ho, Wo, y.data<std::uint8_t>());
    y.set_quant_info(x.quant_info());
    return y;
  }
  const std::int64_t planes = x.size(0) * x.size(1), H = x.size(2), W = x.size(3);
  const std::int64_t Ho = (H + 2 * p[0] - k[0]) / s[0] + 1, Wo = (W + 2 * p[1] - k[1]) / s[1] + 1;
  Tensor y = Tensor::empty(Shape{x.size(0), x.size(1), Ho, Wo}, DType::UInt8);
  const std::uint8_t* px = x.data<std::uint8_t>();
  std::uint8_t* py = y.data<std::uint8_t>();
  if (p == Pair{0, 0}) {  // every window inside the image: no bounds checks
    int8::kernels::max_pool_u8(px, planes, H, W, k[0], k[1], s[0], s[1], Ho, Wo, py);
    y.set_quant_info(x.quant_info());
    return y;
  }
  for (std::int64_t pl = 0; pl < planes; ++pl)
    for (std::int64_t oh = 0; oh < Ho; ++oh)
      for (std::int64_t ow = 0; ow < Wo; ++ow) {
        std::uint8_t best = 0;
        for (std::int64_t i = 0; i < k[0]; ++i)
          for (std::int64_t j = 0; j < k[1]; ++j) {
            const std::int64_t h = oh * s[0] - p[0] + i, w = ow * s[1] - p[1] + j;
            if (h >= 0 && h < H && w >= 0 && w < W) best = std::max(best, px[(pl * H + h) * W + w]);
          }
        py[(pl * Ho + oh) * Wo + ow] = best;
      }
  y.set_quant_info(x.quant_info());
  return y;
}

// ---- average pools ---------------------------------------------------------------------------

namespace {
std::string pair_str(Pair p) { return qat::detail::concat("(", p[0], ", ", p[1], ")"); }

// Dequantizes x (NCHW uint8), pools in float with `pool`, requantizes to x's grid.
template <class Pool>
Tensor pool_on_grid(const Tensor& x, const char* who, Pool pool) {
  QAT_REQUIRE(x.defined() && x.dtype() == DType::UInt8 && x.is_quantized() && x.dim() == 4, who,
              "expects a quantized uint8 (N, C, H, W) input, got ",
              x.defined() ? x.str() : "an undefined tensor");
  QAT_REQUIRE(x.numel() > 0, who, "input of shape ", x.shape(), " is empty");
  const QuantInfo q = x.quant_info();
  const auto s = static_cast<float>(q.scale), inv = 1.0f / s, z = static_cast<float>(q.zero_point);
  Tensor xf = Tensor::empty(x.shape(), DType::Float32);
  int8::kernels::dequantize_u8(x.data<std::uint8_t>(), x.numel(), s, q.zero_point, xf.data<float>());
  Tensor yf;
  {
    NoGradGuard no_grad;
    yf = pool(xf);
  }
  Tensor y = Tensor::empty(yf.shape(), DType::UInt8);
  int8::kernels::quantize_u8(yf.data<float>(), yf.numel(), inv, z, 0.0f, 255.0f, y.data<std::uint8_t>());
  y.set_quant_info(q);
  return y;
}
}  // namespace

QuantizedAvgPool2d::QuantizedAvgPool2d(const Pool2dParams& params)
    : nn::Module("QuantizedAvgPool2d"), params_(params) {
  const Pair k = params.kernel, s = params.stride, p = params.padding;
  QAT_REQUIRE(k[0] > 0 && k[1] > 0, "QuantizedAvgPool2d", "kernel must be positive, got ", pair_str(k));
  QAT_REQUIRE((s[0] > 0 && s[1] > 0) || (s[0] == 0 && s[1] == 0), "QuantizedAvgPool2d",
              "stride must be positive (or (0, 0) for the kernel), got ", pair_str(s));
  QAT_REQUIRE(p[0] >= 0 && p[1] >= 0 && 2 * p[0] <= k[0] && 2 * p[1] <= k[1], "QuantizedAvgPool2d",
              "padding must be between 0 and half the kernel ", pair_str(k), ", got ", pair_str(p));
}

Tensor QuantizedAvgPool2d::forward(const Tensor& x) {
  QAT_REQUIRE(x.defined() && x.dim() == 4, "QuantizedAvgPool2d",
              "expects a quantized uint8 (N, C, H, W) input, got ",
              x.defined() ? x.str() : "an undefined tensor");
  const Pair k = params_.kernel, p = params_.padding;
  const std::int64_t H = x.size(2), W = x.size(3);
  QAT_REQUIRE(H + 2 * p[0] >= k[0] && W + 2 * p[1] >= k[1], "QuantizedAvgPool2d", "kernel ", pair_str(k),
              " is larger than the padded input ", H + 2 * p[0], "x", W + 2 * p[1], " (x of shape ",
              x.shape(), ")");
  return pool_on_grid(x, "QuantizedAvgPool2d", [&](const Tensor& v) { return avg_pool2d(v, params_); });
}

std::string QuantizedAvgPool2d::extra_repr() const {
  return qat::detail::concat("kernel_size=", pair_str(params_.kernel),
                             ", stride=", pair_str(params_.stride),
                             ", padding=", pair_str(params_.padding),
                             params_.count_include_pad ? "" : ", count_include_pad=false");
}

QuantizedAdaptiveAvgPool2d::QuantizedAdaptiveAvgPool2d(Pair output_size)
    : nn::Module("QuantizedAdaptiveAvgPool2d"), output_size_(output_size) {
  QAT_REQUIRE(output_size[0] > 0 && output_size[1] > 0, "QuantizedAdaptiveAvgPool2d",
              "output_size must be positive, got ", pair_str(output_size));
}

Tensor QuantizedAdaptiveAvgPool2d::forward(const Tensor& x) {
  return pool_on_grid(x, "QuantizedAdaptiveAvgPool2d",
                      [&](const Tensor& v) { return adaptive_avg_pool2d(v, output_size_); });
}

std::string QuantizedAdaptiveAvgPool2d::extra_repr() const {
  return "output_size=" + pair_str(output_size_);
}

Tensor QuantizedReLU::forward(const Tensor& x) {
  QAT_REQUIRE(x.defined() && x.dtype() == DType::UInt8 && x.is_quantized(), "QuantizedReLU",
              "expects a quantized uint8 input, got ", x.defined() ? x.str() : "an undefined tensor");
  const auto zp = static_cast<std::uint8_t>(x.quant_info().zero_point);
  Tensor y = Tensor::empty(x.shape(), DType::UInt8);
  const std::uint8_t* px = x.data<std::uint8_t>();
  std::uint8_t* py = y.data<std::uint8_t>();
  for (std::int64_t i = 0; i < x.numel(); ++i) py[i] = std::max(px[i], zp);
  y.set_quant_info(x.quant_info());
  return y;
}

}  // namespace qat::quant
