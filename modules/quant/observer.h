#pragma once
// Observers record the range of the tensors that flow through them (buffers min_val and
// max_val, checkpointed like any buffer) and turn it into qparams with PyTorch's formulas.
// They are Modules whose forward returns its input unchanged.
#include <string>

#include "framework/nn/module.h"
#include "modules/quant/qparams.h"
#include "modules/quant/spec.h"

namespace qat::quant {

/// Base of the observers: one (min, max) pair per tensor, channel or block of `spec`.
class Observer : public nn::Module {
 public:
  /// `param_shape`: shape of the statistics (param_shape(spec, input shape)); may be left empty
  /// for per-tensor specs, and is otherwise fixed by the first observed input.
  Observer(std::string type_name, const QuantSpec& spec, const Shape& param_shape = Shape{1});

  /// Records x's statistics (never recorded on the tape) and returns x. On CUDA (MinMax and
  /// moving-average observers) the statistics stay on the device and are updated there without
  /// a host sync; a batch holding NaN / inf, which the CPU path refuses with an exception, is
  /// skipped and counted in nonfinite_batches() instead (as fused_moving_avg_obs_fake_quant).
  Tensor forward(const Tensor& x) override;
  /// qparams from the recorded range (calculate_qparams); unobserved: scale 1, zero_point 0.
  virtual QParams calculate_qparams() const;

  const QuantSpec& spec() const { return spec_; }
  const Tensor& min_val() const { return min_val_; }
  const Tensor& max_val() const { return max_val_; }
  bool has_observed() const;
  /// Dotted name used in error messages (set by prepare_qat), e.g. "fc1.activation_post_process".
  void set_label(std::string label) { label_ = std::move(label); }
  const std::string& label() const { return label_; }
  /// Forgets the recorded range.
  virtual void reset();
  /// How a batch's range enters the statistics on CUDA: 0 running min / max, > 0 the moving
  /// average with that constant, < 0 no CUDA path (forward on CUDA throws).
  virtual float device_averaging_constant() const { return -1; }
  /// Batches skipped on CUDA for holding NaN / inf: int32 [1] on the statistics' device,
  /// undefined before the first CUDA batch (reading it syncs; the training step never does).
  const Tensor& nonfinite_batches() const { return nonfinite_batches_; }
  /// Internal (forward, FakeQuantize on CUDA): gives the statistics the shape x needs (first
  /// input; refused once observed) on x's device, and, on CUDA, the nonfinite_batches counter.
  void prepare_statistics(const Tensor& x);
  std::string extra_repr() const override { return spec_.str(); }
  /// Each (min_val, max_val) is a recorded range, finite with min <= max and magnitudes at most
  /// kMaxScale, or the never-observed (+inf, -inf).
  void check_state(const StateView& state, std::vector<std::string>& problems) const override;

  /// Internal (FakeQuantize's per-row path, observe and quantize a weight row by row):
  /// - begin_rows: checks x as forward does (the same errors), gives the statistics x's shape;
  /// - merge: the statistics after a batch whose ranges are batch_min / batch_max, for n
  ///   parameters whose current values mn / mx hold on entry (update's arithmetic, on copies:
  ///   the observer is unchanged); false for an observer without such an elementwise rule;
  /// - set_statistics: min_val / max_val from n values each.
  void begin_rows(const Tensor& x);
  virtual bool merge(const float* batch_min, const float* batch_max, float* mn, float* mx,
                     std::int64_t n) const;
  void set_statistics(const float* mn, const float* mx, std::int64_t n);

 protected:
  /// Updates min_val_/max_val_ from the per-parameter range of this batch; first marks
  /// parameters never observed before.
  virtual void update(const float* batch_min, const float* batch_max) = 0;
  /// "MinMaxObserver 'fc1.activation_post_process'" for error messages.
  std::string who() const;

  QuantSpec spec_;
  Tensor min_val_, max_val_;
  std::string label_;
  Tensor nonfinite_batches_;  // not a buffer: checkpoints stay the CPU's
};

/// Running min / max: min_val = min(min_val, min(x)) (PyTorch's MinMaxObserver and
/// PerChannelMinMaxObserver, by spec granularity).
class MinMaxObserver : public Observer {
 public:
  explicit MinMaxObserver(const QuantSpec& spec, const Shape& param_shape = Shape{1});
  float device_averaging_constant() const override { return 0; }

 protected:
  MinMaxObserver(std::string type_name, const QuantSpec& spec, const Shape& param_shape);
  void update(const float* batch_min, const float* batch_max) override;

 public:
  bool merge(const float* batch_min, const float* batch_max, float* mn, float* mx,
             std::int64_t n) const override;

 private:
  static void merge_into(const float* batch_min, const float* batch_max, float* mn, float* mx,
                         std::int64_t n);
};

/// Exponential moving average of the batch ranges, the first batch initialising it:
///   min_val = min_val + c (min(x) - min_val), c = averaging_constant (0.01), in float32
/// (PyTorch's MovingAverageMinMaxObserver and MovingAveragePerChannelMinMaxObserver).
class MovingAverageMinMaxObserver : public Observer {
 public:
  explicit MovingAverageMinMaxObserver(const QuantSpec& spec, const Shape& param_shape = Shape{1},
                                       double averaging_constant = 0.01);
  double averaging_constant() const { return averaging_constant_; }
  float device_averaging_constant() const override { return static_cast<float>(averaging_constant_); }
  std::string extra_repr() const override;

 protected:
  MovingAverageMinMaxObserver(std::string type_name, const QuantSpec& spec, const Shape& param_shape,
                              double averaging_constant);
  void update(const float* batch_min, const float* batch_max) override;

 public:
  bool merge(const float* batch_min, const float* batch_max, float* mn, float* mx,
             std::int64_t n) const override;

 private:
  void merge_into(const float* batch_min, const float* batch_max, float* mn, float* mx,
                  std::int64_t n) const;
  double averaging_constant_;
};

/// PyTorch's names for the per-channel versions (spec granularity must be PerChannel).
class PerChannelMinMaxObserver : public MinMaxObserver {
 public:
  PerChannelMinMaxObserver(const QuantSpec& spec, std::int64_t num_channels);
};

class MovingAveragePerChannelMinMaxObserver : public MovingAverageMinMaxObserver {
 public:
  MovingAveragePerChannelMinMaxObserver(const QuantSpec& spec, std::int64_t num_channels,
                                        double averaging_constant = 0.01);
};

/// Double quantization of per-block scales (Dettmers et al. 2023, QLoRA): the block scales are
/// stored as unsigned `bits`-bit integers times one float32 scale s2 = max(scale) / (2^bits - 1);
/// each scale becomes max(round(scale / s2), 1) * s2 in place.
void double_quantize_scales(Tensor& scale, int bits);

}  // namespace qat::quant
