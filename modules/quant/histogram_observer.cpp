// Placeholder until the histogram observer lands: construction works, observing throws.
#include "modules/quant/histogram_observer.h"

namespace qat::quant {

HistogramObserver::HistogramObserver(const QuantSpec& spec) : HistogramObserver(spec, Options{}) {}

HistogramObserver::HistogramObserver(const QuantSpec& spec, const Options& options)
    : Observer("HistogramObserver", spec), options_(options) {
  histogram_ = register_buffer("histogram", Tensor::zeros(Shape{options.bins}, DType::Float32));
}

Tensor HistogramObserver::forward(const Tensor& x) {
  throw Error("HistogramObserver: not implemented yet");
}
QParams HistogramObserver::calculate_qparams() const { return Observer::calculate_qparams(); }
std::pair<float, float> HistogramObserver::calibrated_range() const { return {0.f, 0.f}; }
void HistogramObserver::reset() { Observer::reset(); }
std::string HistogramObserver::extra_repr() const { return spec_.str(); }
void HistogramObserver::update(const float*, const float*) {}

}  // namespace qat::quant
