// TEMPORARY stand-in (replaced by the functional helper's implementation at merge).
#include "modules/quant/functional.h"

#include "framework/autograd/ops.h"

namespace qat::quant {
Tensor Functional::operator()(const Tensor& a, const Tensor& b) {
  return call({a, b}, [&] { return apply({a, b}); });
}
Tensor Functional::operator()(const std::vector<Tensor>& in) {
  return call(in, [&] { return apply(in); });
}
Tensor Functional::forward(const Tensor&) { throw Error(type_name() + " takes 2 inputs"); }
void FloatFunctional::set_quantizer(std::shared_ptr<Quantizer> q) {
  quantizer_ = register_module("activation_post_process", std::move(q));
}
Tensor FloatFunctional::apply(const std::vector<Tensor>& in) {
  Tensor y = compute(in);
  return quantizer_ ? (*quantizer_)(y) : y;
}
Tensor Add::compute(const std::vector<Tensor>& in) const { return add(in[0], in[1]); }
Tensor AddReLU::compute(const std::vector<Tensor>& in) const { return relu(add(in[0], in[1])); }
Tensor Mul::compute(const std::vector<Tensor>& in) const { return mul(in[0], in[1]); }
Tensor Cat::compute(const std::vector<Tensor>&) const { throw Error("cat"); }
std::string Cat::extra_repr() const { return ""; }
nn::ModulePtr Add::quantized(const ActivationQuant&) const { throw Error("todo"); }
nn::ModulePtr AddReLU::quantized(const ActivationQuant&) const { throw Error("todo"); }
nn::ModulePtr Mul::quantized(const ActivationQuant&) const { throw Error("todo"); }
nn::ModulePtr Cat::quantized(const ActivationQuant&) const { throw Error("todo"); }
}  // namespace qat::quant
