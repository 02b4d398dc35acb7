#pragma once
// Integer inference layers that convert() puts in place of the QAT layers. Activations flow as
// quantized uint8 tensors (Tensor::quant_info: scale, zero point); weights are int8 symmetric
// per channel, accumulation int32, and each output is requantized in float32 with a float bias,
// the fake quantizer's arithmetic (int8::Requant). Every layer checks that its input carries the
// quantization it was converted for. (Checkpoints written before the float bias hold an int32
// bias at s_in s_w; load_into converts it, see register_load_hints in checkpoint_meta.h.)
#include <memory>
#include <vector>

#include "framework/autograd/ops.h"
#include "framework/nn/module.h"
#include "modules/quant/qparams.h"

namespace qat::quant {

namespace int8 {
struct Requant;
}

/// How an 8-bit activation is stored: uint8 codes with a zero point, clamped to [lo, hi]
/// (a signed spec is stored shifted by 128: int8 q <-> uint8 q + 128).
struct ActivationQuant {
  QuantInfo quant;
  std::int32_t lo = 0, hi = 255;
};

/// float -> uint8: q = clamp(round(x / scale) + zero_point, lo, hi) (QuantStub after convert).
class Quantize : public nn::Module {
 public:
  explicit Quantize(const ActivationQuant& output);
  Tensor forward(const Tensor& x) override;
  QuantInfo output_quant() const;
  std::string extra_repr() const override;
  /// scale in [kMinScale, kMaxScale], 0 <= lo <= zero_point <= hi <= 255.
  void check_state(const StateView& state, std::vector<std::string>& problems) const override;

 private:
  Tensor scale_, zero_point_, output_range_;
};

/// uint8 -> float: x = scale (q - zero_point) (DeQuantStub after convert); float input passes.
class Dequantize : public nn::Module {
 public:
  Dequantize() : nn::Module("Dequantize") {}
  Tensor forward(const Tensor& x) override;
};

/// Shared state of QuantizedLinear / QuantizedConv2d: int8 weight, per-channel weight scales,
/// float bias, the expected input quantization and the output quantization.
class QuantizedWeightLayer : public nn::Module {
 public:
  QuantizedWeightLayer(std::string type, const Tensor& weight_q, const Tensor& weight_scale,
                       const Tensor& bias_q, QuantInfo input, const ActivationQuant& output,
                       bool fused_relu);
  QuantInfo input_quant() const;
  QuantInfo output_quant() const;
  bool fused_relu() const { return fused_relu_; }
  const Tensor& weight() const { return weight_; }
  const Tensor& weight_scale() const { return weight_scale_; }
  const Tensor& bias() const { return bias_; }
  /// Every value an int8 forward can use without overflow: scales (weight, input, output) in
  /// [kMinScale, kMaxScale], zero points in [0, 255], 0 <= lo <= zero_point <= hi <= 255, a
  /// finite bias, and 2 * 255 * 128 * K <= 2^31 - 1, the int32 accumulator's bound for K products.
  void check_state(const StateView& state, std::vector<std::string>& problems) const override;

 protected:
  /// Checks x is uint8 quantized as expected (naming the layer), returns nothing.
  void check_input(const Tensor& x) const;

  /// The order of a conv weight's K when packed: as stored (C/groups, kh, kw), channels-last
  /// (kh, kw, C/groups), or tall windows (kw, kh, C), QuantizedConv2d::forward's one-run layout.
  /// RowWinograd: not a GEMM's order but the row Winograd's transformed weights
  /// (int8::pack_row_winograd for tiles of `pieces` outputs, Prepared::row; none where its
  /// bound fails).
  enum class KOrder : std::int32_t { Stored, KhKwC, KwKhC, RowWinograd };

  /// The weights packed for the GEMM micro-kernel (one per group; a conv's K in `order`, in
  /// `pieces` runs for the implicit GEMM) and the output stage, for the current buffers
  /// and CPU path: built at the first forward and again whenever the buffers (a loaded checkpoint) or
  /// the CPU path changed. Not part of the module's state. narrow: for inputs in [0, 127] (a 7-bit
  /// activation range), which AVX2 / AVX-512 multiply in int8 quads (int8_kernels.h); each
  /// forward picks it when its input allows, and both packings are kept.
  struct Prepared;
  const Prepared& prepared(std::int64_t groups, KOrder order, std::int64_t pieces, bool narrow);

  /// The output stage's operands from the current buffers: scales[o] = s_in s_w[o], bias[o]
  /// (0 without one), 1 / s_out, the output zero point and clamp range (a fused ReLU clamps at
  /// the zero point). The Requant points into the two vectors.
  int8::Requant output_stage(std::vector<float>& scales, std::vector<float>& bias) const;

  /// rows x K columns reordered between the channels-first (C, HW) order and the channels-last
  /// (HW, C) one, C = hwc_channels_ (to_last: into channels-last). Throws if C does not divide K.
  template <class T>
  std::vector<T> hwc_columns(const T* src, std::int64_t rows, std::int64_t K, bool to_last) const;

  /// QuantizedLinear: > 0 when its input is a flattened channels-last (N, H, W, C) activation
  /// with C = hwc_channels_ (set by convert); the weight columns (C, H, W) are permuted into
  /// (H, W, C) order when packed. A runtime layout choice, not part of the module's state.
  std::int64_t hwc_channels_ = 0;

  Tensor weight_, weight_scale_, bias_, input_scale_, input_zero_point_, scale_, zero_point_,
      output_range_;
  bool fused_relu_;
  std::shared_ptr<const Prepared> prepared_[4];  // [narrow]; KOrder::RowWinograd: [2] m 4, [3] m 5
};

class QuantizedLinear : public QuantizedWeightLayer {
 public:
  QuantizedLinear(const Tensor& weight_q, const Tensor& weight_scale, const Tensor& bias_q,
                  QuantInfo input, const ActivationQuant& output, bool fused_relu);
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
  /// Reads its input as a flattened channels-last activation of C channels (0: as given).
  void set_input_channels_last(std::int64_t C) { hwc_channels_ = C; }
  std::int64_t input_channels_last() const { return hwc_channels_; }
};

class QuantizedConv2d : public QuantizedWeightLayer {
 public:
  QuantizedConv2d(const Tensor& weight_q, const Tensor& weight_scale, const Tensor& bias_q,
                  QuantInfo input, const ActivationQuant& output, bool fused_relu,
                  const Conv2dParams& params);
  Tensor forward(const Tensor& x) override;
  /// A following 2 x 2 max pool (stride 2, no padding) in the GEMM's output stage: the max of
  /// each window's int32 sums, requantized once. The same bytes as the pool of forward(x);
  /// undefined for other pools (nn::Module::forward_max_pooled).
  Tensor forward_max_pooled(const Tensor& x, const Pool2dParams& pool) override;
  std::string extra_repr() const override;
  /// Layouts inside the quantized region, chosen by convert (runtime settings, not state):
  /// channels-last input (N, H, W, C) and / or output (N, Ho, Wo, O) instead of NCHW.
  void set_layout(bool input_channels_last, bool output_channels_last) {
    in_nhwc_ = input_channels_last;
    out_nhwc_ = output_channels_last;
  }
  bool input_channels_last() const { return in_nhwc_; }
  bool output_channels_last() const { return out_nhwc_; }

 private:
  Tensor run(const Tensor& x, bool pool);
  Conv2dParams params_;
  bool in_nhwc_ = false, out_nhwc_ = false;
};

/// Max pooling on quantized values (max commutes with the monotone dequantization).
class QuantizedMaxPool2d : public nn::Module {
 public:
  explicit QuantizedMaxPool2d(const Pool2dParams& params)
      : nn::Module("QuantizedMaxPool2d"), params_(params) {}
  Tensor forward(const Tensor& x) override;
  /// Input and output channels-last (N, H, W, C) (set by convert between channels-last convs).
  void set_channels_last(bool on) { nhwc_ = on; }
  bool channels_last() const { return nhwc_; }
  const Pool2dParams* max_pool_params() const override { return &params_; }

 private:
  Pool2dParams params_;
  bool nhwc_ = false;
};

/// Average pooling on quantized (N, C, H, W) values (NCHW only: convert keeps the input of an
/// average pool NCHW). The output keeps the input's quantization, as PyTorch's quantized
/// avg_pool2d. Each output is the float average of the dequantized window (avg_pool2d's windows,
/// padding as real 0) rounded back to the input's grid, q = round_half_even(avg / s) + z: the
/// same float32 operations as the QAT model's QuantPool, so the int8 codes equal the fake-quant
/// model's. (An integer average, z + round_half_even(sum (q - z) / count), differs from it at
/// exact ties, which even window counts make common.)
class QuantizedAvgPool2d : public nn::Module {
 public:
  explicit QuantizedAvgPool2d(const Pool2dParams& params);
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
  const Pool2dParams& params() const { return params_; }

 private:
  Pool2dParams params_;
};

/// Adaptive average pooling on quantized (N, C, H, W) values to `output_size`: adaptive_avg_pool2d's
/// bins, QuantizedAvgPool2d's rule; the output keeps the input's quantization.
class QuantizedAdaptiveAvgPool2d : public nn::Module {
 public:
  explicit QuantizedAdaptiveAvgPool2d(Pair output_size);
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
  Pair output_size() const { return output_size_; }

 private:
  Pair output_size_;
};

/// ReLU on quantized values: q = max(q, zero_point).
class QuantizedReLU : public nn::Module {
 public:
  QuantizedReLU() : nn::Module("QuantizedReLU") {}
  Tensor forward(const Tensor& x) override;
};

}  // namespace qat::quant
