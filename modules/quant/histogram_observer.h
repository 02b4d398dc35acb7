#pragma once
#include <cstdint>
#include <utility>
#include <vector>

#include "modules/quant/observer.h"

namespace qat::quant {

/// A histogram of the observed values (per tensor, integer specs) over a range that grows as data
/// arrives, and a calibration that picks the clipping range [lo, hi] from it.
///
/// The histogram follows PyTorch 1.13's HistogramObserver: `bins` equal bins over [min_val,
/// max_val], values binned as torch.histc does; when a batch extends the range, the range is
/// relaxed upwards (_adjust_min_max) so the old bins map onto a grid 128 times finer
/// (upsample_rate) and the old histogram is resampled onto the new bins (_combine_histograms).
/// So max_val may exceed the largest value seen (by under 1/128 of the range before the growth).
/// Unlike PyTorch 1.13 the batch is binned over the float range (1.13 truncates it with int()),
/// and values seen while the range is a single point are kept when it first grows (1.13 drops them).
///
/// Calibrations (the histogram's mass is taken as uniform within each bin):
///   MinMax      [min_val, max_val].
///   Percentile  p = `percentile`: symmetric specs [-a, a] with a the p-th percentile of |x|;
///               affine specs [lo, hi] with (100 - p) / 2 percent of the mass below lo and as
///               much above hi (p = 100: the first and last non-empty bins' outer edges).
///   MSE         PyTorch 1.13's _non_linear_param_search: the range of whole bins is shrunk from
///               either end (stepping the tail quantiles by 1e-5) while the L2 error of
///               quantizing the histogram onto 2^bits levels falls; evaluated in float32 in
///               PyTorch's order, so the qparams are PyTorch's.
///   Entropy     TensorRT's calibration (Migacz 2017) on the histogram of |x| (`bins` bins
///               over [0, max|x|], folded from the histogram of x): the threshold t = i bins,
///               i >= L, minimising KL(P || Q), P the first i bins with the mass above added to
///               the last, Q the same bins merged into L levels and spread back over the bins
///               where P is non-zero; ties go to the larger t. Symmetric specs: [-t, t] with
///               L = 2^(bits-1), the levels on each side. Affine specs: [max(min_val, -t),
///               min(max_val, t)], with L = 2^bits when the data has one sign (the whole grid
///               on one side of 0, as NVIDIA's pytorch-quantization for unsigned data) and
///               2^(bits-1) otherwise.
/// Buffers: min_val, max_val (the histogram's range, [1]) and histogram (float32 [bins]).
class HistogramObserver : public Observer {
 public:
  enum class Calibration { MinMax, Percentile, MSE, Entropy };
  struct Options {
    std::int64_t bins = 2048;
    Calibration calibration = Calibration::MSE;
    double percentile = 99.99;  ///< in (0, 100], for Calibration::Percentile
  };

  /// Throws qat::Error unless the spec is an integer per-tensor one, bins is in [1, 2^24] and
  /// the percentile in (0, 100].
  explicit HistogramObserver(const QuantSpec& spec);
  HistogramObserver(const QuantSpec& spec, const Options& options);

  /// Checks x (Observer::forward: NaN or Inf throws), then adds it to the histogram.
  Tensor forward(const Tensor& x) override;
  /// quant::calculate_qparams of calibrated_range(); unobserved: scale 1, zero_point 0.
  QParams calculate_qparams() const override;
  /// The clipping range [lo, hi] that the calibration picks (before qparams widen it to 0);
  /// {+inf, -inf} before any data, {v, v} while every value seen equals v.
  std::pair<float, float> calibrated_range() const;
  const Tensor& histogram() const { return histogram_; }
  const Options& options() const { return options_; }
  /// Forgets the range and the histogram.
  void reset() override;
  std::string extra_repr() const override;
  /// Observer's range checks, and histogram counts finite (|count| <= 1e30).
  void check_state(const StateView& state, std::vector<std::string>& problems) const override;

 protected:
  /// Records the batch range for forward(), which bins the batch.
  void update(const float* batch_min, const float* batch_max) override;

 private:
  void add_batch(const float* x, std::int64_t n, float lo, float hi);

  Options options_;
  Tensor histogram_;
  float batch_min_ = 0, batch_max_ = 0;
  bool batch_pending_ = false;
  std::vector<std::uint32_t> counts_;  // scratch: 4 counter arrays of bins (see count_bins)
  std::vector<float> batch_hist_;      // scratch: one batch's counts (summed over replicas)
};

}  // namespace qat::quant
