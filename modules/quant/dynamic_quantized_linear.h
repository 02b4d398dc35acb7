#pragma once
// Integer inference for linear layers whose input is quantized dynamically (torchao's 8da4w,
// NVIDIA's dynamic QuantDescriptor): convert() puts a DynamicQuantizedLinear in place of a QAT
// Linear whose input comes from a dynamic activation quantizer, whose own output quantizer is
// dynamic, or whose weights have a scale per group of inputs (int8_dyn_act_int4_weight).
#include <optional>

#include "framework/nn/module.h"
#include "modules/quant/quantized_layers.h"
#include "modules/quant/spec.h"

namespace qat::quant {

/// y = relu?(x W^T + b) on integers: a float input is quantized per row (each index of its first
/// dimension: a sample / token) or per tensor on the fly, the row's qparams from its min / max by
/// PyTorch's formulas (calculate_qparams, as DynamicFakeQuantize in QAT); a uint8 input (from a
/// static int8 layer) is read with its quantization. Weights are int8 codes (O, K) of `weight_bits`
/// bits, symmetric, with a float scale per output and group of `group` inputs (O, groups); the
/// products accumulate in int32 per group and dequantize as row_scale x group_scale, the groups
/// summed in float in a fixed order (int8_dynamic.h). The output is float, or uint8 quantized
/// with `output` (a static output quantizer, rounded as Quantize).
class DynamicQuantizedLinear : public nn::Module {
 public:
  struct Options {
    /// Dynamic integer spec of a float input (<= 8 bits, per tensor or per-channel on axis 0);
    /// nullopt: the layer reads uint8 inputs only.
    std::optional<QuantSpec> input;
    /// Static output quantization; nullopt: float output.
    std::optional<ActivationQuant> output;
    std::int64_t group = 0;  ///< inputs per weight scale (0: K, one scale per output)
    int weight_bits = 8;     ///< the codes lie in [-2^(bits-1), 2^(bits-1) - 1]
    bool fused_relu = false;
  };
  /// weight_q int8 (O, K), weight_scale float (O, ceil(K / group)), bias float (O) or undefined.
  DynamicQuantizedLinear(const Tensor& weight_q, const Tensor& weight_scale, const Tensor& bias,
                         const Options& options);
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
  /// Weight codes in the weight_bits range, weight scales in [kMinScale, kMaxScale], a finite
  /// bias, and for a static output its scale, zero point and range (as Quantize).
  void check_state(const StateView& state, std::vector<std::string>& problems) const override;

  const Options& options() const { return options_; }
  const Tensor& weight() const { return weight_; }
  const Tensor& weight_scale() const { return weight_scale_; }
  const Tensor& bias() const { return bias_; }

 private:
  struct Prepared;
  const Prepared& prepared();

  Options options_;
  Tensor weight_, weight_scale_, bias_, scale_, zero_point_, output_range_;
  std::shared_ptr<const Prepared> prepared_;
};

/// The last step of a QAT model whose output quantizer is dynamic, after convert (in place of
/// the DeQuantStub): y = fake_quantize(x) with qparams from x itself (dynamic_qparams), float to
/// float, as DynamicFakeQuantize computed it.
class DynamicQuantDequant : public nn::Module {
 public:
  explicit DynamicQuantDequant(const QuantSpec& spec);
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
  const QuantSpec& spec() const { return spec_; }

 private:
  QuantSpec spec_;
};

}  // namespace qat::quant
