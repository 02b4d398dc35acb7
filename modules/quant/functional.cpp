#include "modules/quant/functional.h"

#include <array>
#include <cstring>

#include "framework/autograd/ops.h"
#include "framework/autograd/ops/broadcast.h"
#include "framework/tensor/parallel.h"
#include "modules/quant/detail/output_quant.h"
#include "modules/quant/kernels/cpu/int8_ops.h"

namespace qat::quant {

// ---- Functional ---------------------------------------------------------------------------------

namespace {
std::string arity_str(int arity) {
  return arity < 0 ? std::string("at least 1 input")
                   : qat::detail::concat(arity, arity == 1 ? " input" : " inputs");
}
}  // namespace

Tensor Functional::operator()(const Tensor& a, const Tensor& b) {
  return (*this)(std::vector<Tensor>{a, b});
}

Tensor Functional::operator()(const std::vector<Tensor>& inputs) {
  const int n = arity();
  QAT_REQUIRE(n < 0 ? !inputs.empty() : std::ssize(inputs) == n, type_name(), "takes ", arity_str(n),
              ", got ", inputs.size());
  return call(inputs, [&] { return apply(inputs); });
}

// Module::operator()(x) (hooks already around it) lands here.
Tensor Functional::forward(const Tensor& x) {
  QAT_REQUIRE(arity() < 0, type_name(), "takes ", arity_str(arity()),
              ", call it as op(a, b) (got one input)");
  return apply({x});
}

// ---- float / QAT ops ----------------------------------------------------------------------------

void FloatFunctional::set_quantizer(std::shared_ptr<Quantizer> q) {
  QAT_REQUIRE(q != nullptr, "FloatFunctional::set_quantizer", type_name(), ": the quantizer is null");
  QAT_REQUIRE(quantizer_ == nullptr, "FloatFunctional::set_quantizer", type_name(),
              " already has an output quantizer (", quantizer_->type_name(), ")");
  quantizer_ = register_module("activation_post_process", std::move(q));
}

// y = q(compute(inputs)), q the output quantizer when prepared
Tensor FloatFunctional::apply(const std::vector<Tensor>& inputs) {
  Tensor y = compute(inputs);
  return quantizer_ ? (*quantizer_)(y) : y;
}

Tensor Add::compute(const std::vector<Tensor>& in) const { return add(in[0], in[1]); }
Tensor AddReLU::compute(const std::vector<Tensor>& in) const { return relu(add(in[0], in[1])); }
Tensor Mul::compute(const std::vector<Tensor>& in) const { return mul(in[0], in[1]); }
Tensor Cat::compute(const std::vector<Tensor>& in) const { return cat(in, dim_); }

nn::ModulePtr Add::quantized(const ActivationQuant& output) const {
  return std::make_shared<QuantizedAdd>(output);
}
nn::ModulePtr AddReLU::quantized(const ActivationQuant& output) const {
  return std::make_shared<QuantizedAddReLU>(output);
}
nn::ModulePtr Mul::quantized(const ActivationQuant& output) const {
  return std::make_shared<QuantizedMul>(output);
}
nn::ModulePtr Cat::quantized(const ActivationQuant& output) const {
  return std::make_shared<QuantizedCat>(output, dim_);
}
std::string Cat::extra_repr() const { return qat::detail::concat("dim=", dim_); }

// ---- int8 ops -----------------------------------------------------------------------------------

namespace k = int8::kernels;

namespace {
// x = (q - zero_point) scale, as the fake quantizer that produced the input computes it
k::InQuant in_quant(const Tensor& x) {
  const QuantInfo q = x.quant_info();
  return {static_cast<float>(q.scale), static_cast<float>(q.zero_point)};
}
constexpr std::int64_t kParallelMin = 1 << 16;  // elements below which threads cost more than they save
}  // namespace

QuantizedFunctional::QuantizedFunctional(std::string type_name, const ActivationQuant& output)
    : Functional(std::move(type_name)) {
  output_range_ = register_buffer("output_range", detail::range_of(output, this->type_name().c_str()));
  scale_ = register_buffer("scale", detail::scalar_f(static_cast<float>(output.quant.scale)));
  zero_point_ = register_buffer("zero_point", detail::scalar_i(output.quant.zero_point));
  detail::require_valid_state(*this);
}

void QuantizedFunctional::check_state(const StateView& state, std::vector<std::string>& problems) const {
  detail::check_output_state(state, problems);
}

QuantInfo QuantizedFunctional::output_quant() const {
  return {static_cast<double>(scale_.data<float>()[0]), zero_point_.data<std::int32_t>()[0]};
}

ActivationQuant QuantizedFunctional::output() const {
  return {output_quant(), output_range_.data<std::int32_t>()[0], output_range_.data<std::int32_t>()[1]};
}

std::string QuantizedFunctional::extra_repr() const {
  const ActivationQuant o = output();
  return qat::detail::concat("output ", detail::quant_str(o.quant), ", range [", o.lo, ", ", o.hi, "]");
}

void QuantizedFunctional::check_inputs(const std::vector<Tensor>& inputs) const {
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& x = inputs[i];
    QAT_REQUIRE(x.defined() && x.dtype() == DType::UInt8 && x.is_quantized(), type_name(), "input ", i,
                " must be a quantized uint8 tensor, got ",
                x.defined() ? x.str() : "an undefined tensor");
  }
}

namespace {
// The output stage of the fake quantizer: inv = 1 / scale in float32 (FakeQuant's 1.0f / scale).
k::OutQuant out_quant(const ActivationQuant& o) {
  const auto s = static_cast<float>(o.quant.scale);
  return {1.0f / s, static_cast<float>(o.quant.zero_point), static_cast<float>(o.lo),
          static_cast<float>(o.hi)};
}
}  // namespace

// Same shapes: one flat run (split over threads; each element alone, so any split gives the
// same bytes). Broadcasting: rows of the broadcast plan (ops/broadcast.h), each a run with unit
// or zero strides.
Tensor QuantizedBinary::apply(const std::vector<Tensor>& inputs) {
  check_inputs(inputs);
  const Tensor &a = inputs[0], &b = inputs[1];
  const Shape os = broadcast_shapes(a.shape(), b.shape(), type_name().c_str());
  const ActivationQuant o = output();
  const k::OutQuant oq = out_quant(o);
  const k::InQuant qa = in_quant(a), qb = in_quant(b);
  const k::BinaryOp op = op_ == Op::Add       ? k::BinaryOp::Add
                         : op_ == Op::AddReLU ? k::BinaryOp::AddReLU
                                              : k::BinaryOp::Mul;
  Tensor y = Tensor::empty(os, DType::UInt8);
  const std::uint8_t *pa = a.data<std::uint8_t>(), *pb = b.data<std::uint8_t>();
  std::uint8_t* py = y.data<std::uint8_t>();
  const std::int64_t total = y.numel();
  if (total > 0 && a.shape() == b.shape()) {
    parallel_for(total, kParallelMin, [&](std::int64_t i0, std::int64_t i1) {
      k::binary_u8(op, pa + i0, 1, qa, pb + i0, 1, qb, i1 - i0, oq, py + i0);
    });
  } else if (total > 0) {
    const qat::detail::BroadcastPlan p =
        qat::detail::BroadcastPlan::make(os, a.shape(), b.shape(), true);
    const int r = p.rank;
    const std::int64_t n = p.size[r - 1];
    std::array<std::int64_t, Shape::kMaxDims> idx{};
    for (std::int64_t base = 0; base < total; base += n) {
      std::int64_t oa = 0, ob = 0;
      for (int d = 0; d + 1 < r; ++d) oa += idx[d] * p.sa[d], ob += idx[d] * p.sb[d];
      k::binary_u8(op, pa + oa, p.sa[r - 1], qa, pb + ob, p.sb[r - 1], qb, n, oq, py + base);
      for (int d = r - 2; d >= 0 && ++idx[d] == p.size[d]; --d) idx[d] = 0;  // odometer
    }
  }
  y.set_quant_info(o.quant);
  return y;
}

// out[a, off_i + j, c] = requant_i(x_i[a, j, c]) (cat's (outer, n_i, inner) view). An input
// already quantized as the output copies: ((q - z) s) (1 / s) is within 3 ulp of the integer
// q - z (|q - z| <= 255), so it rounds back to q, and [0, 255] clamps nothing.
Tensor QuantizedCat::apply(const std::vector<Tensor>& inputs) {
  check_inputs(inputs);
  std::vector<Shape> shapes;
  for (const Tensor& x : inputs) shapes.push_back(x.shape());
  const Shape os = cat_shape(shapes, dim_, type_name().c_str());
  const int d = os.axis(dim_, type_name().c_str());
  std::int64_t outer = 1, inner = 1;
  for (int i = 0; i < d; ++i) outer *= os[i];
  for (int i = d + 1; i < os.rank(); ++i) inner *= os[i];
  const std::int64_t row = os[d] * inner;
  const ActivationQuant o = output();
  const k::OutQuant oq = out_quant(o);
  Tensor y = Tensor::empty(os, DType::UInt8);
  std::uint8_t* py = y.data<std::uint8_t>();
  std::int64_t off = 0;
  for (const Tensor& x : inputs) {
    const std::int64_t n = x.size(d) * inner;
    const QuantInfo q = x.quant_info();
    const bool copy = static_cast<float>(q.scale) == static_cast<float>(o.quant.scale) &&
                      q.zero_point == o.quant.zero_point && o.lo == 0 && o.hi == 255;
    const std::uint8_t* px = x.data<std::uint8_t>();
    for (std::int64_t a = 0; a < outer; ++a) {
      if (copy)
        std::memcpy(py + a * row + off, px + a * n, n);
      else
        k::requantize_u8(px + a * n, n, in_quant(x), oq, py + a * row + off);
    }
    off += n;
  }
  y.set_quant_info(o.quant);
  return y;
}

std::string QuantizedCat::extra_repr() const {
  return qat::detail::concat("dim=", dim_, ", ", QuantizedFunctional::extra_repr());
}

}  // namespace qat::quant
