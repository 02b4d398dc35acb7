#pragma once
// Quantizers whose range is trained by gradient descent: LSQ / LSQ+ scale and zero point, and a
// PACT-style learnable clipping value. Both start from an estimate over the first training
// batches ("warm-up"), then learn; the phase is kept in buffers, so a checkpoint resumes it.
#include "modules/quant/quantizer.h"

namespace qat::quant {

/// How the learnable range starts.
enum class LearnableInit {
  Observer,  ///< the observer's qparams after the warm-up batches (PyTorch's static estimate)
  LSQ,       ///< scale = 2 mean(|x|) / sqrt(qmax) from the first batch (Esser et al. 2019)
};

/// LSQ / LSQ+ (Esser et al. 2019; Bhalgat et al. 2020), PyTorch's _LearnableFakeQuantize:
/// parameters scale and zero_point (float32, [1] or [C]); the gradients are those of
/// fake_quantize_learnable_per_{tensor,channel}_affine with grad_factor 1 / sqrt(numel * qmax)
/// (use_grad_scaling). Symmetric specs keep the zero point fixed (not learned).
/// Buffers: fake_quant_enabled, observer_enabled (= PyTorch's static_enabled),
/// learning_enabled, warmup_seen.
/// Training guards (learnable quantizers alike): a scale the optimizer drove to or below 0 is
/// clamped up to kScaleEps with one warning per quantizer and counted; a non-finite scale or zero
/// point, and NaN / inf in a training input after the warm-up (which the forward would map to
/// quant_min / quant_max, hiding it from the loss), throw qat::Error naming the quantizer.
/// On CUDA: estimating batches run this CPU code on a host copy (state moved to the host and
/// back), learning batches the CUDA ops with the scale clamped on the device; the NaN checks are
/// not made there (a non-finite loss shows them). See forward in learnable_quantizer.cpp.
class LearnableFakeQuantize : public Quantizer {
 public:
  struct Options {
    LearnableInit init = LearnableInit::Observer;
    std::int64_t warmup_batches = 1;  ///< training batches that set the range before learning
    bool use_grad_scaling = true;
  };
  LearnableFakeQuantize(const QuantSpec& spec, std::shared_ptr<Observer> observer,
                        const Shape& param_shape, const Options& options);
  LearnableFakeQuantize(const QuantSpec& spec, std::shared_ptr<Observer> observer,
                        const Shape& param_shape = Shape{1})
      : LearnableFakeQuantize(spec, std::move(observer), param_shape, Options{}) {}

  Tensor forward(const Tensor& x) override;
  /// zero_point rounded half to even and clamped, as the forward pass uses it.
  QParams qparams() const override;
  Observer* observer() const override { return observer_.get(); }

  /// Stop estimating, learn scale (and zero_point if affine) from now on.
  void enable_param_learning();
  /// Back to estimating the range from the observer, without learning.
  void enable_static_estimate();
  bool learning_enabled() const { return learning_enabled_.item() != 0; }
  /// Frozen: neither estimating nor learning (learning_enabled 0, observer off). Unfrozen: back
  /// to learning if the warm-up is over, else to estimating.
  void freeze_qparams(bool on = true) override;
  const Tensor& scale() const { return scale_; }
  const Tensor& zero_point() const { return zero_point_; }
  const Options& options() const { return options_; }
  /// Scale values the optimizer left below kScaleEps (1.19e-7) and the forward clamped up to it,
  /// summed over forwards (not saved). The first clamp prints one warning naming the quantizer.
  std::int64_t scale_clamps() const { return scale_clamps_; }
  /// scale finite with |scale| <= kMaxScale (the forward clamps it up to eps, so a value the
  /// optimizer left below is safe), zero_point finite within 2^24 of the spec's range (clamped at
  /// use), the spec's fixed zero point when symmetric; learning_enabled 0 or 1; warmup_seen >= 0.
  void check_state(const StateView& state, std::vector<std::string>& problems) const override;

 private:
  void estimate(const Tensor& x);

  Options options_;
  std::shared_ptr<Observer> observer_;
  Tensor scale_, zero_point_, learning_enabled_, warmup_seen_;
  std::int64_t scale_clamps_ = 0;
};

/// Symmetric fake quantization with a learnable clipping value amax (PACT, Choi et al. 2018;
/// NVIDIA pytorch-quantization's learn_amax): scale = amax / qmax; see
/// fake_quantize_learnable_amax. amax starts at max(|min|, |max|) of the warm-up batches.
/// Parameter amax ([1] or [C]); buffers fake_quant_enabled, observer_enabled, warmup_seen.
class LearnableAmaxFakeQuantize : public Quantizer {
 public:
  LearnableAmaxFakeQuantize(const QuantSpec& spec, std::shared_ptr<Observer> observer,
                            const Shape& param_shape = Shape{1}, std::int64_t warmup_batches = 1);
  Tensor forward(const Tensor& x) override;
  /// scale = amax / qmax, zero_point 0 (unsigned specs clip to [0, amax]).
  /// amax finite with |amax| <= kMaxScale (clamped up to eps at use); warmup_seen >= 0.
  void check_state(const StateView& state, std::vector<std::string>& problems) const override;
  QParams qparams() const override;
  Observer* observer() const override { return observer_.get(); }
  const Tensor& amax() const { return amax_; }
  /// Frozen: amax neither estimated nor learned (a runtime switch, not saved in checkpoints).
  void freeze_qparams(bool on = true) override;
  bool qparams_frozen() const { return frozen_; }
  /// amax values the optimizer left below kScaleEps and the forward clamped up to it (as
  /// LearnableFakeQuantize::scale_clamps).
  std::int64_t amax_clamps() const { return amax_clamps_; }

 private:
  std::int64_t warmup_batches_;
  bool frozen_ = false;
  std::int64_t amax_clamps_ = 0;
  std::shared_ptr<Observer> observer_;
  Tensor amax_, warmup_seen_;
};

/// Learned scales and amax values clamped up to kScaleEps in `model` so far: the sum of
/// LearnableFakeQuantize::scale_clamps and LearnableAmaxFakeQuantize::amax_clamps.
std::int64_t learnable_range_clamps(nn::Module& model);

}  // namespace qat::quant
