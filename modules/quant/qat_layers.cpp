#include "modules/quant/qat_layers.h"

#include "framework/autograd/ops.h"
#include "framework/distributed/replica.h"
#include "framework/nn/state_check.h"
#include "modules/quant/fake_quant.h"

namespace qat::quant {

// ---- QatLayer -------------------------------------------------------------------------------

QatLayer::QatLayer(std::string type, const Tensor& weight, const Tensor& bias, bool fused_relu)
    : nn::Module(std::move(type)), fused_relu_(fused_relu) {
  weight_ = register_parameter("weight", weight);
  if (bias.defined()) bias_ = register_parameter("bias", bias);
}

void QatLayer::set_quantizers(std::shared_ptr<Quantizer> weight_fq, std::shared_ptr<Quantizer> act_fq) {
  if (weight_fq) weight_fq_ = register_module("weight_fake_quant", std::move(weight_fq));
  if (act_fq) act_fq_ = register_module("activation_post_process", std::move(act_fq));
}

Tensor QatLayer::quantized_weight(const Tensor& w) const {
  if (!weight_fq_) return w;
  // data-parallel: a weight is the same on every replica, so its observer needs no all-reduce
  distributed::SameOnEveryReplica same;
  return weight_fq_->forward(w);
}

Tensor QatLayer::output(Tensor y) const {
  if (fused_relu_) y = relu(y);
  return act_fq_ ? act_fq_->forward(y) : y;
}

std::string QatLayer::quant_repr() const {
  return "weight: " + (weight_fq_ ? weight_fq_->spec().str() : std::string("float")) +
         ", activation: " + (act_fq_ ? act_fq_->spec().str() : std::string("float"));
}

// ---- QuantLinear ----------------------------------------------------------------------------

QuantLinear::QuantLinear(const nn::Linear& source, std::shared_ptr<Quantizer> weight_fake_quant,
                         std::shared_ptr<Quantizer> activation_fake_quant, bool fused_relu)
    : QuantLinear(source.weight(), source.bias(), std::move(weight_fake_quant),
                  std::move(activation_fake_quant), fused_relu) {}

QuantLinear::QuantLinear(const Tensor& weight, const Tensor& bias,
                         std::shared_ptr<Quantizer> weight_fake_quant,
                         std::shared_ptr<Quantizer> activation_fake_quant, bool fused_relu)
    : QatLayer(fused_relu ? "LinearReLU" : "QuantLinear", weight, bias, fused_relu) {
  set_quantizers(std::move(weight_fake_quant), std::move(activation_fake_quant));
}

std::shared_ptr<QatLayer> QuantLinear::with_quantizers(std::shared_ptr<Quantizer> w,
                                                       std::shared_ptr<Quantizer> a) const {
  return std::make_shared<QuantLinear>(weight_, bias_, std::move(w), std::move(a), fused_relu_);
}

Tensor QuantLinear::forward(const Tensor& x) {
  return output(linear(x, quantized_weight(weight_), bias_));
}

std::string QuantLinear::extra_repr() const {
  return "in_features=" + std::to_string(in_features()) +
         ", out_features=" + std::to_string(out_features()) + ", " + quant_repr();
}

// ---- QuantConv2d ----------------------------------------------------------------------------

QuantConv2d::QuantConv2d(const nn::Conv2d& source, std::shared_ptr<Quantizer> weight_fake_quant,
                         std::shared_ptr<Quantizer> activation_fake_quant, bool fused_relu)
    : QuantConv2d(source.weight(), source.bias(), source.params(), std::move(weight_fake_quant),
                  std::move(activation_fake_quant), fused_relu) {}

QuantConv2d::QuantConv2d(const Tensor& weight, const Tensor& bias, const Conv2dParams& params,
                         std::shared_ptr<Quantizer> weight_fake_quant,
                         std::shared_ptr<Quantizer> activation_fake_quant, bool fused_relu)
    : QatLayer(fused_relu ? "ConvReLU2d" : "QuantConv2d", weight, bias, fused_relu), params_(params) {
  set_quantizers(std::move(weight_fake_quant), std::move(activation_fake_quant));
}

std::shared_ptr<QatLayer> QuantConv2d::with_quantizers(std::shared_ptr<Quantizer> w,
                                                       std::shared_ptr<Quantizer> a) const {
  return std::make_shared<QuantConv2d>(weight_, bias_, params_, std::move(w), std::move(a), fused_relu_);
}

Tensor QuantConv2d::forward(const Tensor& x) {
  return output(conv2d(x, quantized_weight(weight_), bias_, params_));
}

std::string QuantConv2d::extra_repr() const {
  return "weight " + weight_.shape().str() + ", " + nn::conv_params_repr(params_) + ", " + quant_repr();
}

// ---- BnFoldedLayer ---------------------------------------------------------------------------

BnFoldedLayer::BnFoldedLayer(std::string type, const Tensor& weight, const Tensor& bias,
                             std::shared_ptr<nn::BatchNorm> bn, bool fused_relu)
    : QatLayer(std::move(type), weight, bias, fused_relu) {
  QAT_REQUIRE(bn != nullptr && bn->num_features() == weight.size(0) && bn->weight().defined(),
              type_name(), "needs an affine batch norm over the ", weight.size(0),
              " output channels, got ",
              bn ? qat::detail::concat(bn->type_name(), " of ", bn->num_features(), " features",
                                       bn->weight().defined() ? "" : " without affine")
                 : std::string("none"));
  freeze_bn_ = register_buffer("freeze_bn", Tensor::zeros(Shape{1}, DType::UInt8));
  bn_ = register_module("bn", std::move(bn));
}

void BnFoldedLayer::copy_bn_state(BnFoldedLayer& copy) const {
  copy.freeze_bn_.copy_(freeze_bn_);
  copy.train(is_training());
}

// f = gamma / sqrt(running_var + eps);  y = bn(op(x, W_fq(W f)) / f + b)
Tensor BnFoldedLayer::folded_forward(const Tensor& x,
                                     const std::function<Tensor(const Tensor&, const Tensor&)>& op) {
  const std::int64_t O = weight_.size(0);
  const Tensor running_std = pow(add(bn_->running_var(), bn_->eps()), 0.5);  // a buffer: no grad
  const Tensor f = div(bn_->weight(), running_std);                          // grad to gamma
  std::vector<std::int64_t> w_shape(weight_.dim(), 1), y_shape;
  w_shape[0] = O;
  const Tensor scaled = quantized_weight(mul(weight_, reshape(f, w_shape)));
  Tensor y = op(x, scaled);
  y_shape.assign(y.dim(), 1);
  y_shape[1] = O;
  y = div(y, reshape(f, y_shape));
  if (bias_.defined()) y = add(y, reshape(bias_, y_shape));
  return output(bn_->forward(y));
}

void BnFoldedLayer::train(bool on) {
  nn::Module::train(on);
  if (bn_frozen()) bn_->train(false);  // frozen statistics stay frozen in training mode
}

void BnFoldedLayer::freeze_bn_stats() {
  freeze_bn_.fill_(1);
  bn_->train(false);
}

void BnFoldedLayer::update_bn_stats() {
  freeze_bn_.fill_(0);
  bn_->train(is_training());
}

// ---- ConvBn2d -------------------------------------------------------------------------------

ConvBn2d::ConvBn2d(const nn::Conv2d& conv, std::shared_ptr<nn::BatchNorm2d> bn,
                   std::shared_ptr<Quantizer> weight_fake_quant,
                   std::shared_ptr<Quantizer> activation_fake_quant, bool fused_relu)
    : ConvBn2d(conv.weight(), conv.bias(), conv.params(), std::move(bn), std::move(weight_fake_quant),
               std::move(activation_fake_quant), fused_relu) {}

ConvBn2d::ConvBn2d(const Tensor& weight, const Tensor& bias, const Conv2dParams& params,
                   std::shared_ptr<nn::BatchNorm2d> bn, std::shared_ptr<Quantizer> weight_fake_quant,
                   std::shared_ptr<Quantizer> activation_fake_quant, bool fused_relu)
    : BnFoldedLayer(fused_relu ? "ConvBnReLU2d" : "ConvBn2d", weight, bias, std::move(bn), fused_relu),
      params_(params) {
  set_quantizers(std::move(weight_fake_quant), std::move(activation_fake_quant));
}

std::shared_ptr<QatLayer> ConvBn2d::with_quantizers(std::shared_ptr<Quantizer> w,
                                                    std::shared_ptr<Quantizer> a) const {
  auto out =
      std::make_shared<ConvBn2d>(weight_, bias_, params_, std::static_pointer_cast<nn::BatchNorm2d>(bn_),
                                 std::move(w), std::move(a), fused_relu_);
  copy_bn_state(*out);
  return out;
}

Tensor ConvBn2d::forward(const Tensor& x) {
  return folded_forward(
      x, [&](const Tensor& in, const Tensor& w) { return conv2d(in, w, Tensor(), params_); });
}

std::string ConvBn2d::extra_repr() const {
  return "weight " + weight_.shape().str() + ", " + nn::conv_params_repr(params_) + ", " + quant_repr() +
         (bn_frozen() ? ", bn frozen" : "");
}

// ---- LinearBn1d -----------------------------------------------------------------------------

LinearBn1d::LinearBn1d(const nn::Linear& linear, std::shared_ptr<nn::BatchNorm1d> bn,
                       std::shared_ptr<Quantizer> weight_fake_quant,
                       std::shared_ptr<Quantizer> activation_fake_quant, bool fused_relu)
    : LinearBn1d(linear.weight(), linear.bias(), std::move(bn), std::move(weight_fake_quant),
                 std::move(activation_fake_quant), fused_relu) {}

LinearBn1d::LinearBn1d(const Tensor& weight, const Tensor& bias, std::shared_ptr<nn::BatchNorm1d> bn,
                       std::shared_ptr<Quantizer> weight_fake_quant,
                       std::shared_ptr<Quantizer> activation_fake_quant, bool fused_relu)
    : BnFoldedLayer(fused_relu ? "LinearBnReLU1d" : "LinearBn1d", weight, bias, std::move(bn),
                    fused_relu) {
  set_quantizers(std::move(weight_fake_quant), std::move(activation_fake_quant));
}

std::shared_ptr<QatLayer> LinearBn1d::with_quantizers(std::shared_ptr<Quantizer> w,
                                                      std::shared_ptr<Quantizer> a) const {
  auto out = std::make_shared<LinearBn1d>(weight_, bias_, std::static_pointer_cast<nn::BatchNorm1d>(bn_),
                                          std::move(w), std::move(a), fused_relu_);
  copy_bn_state(*out);
  return out;
}

Tensor LinearBn1d::forward(const Tensor& x) {
  QAT_REQUIRE(x.defined() && x.dim() == 2 && x.size(1) == in_features(), type_name(),
              "expected input (N, ", in_features(), "), got ",
              x.defined() ? x.shape().str() : "undefined");
  return folded_forward(x, [](const Tensor& in, const Tensor& w) { return linear(in, w, Tensor()); });
}

std::string LinearBn1d::extra_repr() const {
  return "in_features=" + std::to_string(in_features()) +
         ", out_features=" + std::to_string(out_features()) + ", " + quant_repr() +
         (bn_frozen() ? ", bn frozen" : "");
}

// ---- QuantPool -------------------------------------------------------------------------------

QuantPool::QuantPool(nn::ModulePtr pool, std::shared_ptr<Quantizer> input_quantizer)
    : nn::Module(pool ? "Quant" + pool->type_name() : "QuantPool"),
      input_quantizer_(std::move(input_quantizer)) {
  QAT_REQUIRE(pool && (pool->type_name() == "AvgPool2d" || pool->type_name() == "AdaptiveAvgPool2d"),
              "QuantPool", "needs an AvgPool2d or AdaptiveAvgPool2d, got ",
              pool ? pool->type_name() : std::string("null"));
  QAT_REQUIRE(input_quantizer_ != nullptr, "QuantPool", "input quantizer is null");
  pool_ = register_module("pool", std::move(pool));
}

// y = fq(pool(x); the input's qparams), straight-through
Tensor QuantPool::forward(const Tensor& x) {
  const Tensor y = (*pool_)(x);
  if (!input_quantizer_->fake_quant_enabled() || !input_quantizer_->calibrated()) return y;
  return fake_quantize(y, input_quantizer_->qparams(), input_quantizer_->spec());
}

void BnFoldedLayer::check_state(const StateView& state, std::vector<std::string>& problems) const {
  nn::check::flag(problems, state, "freeze_bn");
}

}  // namespace qat::quant
