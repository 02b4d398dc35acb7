#include "modules/quant/quantized_layers.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "modules/quant/int8_kernels.h"

namespace qat::quant {

namespace {
Tensor scalar_f(float v) { return Tensor::full(Shape{1}, v, DType::Float32); }
Tensor scalar_i(std::int32_t v) { return Tensor::full(Shape{1}, v, DType::Int32); }
std::string quant_str(QuantInfo q) {
  return detail::concat("scale=", q.scale, ", zero_point=", q.zero_point);
}
Tensor range_of(const ActivationQuant& a, const char* who) {
  QAT_REQUIRE(a.quant.scale > 0 && std::isfinite(a.quant.scale), who, "scale must be positive, got ",
              a.quant.scale);
  QAT_REQUIRE(0 <= a.lo && a.lo <= a.quant.zero_point && a.quant.zero_point <= a.hi && a.hi <= 255, who,
              "needs 0 <= lo <= zero_point <= hi <= 255, got lo ", a.lo, ", zero_point ",
              a.quant.zero_point, ", hi ", a.hi);
  return Tensor::from_vector<std::int32_t>({a.lo, a.hi}, Shape{2});
}
}  // namespace

// ---- Quantize / Dequantize ------------------------------------------------------------------

Quantize::Quantize(const ActivationQuant& output) : nn::Module("Quantize") {
  output_range_ = register_buffer("output_range", range_of(output, "Quantize"));
  scale_ = register_buffer("scale", scalar_f(static_cast<float>(output.quant.scale)));
  zero_point_ = register_buffer("zero_point", scalar_i(output.quant.zero_point));
}

QuantInfo Quantize::output_quant() const {
  return {static_cast<double>(scale_.data<float>()[0]), zero_point_.data<std::int32_t>()[0]};
}

// q = clamp(round_half_even(x * (1/scale)) + zero_point, 0, 255), as the fake quantizer computes q
Tensor Quantize::forward(const Tensor& x) {
  require_dtype(x, DType::Float32, "Quantize::forward", "x");
  const float s = scale_.data<float>()[0], inv = 1.0f / s;
  const auto zp = static_cast<float>(zero_point_.data<std::int32_t>()[0]);
  const auto lo = static_cast<float>(output_range_.data<std::int32_t>()[0]);
  const auto hi = static_cast<float>(output_range_.data<std::int32_t>()[1]);
  Tensor q = Tensor::empty(x.shape(), DType::UInt8);
  const float* px = x.data<float>();
  std::uint8_t* pq = q.data<std::uint8_t>();
  for (std::int64_t i = 0; i < x.numel(); ++i) {
    const float v = std::nearbyint(px[i] * inv) + zp;
    const float c = v > lo ? v : lo;
    pq[i] = static_cast<std::uint8_t>(c < hi ? c : hi);
  }
  q.set_quant_info(output_quant());
  return q;
}

std::string Quantize::extra_repr() const { return quant_str(output_quant()); }

// x = scale (q - zero_point)
Tensor Dequantize::forward(const Tensor& x) {
  if (!x.is_quantized()) return x;
  require_dtype(x, DType::UInt8, "Dequantize::forward", "x");
  const QuantInfo q = x.quant_info();
  Tensor y = Tensor::empty(x.shape(), DType::Float32);
  const std::uint8_t* p = x.data<std::uint8_t>();
  float* py = y.data<float>();
  const auto s = static_cast<float>(q.scale);
  for (std::int64_t i = 0; i < x.numel(); ++i) py[i] = static_cast<float>(p[i] - q.zero_point) * s;
  return y;
}

// ---- layers with int8 weights ---------------------------------------------------------------

QuantizedWeightLayer::QuantizedWeightLayer(std::string type, const Tensor& weight_q,
                                           const Tensor& weight_scale, const Tensor& bias_q,
                                           QuantInfo input, const ActivationQuant& output,
                                           bool fused_relu)
    : nn::Module(std::move(type)), fused_relu_(fused_relu) {
  require_dtype(weight_q, DType::Int8, type_name().c_str(), "weight");
  require_dtype(weight_scale, DType::Float32, type_name().c_str(), "weight_scale");
  QAT_REQUIRE(weight_scale.numel() == weight_q.size(0), type_name(), "expected ", weight_q.size(0),
              " weight scales, got ", weight_scale.numel());
  weight_ = register_buffer("weight", weight_q);
  weight_scale_ = register_buffer("weight_scale", weight_scale);
  if (bias_q.defined()) {
    require_dtype(bias_q, DType::Int32, type_name().c_str(), "bias");
    bias_ = register_buffer("bias", bias_q);
  }
  input_scale_ = register_buffer("input_scale", scalar_f(static_cast<float>(input.scale)));
  input_zero_point_ = register_buffer("input_zero_point", scalar_i(input.zero_point));
  scale_ = register_buffer("scale", scalar_f(static_cast<float>(output.quant.scale)));
  zero_point_ = register_buffer("zero_point", scalar_i(output.quant.zero_point));
  output_range_ = register_buffer("output_range", range_of(output, type_name().c_str()));
}

QuantInfo QuantizedWeightLayer::input_quant() const {
  return {input_scale_.data<float>()[0], input_zero_point_.data<std::int32_t>()[0]};
}

QuantInfo QuantizedWeightLayer::output_quant() const {
  return {scale_.data<float>()[0], zero_point_.data<std::int32_t>()[0]};
}

void QuantizedWeightLayer::check_input(const Tensor& x) const {
  QAT_REQUIRE(x.defined() && x.dtype() == DType::UInt8 && x.is_quantized(), type_name(),
              "expects a quantized uint8 input, got ", x.defined() ? x.str() : "an undefined tensor");
  const QuantInfo got = x.quant_info(), want = input_quant();
  QAT_REQUIRE(static_cast<float>(got.scale) == static_cast<float>(want.scale) &&
                  got.zero_point == want.zero_point,
              type_name(), "input is quantized with ", quant_str(got),
              " but the layer was converted for ", quant_str(want));
}

// Per output channel: M_o = s_in s_w[o] / s_out as a fixed-point multiplier, the weight row
// sums (for the input zero point), and the clamp range (a fused ReLU clamps at the zero point).
struct QuantizedWeightLayer::Stage {
  std::vector<int8::Multiplier> multipliers;
  std::vector<std::int32_t> w_sums;
  int8::Requant requant{};
};

QuantizedWeightLayer::Stage QuantizedWeightLayer::output_stage() const {
  Stage st;
  const QuantInfo in = input_quant(), out = output_quant();
  const std::int64_t O = weight_.size(0), K = weight_.numel() / O;
  const std::int8_t* w = weight_.data<std::int8_t>();
  for (std::int64_t o = 0; o < O; ++o) {
    st.multipliers.push_back(int8::quantize_multiplier(
        in.scale * static_cast<double>(weight_scale_.data<float>()[o]) / out.scale));
    std::int32_t s = 0;
    for (std::int64_t k = 0; k < K; ++k) s += w[o * K + k];
    st.w_sums.push_back(s);
  }
  const std::int32_t lo = output_range_.data<std::int32_t>()[0],
                     hi = output_range_.data<std::int32_t>()[1];
  st.requant = {st.multipliers.data(), out.zero_point, fused_relu_ ? std::max(lo, out.zero_point) : lo,
                hi};
  return st;
}

QuantizedLinear::QuantizedLinear(const Tensor& weight_q, const Tensor& weight_scale,
                                 const Tensor& bias_q, QuantInfo input, const ActivationQuant& output,
                                 bool fused_relu)
    : QuantizedWeightLayer("QuantizedLinear", weight_q, weight_scale, bias_q, input, output,
                           fused_relu) {
  QAT_REQUIRE(weight_q.dim() == 2, "QuantizedLinear", "weight must be (out, in), got ",
              weight_q.shape());
}

// y = requant(sum_k (x - zx) w + bias)
Tensor QuantizedLinear::forward(const Tensor& x) {
  check_input(x);
  const std::int64_t O = weight_.size(0), K = weight_.size(1);
  QAT_REQUIRE(x.dim() >= 1 && x.size(-1) == K, type_name(), "input of shape ", x.shape(),
              " does not match in_features ", K);
  const Stage st = output_stage();
  Shape os = x.shape();
  os[os.rank() - 1] = O;
  Tensor y = Tensor::empty(os, DType::UInt8);
  int8::linear_u8s8(x.data<std::uint8_t>(), x.numel() / K, K, input_quant().zero_point,
                    weight_.data<std::int8_t>(), st.w_sums.data(), O,
                    bias_.defined() ? bias_.data<std::int32_t>() : nullptr, st.requant,
                    y.data<std::uint8_t>());
  y.set_quant_info(output_quant());
  return y;
}

std::string QuantizedLinear::extra_repr() const {
  return detail::concat("in_features=", weight_.size(1), ", out_features=", weight_.size(0),
                        fused_relu_ ? ", relu" : "", ", output ", quant_str(output_quant()));
}

QuantizedConv2d::QuantizedConv2d(const Tensor& weight_q, const Tensor& weight_scale,
                                 const Tensor& bias_q, QuantInfo input, const ActivationQuant& output,
                                 bool fused_relu, const Conv2dParams& params)
    : QuantizedWeightLayer("QuantizedConv2d", weight_q, weight_scale, bias_q, input, output, fused_relu),
      params_(params) {
  QAT_REQUIRE(weight_q.dim() == 4, "QuantizedConv2d", "weight must be (O, C/groups, kh, kw), got ",
              weight_q.shape());
}

// Per image and group: col = im2col(x) padded with the input zero point (real 0), then
// y (Og, P) = requant(W_g (Og, K) col (K, P) - zx rowsum(W_g) + bias).
Tensor QuantizedConv2d::forward(const Tensor& x) {
  check_input(x);
  QAT_REQUIRE(x.dim() == 4, type_name(), "expects (N, C, H, W), got ", x.shape());
  const std::int64_t N = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3);
  const std::int64_t O = weight_.size(0), Cg = weight_.size(1), kh = weight_.size(2),
                     kw = weight_.size(3);
  const std::int64_t G = params_.groups, Og = O / G;
  QAT_REQUIRE(Cg * G == C, type_name(), "input has ", C, " channels, the weight expects ", Cg * G);
  const auto [sh, sw] = params_.stride;
  const auto [ph, pw] = params_.padding;
  const auto [dh, dw] = params_.dilation;
  const std::int64_t Ho = (H + 2 * ph - dh * (kh - 1) - 1) / sh + 1,
                     Wo = (W + 2 * pw - dw * (kw - 1) - 1) / sw + 1;
  QAT_REQUIRE(Ho > 0 && Wo > 0, type_name(), "input ", x.shape(), " is smaller than the kernel");
  const std::int64_t K = Cg * kh * kw, P = Ho * Wo;
  const std::int32_t zx = input_quant().zero_point;
  const Stage st = output_stage();
  Tensor y = Tensor::empty(Shape{N, O, Ho, Wo}, DType::UInt8);
  std::vector<std::uint8_t> col(K * P);
  const std::uint8_t* px = x.data<std::uint8_t>();
  for (std::int64_t n = 0; n < N; ++n)
    for (std::int64_t g = 0; g < G; ++g) {
      for (std::int64_t c = 0; c < Cg; ++c)
        for (std::int64_t i = 0; i < kh; ++i)
          for (std::int64_t j = 0; j < kw; ++j) {
            std::uint8_t* row = col.data() + ((c * kh + i) * kw + j) * P;
            const std::uint8_t* plane = px + ((n * C) + g * Cg + c) * H * W;
            for (std::int64_t oh = 0; oh < Ho; ++oh) {
              const std::int64_t h = oh * sh - ph + i * dh;
              for (std::int64_t ow = 0; ow < Wo; ++ow) {
                const std::int64_t w = ow * sw - pw + j * dw;
                row[oh * Wo + ow] = (h >= 0 && h < H && w >= 0 && w < W) ? plane[h * W + w]
                                                                         : static_cast<std::uint8_t>(zx);
              }
            }
          }
      int8::Requant rq = st.requant;
      rq.multiplier = st.multipliers.data() + g * Og;
      int8::gemm_u8s8_cols(weight_.data<std::int8_t>() + g * Og * K, st.w_sums.data() + g * Og, Og, K,
                           col.data(), P, zx,
                           bias_.defined() ? bias_.data<std::int32_t>() + g * Og : nullptr, rq,
                           y.data<std::uint8_t>() + (n * O + g * Og) * P);
    }
  y.set_quant_info(output_quant());
  return y;
}

std::string QuantizedConv2d::extra_repr() const {
  return "weight " + weight_.shape().str() + (fused_relu_ ? ", relu" : "") + ", output " +
         quant_str(output_quant());
}

// ---- parameter-free layers ------------------------------------------------------------------

Tensor QuantizedMaxPool2d::forward(const Tensor& x) {
  QAT_REQUIRE(x.defined() && x.dtype() == DType::UInt8 && x.is_quantized() && x.dim() == 4,
              "QuantizedMaxPool2d", "expects a quantized uint8 (N, C, H, W) input, got ",
              x.defined() ? x.str() : "an undefined tensor");
  const Pair k = params_.kernel, s = params_.stride == Pair{0, 0} ? params_.kernel : params_.stride;
  const Pair p = params_.padding;
  const std::int64_t planes = x.size(0) * x.size(1), H = x.size(2), W = x.size(3);
  const std::int64_t Ho = (H + 2 * p[0] - k[0]) / s[0] + 1, Wo = (W + 2 * p[1] - k[1]) / s[1] + 1;
  Tensor y = Tensor::empty(Shape{x.size(0), x.size(1), Ho, Wo}, DType::UInt8);
  const std::uint8_t* px = x.data<std::uint8_t>();
  std::uint8_t* py = y.data<std::uint8_t>();
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
