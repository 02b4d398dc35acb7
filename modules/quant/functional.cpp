#include "modules/quant/functional.h"

#include <cmath>

#include "framework/autograd/ops.h"

namespace qat::quant {

// ---- Functional ------------------------------------------------------------------------------

Tensor Functional::operator()(const Tensor& a, const Tensor& b) { return (*this)(std::vector<Tensor>{a, b}); }

Tensor Functional::operator()(const std::vector<Tensor>& inputs) {
  const int n = arity();
  QAT_REQUIRE(n < 0 ? !inputs.empty() : static_cast<int>(inputs.size()) == n, type_name(), "takes ",
              n < 0 ? std::string("at least 1") : std::to_string(n), " inputs, got ", inputs.size());
  for (std::size_t i = 0; i < inputs.size(); ++i)
    QAT_REQUIRE(inputs[i].defined(), type_name(), "input ", i, " is undefined");
  return call(inputs, [&] { return apply(inputs); });
}

Tensor Functional::forward(const Tensor&) {
  throw Error(qat::detail::concat(type_name(), ": takes ", arity() < 0 ? std::string("a list of") : std::to_string(arity()),
                                  " inputs; call it as op(a, b) (hold it as nn::Child<quant::Functional>)"));
}

// ---- float / QAT -----------------------------------------------------------------------------

void FloatFunctional::set_quantizer(std::shared_ptr<Quantizer> q) {
  QAT_REQUIRE(q != nullptr, "FloatFunctional::set_quantizer", "quantizer for ", type_name(), " is null");
  QAT_REQUIRE(quantizer_ == nullptr, "FloatFunctional::set_quantizer", type_name(),
              " has an output quantizer already");
  quantizer_ = register_module("activation_post_process", std::move(q));
}

// y = act_fq(compute(inputs))
Tensor FloatFunctional::apply(const std::vector<Tensor>& inputs) {
  const Tensor y = compute(inputs);
  return quantizer_ ? quantizer_->forward(y) : y;
}

Tensor Add::compute(const std::vector<Tensor>& in) const { return add(in[0], in[1]); }
Tensor AddReLU::compute(const std::vector<Tensor>& in) const { return relu(add(in[0], in[1])); }
Tensor Mul::compute(const std::vector<Tensor>& in) const { return mul(in[0], in[1]); }
Tensor Cat::compute(const std::vector<Tensor>& in) const { return cat(in, dim_); }
std::string Cat::extra_repr() const { return "dim=" + std::to_string(dim_); }

nn::ModulePtr Add::quantized(const ActivationQuant& out) const { return std::make_shared<QuantizedAdd>(out); }
nn::ModulePtr AddReLU::quantized(const ActivationQuant& out) const {
  return std::make_shared<QuantizedAddReLU>(out);
}
nn::ModulePtr Mul::quantized(const ActivationQuant& out) const { return std::make_shared<QuantizedMul>(out); }
nn::ModulePtr Cat::quantized(const ActivationQuant& out) const {
  return std::make_shared<QuantizedCat>(dim_, out);
}

// ---- int8 ------------------------------------------------------------------------------------

QuantizedFunctional::QuantizedFunctional(std::string type_name, const ActivationQuant& output)
    : Functional(std::move(type_name)) {
  QAT_REQUIRE(output.quant.scale > 0 && std::isfinite(output.quant.scale), this->type_name(),
              "output scale must be positive and finite, got ", output.quant.scale);
  QAT_REQUIRE(0 <= output.lo && output.lo <= output.quant.zero_point &&
                  output.quant.zero_point <= output.hi && output.hi <= 255,
              this->type_name(), "needs 0 <= lo <= zero_point <= hi <= 255, got lo ", output.lo,
              ", zero_point ", output.quant.zero_point, ", hi ", output.hi);
  scale_ = register_buffer("scale", Tensor::full(Shape{1}, output.quant.scale, DType::Float32));
  zero_point_ = register_buffer("zero_point", Tensor::full(Shape{1}, output.quant.zero_point, DType::Int32));
  output_range_ = register_buffer("output_range", Tensor::from_vector<std::int32_t>({output.lo, output.hi}, Shape{2}));
}

QuantInfo QuantizedFunctional::output_quant() const {
  return {static_cast<double>(scale_.data<float>()[0]), zero_point_.data<std::int32_t>()[0]};
}

std::string QuantizedFunctional::extra_repr() const {
  return qat::detail::concat("scale=", scale_.data<float>()[0], ", zero_point=", zero_point_.data<std::int32_t>()[0]);
}

namespace {

// x = (q - z) s in float32, the value the fake quantizer produced for code q
struct Dequant {
  const std::uint8_t* q;
  float s, z;
  float operator()(std::int64_t i) const { return (static_cast<float>(q[i]) - z) * s; }
};

Dequant input(const Tensor& t, const std::string& who, std::size_t index) {
  QAT_REQUIRE(t.dtype() == DType::UInt8 && t.is_quantized(), who, "input ", index,
              " must be a quantized uint8 tensor (an int8 model's activation), got ", dtype_name(t.dtype()),
              t.is_quantized() ? "" : " without quantization parameters", " of shape ", t.shape());
  const QuantInfo qi = t.quant_info();
  return {t.data<std::uint8_t>(), static_cast<float>(qi.scale), static_cast<float>(qi.zero_point)};
}

}  // namespace

// q = clamp(round_half_even(v * inv) + z, lo, hi), as the fake quantizer computes it
Tensor QuantizedFunctional::apply(const std::vector<Tensor>& in) {
  const float s = scale_.data<float>()[0], inv = 1.0f / s;
  const auto z = static_cast<float>(zero_point_.data<std::int32_t>()[0]);
  const auto lo = static_cast<float>(output_range_.data<std::int32_t>()[0]);
  const auto hi = static_cast<float>(output_range_.data<std::int32_t>()[1]);
  auto requant = [&](float v) {
    float q = std::nearbyint(v * inv) + z;
    q = q > lo ? q : lo;
    q = q < hi ? q : hi;
    return static_cast<std::uint8_t>(q);
  };
  Tensor out;
  if (const auto* c = dynamic_cast<const QuantizedCat*>(this)) {
    // cat: each input's block of `inner` elements per outer index, requantized
    const Shape& s0 = in[0].shape();
    const int d = s0.axis(c->dim_, type_name().c_str());
    std::vector<std::int64_t> dims = s0.vec();
    std::int64_t outer = 1, total = 0;
    for (int k = 0; k < d; ++k) outer *= s0[k];
    std::vector<Dequant> src;
    std::vector<std::int64_t> inner;
    for (std::size_t i = 0; i < in.size(); ++i) {
      const Shape& si = in[i].shape();
      bool fits = si.rank() == s0.rank();
      for (int k = 0; fits && k < si.rank(); ++k) fits = k == d || si[k] == s0[k];
      QAT_REQUIRE(fits, type_name(), "input ", i, " of shape ", si, " does not match input 0 of shape ", s0,
                  " outside dimension ", d);
      src.push_back(input(in[i], type_name(), i));
      inner.push_back(si.numel() / std::max<std::int64_t>(outer, 1));
      total += si[d];
    }
    dims[static_cast<std::size_t>(d)] = total;
    out = Tensor::empty(Shape(dims), DType::UInt8);
    std::uint8_t* po = out.data<std::uint8_t>();
    for (std::int64_t o = 0; o < outer; ++o)
      for (std::size_t i = 0; i < in.size(); ++i)
        for (std::int64_t k = 0; k < inner[i]; ++k) *po++ = requant(src[i](o * inner[i] + k));
  } else {
    QAT_REQUIRE(in[0].shape() == in[1].shape(), type_name(), "inputs must have the same shape, got ",
                in[0].shape(), " and ", in[1].shape(), " (broadcasting is float-only)");
    const Dequant a = input(in[0], type_name(), 0), b = input(in[1], type_name(), 1);
    out = Tensor::empty(in[0].shape(), DType::UInt8);
    std::uint8_t* po = out.data<std::uint8_t>();
    for (std::int64_t i = 0; i < out.numel(); ++i) po[i] = requant(combine(a(i), b(i)));
  }
  out.set_quant_info(output_quant());
  return out;
}

}  // namespace qat::quant
