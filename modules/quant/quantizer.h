#pragma once
// Fake quantizers: Modules that observe a tensor and fake-quantize it, with PyTorch's buffer
// names (fake_quant_enabled, observer_enabled, scale, zero_point, activation_post_process) so
// checkpoints and `named_buffers()` read like PyTorch's. Learnable versions: learnable_quantizer.h.
// Unlike PyTorch, observers only record in training mode or during post-training calibration
// (CalibrationGuard, quant::calibrate in control.h): evaluating a model never moves its qparams
// (PyTorch users call disable_observer before evaluating for the same effect).
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>

#include "framework/nn/module.h"
#include "modules/quant/observer.h"
#include "modules/quant/qparams.h"
#include "modules/quant/spec.h"

namespace qat::quant {

class Quantizer;

/// RAII: post-training calibration on this thread. While one is alive, quantizers whose observer
/// is enabled record in eval mode too (learnable ones estimate their range as in their warm-up,
/// without moving to the learning phase), and the guard counts the batches each one observed.
/// Guards nest; the innermost one counts.
class CalibrationGuard {
 public:
  CalibrationGuard();
  ~CalibrationGuard();
  CalibrationGuard(const CalibrationGuard&) = delete;
  CalibrationGuard& operator=(const CalibrationGuard&) = delete;
  /// The guard alive on this thread, or null.
  static CalibrationGuard* current();
  /// Batches that `q` observed under this guard.
  std::int64_t observed(const Quantizer* q) const;
  void record(const Quantizer* q) { ++seen_[q]; }

 private:
  CalibrationGuard* prev_;
  std::unordered_map<const Quantizer*, std::int64_t> seen_;
};

/// Whether this thread is calibrating (a CalibrationGuard is alive).
inline bool calibrating() { return CalibrationGuard::current() != nullptr; }

/// Base of every quantizer: a spec, on/off switches (uint8 buffers) and the qparams that an
/// integer model uses after conversion.
class Quantizer : public nn::Module {
 public:
  Quantizer(std::string type_name, const QuantSpec& spec);

  const QuantSpec& spec() const { return spec_; }
  /// Scale (float32) and zero point (int32) as an integer kernel would use them.
  virtual QParams qparams() const = 0;
  /// The observer child ("activation_post_process"), or null.
  virtual Observer* observer() const { return nullptr; }
  /// Whether the qparams come from data: the observer recorded at least one batch (in training,
  /// calibration, or a loaded checkpoint). convert refuses quantizers that were never calibrated.
  virtual bool calibrated() const {
    const Observer* o = observer();
    return o == nullptr || o->has_observed();
  }
  /// A quantizer is one step in a captured graph (its observer is an internal detail).
  bool is_atomic() const override { return true; }

  void enable_fake_quant(bool on = true) { fake_quant_enabled_.fill_(on ? 1 : 0); }
  void disable_fake_quant() { enable_fake_quant(false); }
  bool fake_quant_enabled() const { return fake_quant_enabled_.item() != 0; }
  void enable_observer(bool on = true) { observer_enabled_.fill_(on ? 1 : 0); }
  void disable_observer() { enable_observer(false); }
  bool observer_enabled() const { return observer_enabled_.item() != 0; }
  /// Freezes the qparams: the observer stops and learnable scale / zero point / amax stop
  /// learning (`on` false undoes it: back to observing, or to learning after the warm-up).
  virtual void freeze_qparams(bool on = true) { enable_observer(!on); }

  /// Dotted name for error messages (set by prepare_qat); passed on to the observer.
  void set_label(const std::string& label);
  const std::string& label() const { return label_; }
  std::string extra_repr() const override { return spec_.str(); }
  /// The switches fake_quant_enabled and observer_enabled are 0 or 1.
  void check_state(const StateView& state, std::vector<std::string>& problems) const override;

 protected:
  /// Whether this forward records: the observer is enabled and the module trains or a
  /// CalibrationGuard is alive (which then counts the batch).
  bool observing() const;
  /// NaN / inf in a training input would quantize to quant_min / quant_max (PyTorch's forward)
  /// and vanish from the loss: throws naming the quantizer, the index and the value (through
  /// the current optim::DivergenceGuard when there is one, so the error names the step). `why`
  /// ends the message. One vectorised pass, no allocation when every value is finite.
  void refuse_nonfinite_input(const Tensor& x, const char* why) const;

  QuantSpec spec_;
  Tensor fake_quant_enabled_, observer_enabled_;
  std::string label_;
};

/// Which statistics an observer keeps.
enum class ObserverKind { MinMax, MovingAverage, Histogram };

/// A new observer for `spec` with statistics of `param_shape` (histogram: per-tensor only).
std::shared_ptr<Observer> make_observer(ObserverKind kind, const QuantSpec& spec,
                                        const Shape& param_shape);

/// PyTorch's FakeQuantize: in a training-mode forward, when observing, the observer records x and the
/// scale / zero_point buffers take its qparams; when fake-quantizing, y = fake_quantize(x) with the
/// straight-through gradient (fake_quant.h). On CUDA (MinMax and moving-average observers, per
/// tensor or per channel) the whole step runs in device kernels without a host sync, scale and
/// zero_point staying on the device; see forward_cuda in quantizer.cpp for what differs.
class FakeQuantize : public Quantizer {
 public:
  /// `param_shape`: param_shape(spec, shape of the quantized tensor) ([1] per tensor).
  FakeQuantize(const QuantSpec& spec, std::shared_ptr<Observer> observer,
               const Shape& param_shape = Shape{1});
  Tensor forward(const Tensor& x) override;
  QParams qparams() const override { return {scale_.clone(), zero_point_.clone()}; }
  Observer* observer() const override { return observer_.get(); }
  const Tensor& scale() const { return scale_; }
  const Tensor& zero_point() const { return zero_point_; }
  /// Scales in [kMinScale, kMaxScale]; zero points in the spec's range, and the spec's fixed
  /// zero point when symmetric (or 0, the never-observed state).
  void check_state(const StateView& state, std::vector<std::string>& problems) const override;

 private:
  Tensor forward_cuda(const Tensor& x);
  Tensor observe_rows(const Tensor& x);

  std::shared_ptr<Observer> observer_;
  Tensor scale_, zero_point_;
};

/// FP8 (E4M3 / E5M2) fake quantization with scale = amax / fp8_max, amax = max(|min|, |max|)
/// from the observer (current or moving-average range: per-tensor "delayed scaling").
class FP8FakeQuantize : public Quantizer {
 public:
  FP8FakeQuantize(const QuantSpec& spec, std::shared_ptr<Observer> observer,
                  const Shape& param_shape = Shape{1});
  Tensor forward(const Tensor& x) override;
  QParams qparams() const override;
  Observer* observer() const override { return observer_.get(); }
  const Tensor& scale() const { return scale_; }
  /// Scales in [kMinScale, kMaxScale].
  void check_state(const StateView& state, std::vector<std::string>& problems) const override;

 private:
  std::shared_ptr<Observer> observer_;
  Tensor scale_;
};

}  // namespace qat::quant
