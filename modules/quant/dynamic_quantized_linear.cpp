#include "modules/quant/dynamic_quantized_linear.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "framework/autograd/grad_mode.h"
#include "framework/nn/state_check.h"
#include "modules/quant/detail/output_quant.h"
#include "modules/quant/fake_quant.h"
#include "modules/quant/int8_dynamic.h"
#include "modules/quant/kernels/cpu/int8_ops.h"
#include "modules/quant/kernels/cpu/kernels.h"
#include "modules/quant/mx_quantizer.h"
#include "modules/quant/qparams.h"

namespace qat::quant {

namespace {
constexpr const char* kType = "DynamicQuantizedLinear";

void require_dynamic_input_spec(const QuantSpec& s, const char* who) {
  QAT_REQUIRE(s.format == Format::Int && s.bits <= 8 && !s.is_microscaled() &&
                  (s.granularity == Granularity::PerTensor ||
                   (s.granularity == Granularity::PerChannel && s.axis == 0)),
              who, "input spec ", s.str(),
              " has no int8 form (needs an integer spec of <= 8 bits, per tensor or per row: "
              "per-channel on axis 0)");
}
}  // namespace

struct DynamicQuantizedLinear::Prepared {
  std::vector<std::uint8_t> key;  // weight and weight_scale bytes it was packed from
  int8::GroupedWeights packed;
};

DynamicQuantizedLinear::DynamicQuantizedLinear(const Tensor& weight_q, const Tensor& weight_scale,
                                               const Tensor& bias, const Options& options)
    : nn::Module(kType), options_(options) {
  require_dtype(weight_q, DType::Int8, kType, "weight");
  require_dtype(weight_scale, DType::Float32, kType, "weight_scale");
  QAT_REQUIRE(weight_q.dim() == 2 && weight_q.numel() > 0, kType,
              "weight must be a non-empty (out, in), got ", weight_q.shape());
  const std::int64_t O = weight_q.size(0), K = weight_q.size(1);
  if (options_.group == 0) options_.group = K;
  QAT_REQUIRE(options_.group >= 1 && options_.group <= K, kType, "group ", options_.group,
              " is not in [1, in_features = ", K, "]");
  const std::int64_t groups = (K + options_.group - 1) / options_.group;
  QAT_REQUIRE(weight_scale.shape() == (Shape{O, groups}), kType, "weight_scale must be (", O, ", ",
              groups, ") for groups of ", options_.group, " of ", K, " inputs, got ",
              weight_scale.shape());
  QAT_REQUIRE(options_.weight_bits >= 2 && options_.weight_bits <= 8, kType,
              "weight_bits must be in [2, 8], got ", options_.weight_bits);
  if (options_.input) require_dynamic_input_spec(*options_.input, kType);
  weight_ = register_buffer("weight", weight_q);
  weight_scale_ = register_buffer("weight_scale", weight_scale);
  if (bias.defined()) {
    require_dtype(bias, DType::Float32, kType, "bias");
    QAT_REQUIRE(bias.numel() == O, kType, "bias must have ", O, " values, got shape ", bias.shape());
    bias_ = register_buffer("bias", bias);
  }
  if (options_.output) {
    output_range_ = register_buffer("output_range", detail::range_of(*options_.output, kType));
    scale_ =
        register_buffer("scale", detail::scalar_f(static_cast<float>(options_.output->quant.scale)));
    zero_point_ = register_buffer("zero_point", detail::scalar_i(options_.output->quant.zero_point));
  }
  detail::require_valid_state(*this);
}

void DynamicQuantizedLinear::check_state(const StateView& state,
                                         std::vector<std::string>& problems) const {
  const double qmax = (1 << (options_.weight_bits - 1)) - 1, qmin = -qmax - 1;
  nn::check::in_range(problems, state, "weight", qmin, qmax,
                      ::qat::detail::concat("an int", options_.weight_bits, " weight code"));
  nn::check::scale(problems, state, "weight_scale");
  nn::check::finite(problems, state, "bias");
  if (options_.output) detail::check_output_state(state, problems);
}

const DynamicQuantizedLinear::Prepared& DynamicQuantizedLinear::prepared() {
  const auto* w = static_cast<const std::uint8_t*>(weight_.raw_data());
  const auto* s = static_cast<const std::uint8_t*>(weight_scale_.raw_data());
  const std::size_t nw = weight_.nbytes(), ns = weight_scale_.nbytes();
  if (prepared_ && prepared_->key.size() == nw + ns && std::memcmp(prepared_->key.data(), w, nw) == 0 &&
      std::memcmp(prepared_->key.data() + nw, s, ns) == 0)
    return *prepared_;
  auto p = std::make_shared<Prepared>();
  p->key.assign(w, w + nw);
  p->key.insert(p->key.end(), s, s + ns);
  p->packed = int8::pack_grouped(weight_.data<std::int8_t>(), weight_scale_.data<float>(),
                                 weight_.size(0), weight_.size(1), options_.group);
  prepared_ = std::move(p);
  return *prepared_;
}

// y = relu?(sum_g float(sum_{k in g} (q_x - zp_x) q_w) s_w[g]) s_x + b, then the output stage
Tensor DynamicQuantizedLinear::forward(const Tensor& x) {
  const std::int64_t O = weight_.size(0), K = weight_.size(1);
  QAT_REQUIRE(x.defined() && x.dim() >= 1 && x.size(-1) == K, kType, "input of shape ",
              x.defined() ? x.shape() : Shape{}, " does not end in in_features = ", K);
  const std::int64_t M = x.numel() / K;
  std::vector<std::int32_t> row_zp(static_cast<std::size_t>(M));
  std::vector<float> row_scale(static_cast<std::size_t>(M));
  std::vector<std::uint8_t> codes;
  const std::uint8_t* px = nullptr;
  if (x.dtype() == DType::UInt8) {
    QAT_REQUIRE(x.is_quantized(), kType, "a uint8 input must carry its quantization, got ", x.str());
    const QuantInfo q = x.quant_info();
    QAT_REQUIRE(q.zero_point >= 0 && q.zero_point <= 255 && q.scale > 0 && std::isfinite(q.scale), kType,
                "uint8 input needs a zero point in [0, 255] and a positive finite scale, got ",
                detail::quant_str(q));
    std::fill(row_zp.begin(), row_zp.end(), q.zero_point);
    std::fill(row_scale.begin(), row_scale.end(), static_cast<float>(q.scale));
    px = x.data<std::uint8_t>();
  } else {
    require_dtype(x, DType::Float32, kType, "x");
    QAT_REQUIRE(options_.input.has_value(), kType,
                "was converted for a uint8 input (a static int8 layer before it), got a float input ",
                x.shape());
    const QuantSpec& s = *options_.input;
    const bool per_row = s.granularity == Granularity::PerChannel;
    QAT_REQUIRE(!per_row || x.dim() >= 2, kType,
                "per-row dynamic quantization needs an input of at least 2 "
                "dimensions, got ",
                x.shape());
    const std::int64_t slices = per_row ? x.size(0) : 1, n = slices ? x.numel() / slices : 0;
    std::vector<float> mn(static_cast<std::size_t>(slices)), mx(mn.size()), scale(mn.size());
    std::vector<std::int32_t> zp(mn.size());
    codes.resize(static_cast<std::size_t>(x.numel()));
    const float* xf = x.data<float>();
    if (n > 0) {
      for (std::int64_t i = 0; i < slices; ++i) {
        bool bad = false;
        kernels::min_max(xf + i * n, n, &mn[i], &mx[i], &bad);
      }
      calculate_qparams(mn.data(), mx.data(), slices, s, scale.data(), zp.data());
      const std::int32_t off = s.is_signed ? 128 : 0;
      const auto lo = static_cast<float>(s.quant_min() + off),
                 hi = static_cast<float>(s.quant_max() + off);
      // q = clamp(round_half_even(x * (1/scale)) + zero_point), as the fake quantizer computes it
      for (std::int64_t i = 0; i < slices; ++i)
        int8::kernels::quantize_u8(xf + i * n, n, 1.0f / scale[i], static_cast<float>(zp[i] + off), lo,
                                   hi, codes.data() + i * n);
      const std::int64_t rows_per_slice = M / slices;
      for (std::int64_t m = 0; m < M; ++m) {
        row_zp[m] = zp[m / rows_per_slice] + off;
        row_scale[m] = scale[m / rows_per_slice];
      }
    }
    px = codes.data();
  }
  Shape out_shape = x.shape();
  out_shape[out_shape.rank() - 1] = O;
  Tensor y = Tensor::empty(out_shape, DType::Float32);
  int8::linear_dynamic(px, M, K, row_zp.data(), row_scale.data(), prepared().packed,
                       bias_.defined() ? bias_.data<float>() : nullptr, options_.fused_relu,
                       y.data<float>(), O);
  if (!options_.output) return y;
  const float s = scale_.data<float>()[0];
  const std::int32_t* range = output_range_.data<std::int32_t>();
  Tensor q = Tensor::empty(out_shape, DType::UInt8);
  int8::kernels::quantize_u8(
      y.data<float>(), y.numel(), 1.0f / s, static_cast<float>(zero_point_.data<std::int32_t>()[0]),
      static_cast<float>(range[0]), static_cast<float>(range[1]), q.data<std::uint8_t>());
  q.set_quant_info({static_cast<double>(s), zero_point_.data<std::int32_t>()[0]});
  return q;
}

std::string DynamicQuantizedLinear::extra_repr() const {
  std::string r =
      ::qat::detail::concat("in_features=", weight_.size(1), ", out_features=", weight_.size(0),
                            ", weight=int", options_.weight_bits, " group ", options_.group,
                            ", input=", options_.input ? options_.input->str() + " dynamic" : "uint8");
  if (options_.output) r += ", output " + detail::quant_str(options_.output->quant);
  if (options_.fused_relu) r += ", relu";
  return r;
}

// ---- DynamicQuantDequant ----------------------------------------------------------------------

DynamicQuantDequant::DynamicQuantDequant(const QuantSpec& spec)
    : nn::Module("DynamicQuantDequant"), spec_(spec) {
  QAT_REQUIRE(spec.dynamic && spec.format == Format::Int, "DynamicQuantDequant",
              "spec must be a dynamic integer spec, got ", spec.str());
}

Tensor DynamicQuantDequant::forward(const Tensor& x) {
  require_dtype(x, DType::Float32, "DynamicQuantDequant::forward", "x");
  NoGradGuard no_grad;
  return fake_quantize(x, dynamic_qparams(x, spec_), spec_);
}

std::string DynamicQuantDequant::extra_repr() const { return spec_.str(); }

}  // namespace qat::quant
