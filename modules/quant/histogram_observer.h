#pragma once
#include <utility>

#include "modules/quant/observer.h"

namespace qat::quant {

/// A histogram of the observed values (per tensor) over a range that grows as data arrives,
/// and a calibration that picks the clipping range [lo, hi] from it:
///   MinMax      the whole observed range;
///   Percentile  the `percentile` quantile of |x| (symmetric) or both tails (affine);
///   MSE         the range minimising the expected quantization error, PyTorch 1.13's
///               HistogramObserver search (_non_linear_param_search), same qparams;
///   Entropy     the range minimising the KL divergence between the clipped reference and the
///               quantized histograms (TensorRT's calibration, Migacz 2017).
/// Buffers: min_val, max_val (the histogram's range) and histogram (float32 [bins]).
class HistogramObserver : public Observer {
 public:
  enum class Calibration { MinMax, Percentile, MSE, Entropy };
  struct Options {
    std::int64_t bins = 2048;
    Calibration calibration = Calibration::MSE;
    double percentile = 99.99;  // in (0, 100], for Calibration::Percentile
  };

  explicit HistogramObserver(const QuantSpec& spec);
  HistogramObserver(const QuantSpec& spec, const Options& options);

  Tensor forward(const Tensor& x) override;
  QParams calculate_qparams() const override;
  /// The clipping range [lo, hi] that the calibration picks (before qparams widen it to 0).
  std::pair<float, float> calibrated_range() const;
  const Tensor& histogram() const { return histogram_; }
  const Options& options() const { return options_; }
  void reset() override;
  std::string extra_repr() const override;

 protected:
  void update(const float* batch_min, const float* batch_max) override;

 private:
  Options options_;
  Tensor histogram_;
};

}  // namespace qat::quant
