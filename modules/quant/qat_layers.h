#pragma once
// QAT versions of Linear and Conv2d (PyTorch's nn.qat / nn.intrinsic.qat modules): the weight
// passes through `weight_fake_quant` before the op, the output through `activation_post_process`
// (after the fused ReLU, if any). They reuse the float layer's parameter tensors, so names
// ("fc1.weight") and optimizer state carry over.
#include <functional>
#include <memory>

#include "framework/nn/batchnorm.h"
#include "framework/nn/conv.h"
#include "framework/nn/linear.h"
#include "modules/quant/quantizer.h"

namespace qat::quant {

/// What every QAT layer has: the float weight and bias (parameters "weight", "bias"), the
/// quantizers (children "weight_fake_quant", "activation_post_process"; either may be null, that
/// tensor then stays in float) and whether a ReLU is fused before the output quantizer.
class QatLayer : public nn::Module {
 public:
  bool fused_relu() const { return fused_relu_; }
  const Tensor& weight() const { return weight_; }
  const Tensor& bias() const { return bias_; }
  const std::shared_ptr<Quantizer>& weight_fake_quant() const { return weight_fq_; }
  const std::shared_ptr<Quantizer>& activation_fake_quant() const { return act_fq_; }
  /// One step in a captured graph (its quantizers and fused batch norm are internals).
  bool is_atomic() const override { return true; }
  /// False for a float fused layer (fuse_modules) that prepare_qat has not given quantizers yet.
  bool has_quantizers() const { return weight_fq_ || act_fq_; }
  /// A new layer of the same kind sharing this one's parameters (and batch norm) with the given
  /// quantizers: how prepare_qat quantizes a layer that fuse_modules fused in float.
  virtual std::shared_ptr<QatLayer> with_quantizers(
      std::shared_ptr<Quantizer> weight_fake_quant,
      std::shared_ptr<Quantizer> activation_fake_quant) const = 0;

 protected:
  QatLayer(std::string type, const Tensor& weight, const Tensor& bias, bool fused_relu);
  /// Registers the quantizers (after any other children, for PyTorch's naming order).
  void set_quantizers(std::shared_ptr<Quantizer> weight_fq, std::shared_ptr<Quantizer> act_fq);
  /// The weight through its fake quantizer (unchanged without one).
  Tensor quantized_weight(const Tensor& w) const;
  /// relu (if fused), then the output quantizer.
  Tensor output(Tensor y) const;
  std::string quant_repr() const;

  Tensor weight_, bias_;
  std::shared_ptr<Quantizer> weight_fq_, act_fq_;
  bool fused_relu_;
};

/// y = act_fq(relu?(x W_fq^T + b)). Type "QuantLinear", or "LinearReLU" when fused.
class QuantLinear : public QatLayer {
 public:
  QuantLinear(const nn::Linear& source, std::shared_ptr<Quantizer> weight_fake_quant,
              std::shared_ptr<Quantizer> activation_fake_quant, bool fused_relu = false);
  QuantLinear(const Tensor& weight, const Tensor& bias, std::shared_ptr<Quantizer> weight_fake_quant,
              std::shared_ptr<Quantizer> activation_fake_quant, bool fused_relu);
  std::shared_ptr<QatLayer> with_quantizers(
      std::shared_ptr<Quantizer> weight_fake_quant,
      std::shared_ptr<Quantizer> activation_fake_quant) const override;
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
  std::int64_t in_features() const { return weight_.size(1); }
  std::int64_t out_features() const { return weight_.size(0); }
};

/// y = act_fq(relu?(conv2d(x, W_fq, b))). Type "QuantConv2d", or "ConvReLU2d" when fused.
class QuantConv2d : public QatLayer {
 public:
  QuantConv2d(const nn::Conv2d& source, std::shared_ptr<Quantizer> weight_fake_quant,
              std::shared_ptr<Quantizer> activation_fake_quant, bool fused_relu = false);
  QuantConv2d(const Tensor& weight, const Tensor& bias, const Conv2dParams& params,
              std::shared_ptr<Quantizer> weight_fake_quant,
              std::shared_ptr<Quantizer> activation_fake_quant, bool fused_relu);
  std::shared_ptr<QatLayer> with_quantizers(
      std::shared_ptr<Quantizer> weight_fake_quant,
      std::shared_ptr<Quantizer> activation_fake_quant) const override;
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
  const Conv2dParams& params() const { return params_; }

 private:
  Conv2dParams params_;
};

/// A weight layer with a batch norm folded into its fake-quantized weight during training
/// (PyTorch's _ConvBnNd._forward_approximate / LinearBn1d, Jacob et al. 2018 sec. 3.2):
///   f = gamma / sqrt(running_var + eps),  y = bn(op(x, W_fq(W f), 0) / f + b)
/// `freeze_bn_stats()` stops updating the running statistics (bn stays in eval mode). Child "bn"
/// and buffer "freeze_bn" besides QatLayer's. convert folds W f and (b - mean) f + beta.
class BnFoldedLayer : public QatLayer {
 public:
  void train(bool on = true) override;
  /// freeze_bn is 0 or 1.
  void check_state(const StateView& state, std::vector<std::string>& problems) const override;

  void freeze_bn_stats();
  void update_bn_stats();
  bool bn_frozen() const { return freeze_bn_.item() != 0; }
  const std::shared_ptr<nn::BatchNorm>& bn() const { return bn_; }

 protected:
  BnFoldedLayer(std::string type, const Tensor& weight, const Tensor& bias,
                std::shared_ptr<nn::BatchNorm> bn, bool fused_relu);
  /// bn(op(x, W_fq(W f)) / f + b) through output(); op is the layer's linear map without bias.
  Tensor folded_forward(const Tensor& x, const std::function<Tensor(const Tensor&, const Tensor&)>& op);
  /// Shares this layer's freeze_bn flag and training mode with `copy` (with_quantizers).
  void copy_bn_state(BnFoldedLayer& copy) const;

  Tensor freeze_bn_;
  std::shared_ptr<nn::BatchNorm> bn_;
};

/// Conv2d + BatchNorm2d (+ ReLU), types "ConvBn2d" / "ConvBnReLU2d".
class ConvBn2d : public BnFoldedLayer {
 public:
  ConvBn2d(const nn::Conv2d& conv, std::shared_ptr<nn::BatchNorm2d> bn,
           std::shared_ptr<Quantizer> weight_fake_quant,
           std::shared_ptr<Quantizer> activation_fake_quant, bool fused_relu = false);
  ConvBn2d(const Tensor& weight, const Tensor& bias, const Conv2dParams& params,
           std::shared_ptr<nn::BatchNorm2d> bn, std::shared_ptr<Quantizer> weight_fake_quant,
           std::shared_ptr<Quantizer> activation_fake_quant, bool fused_relu);
  std::shared_ptr<QatLayer> with_quantizers(
      std::shared_ptr<Quantizer> weight_fake_quant,
      std::shared_ptr<Quantizer> activation_fake_quant) const override;
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
  const Conv2dParams& params() const { return params_; }

 private:
  Conv2dParams params_;
};

/// Linear + BatchNorm1d (+ ReLU) on (N, in_features), types "LinearBn1d" / "LinearBnReLU1d"
/// (PyTorch's torch.ao.nn.intrinsic.qat.LinearBn1d). convert turns it into a QuantizedLinear.
class LinearBn1d : public BnFoldedLayer {
 public:
  LinearBn1d(const nn::Linear& linear, std::shared_ptr<nn::BatchNorm1d> bn,
             std::shared_ptr<Quantizer> weight_fake_quant,
             std::shared_ptr<Quantizer> activation_fake_quant, bool fused_relu = false);
  LinearBn1d(const Tensor& weight, const Tensor& bias, std::shared_ptr<nn::BatchNorm1d> bn,
             std::shared_ptr<Quantizer> weight_fake_quant,
             std::shared_ptr<Quantizer> activation_fake_quant, bool fused_relu);
  std::shared_ptr<QatLayer> with_quantizers(
      std::shared_ptr<Quantizer> weight_fake_quant,
      std::shared_ptr<Quantizer> activation_fake_quant) const override;
  /// x (N, in_features) -> (N, out_features)
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
  std::int64_t in_features() const { return weight_.size(1); }
  std::int64_t out_features() const { return weight_.size(0); }
};

/// An average pool (AvgPool2d / AdaptiveAvgPool2d, child "pool") inside the quantized region
/// in QAT: its output is fake-quantized with its input's qparams (the quantizer that produced
/// the input, shared, not owned), which is exactly what the int8 pool computes (PyTorch's
/// quantized avg pool keeps the input's qparams). Without it the QAT model would average in
/// float and disagree with the int8 model by up to half a step per pooled value. Type
/// "QuantAvgPool2d" / "QuantAdaptiveAvgPool2d"; prepare_qat puts it in from the graph.
class QuantPool : public nn::Module {
 public:
  QuantPool(nn::ModulePtr pool, std::shared_ptr<Quantizer> input_quantizer);
  Tensor forward(const Tensor& x) override;
  bool is_atomic() const override { return true; }
  const nn::ModulePtr& pool() const { return pool_; }
  /// The quantizer whose grid the output keeps (the one that produced the input).
  const std::shared_ptr<Quantizer>& input_quantizer() const { return input_quantizer_; }

 private:
  nn::ModulePtr pool_;
  std::shared_ptr<Quantizer> input_quantizer_;
};

}  // namespace qat::quant
