// HistogramObserver: PyTorch 1.13's running histogram (torch/ao/quantization/observer.py) and four
// calibrations on it. The histogram updates and the MSE search reproduce PyTorch's float32
// arithmetic operation by operation, so the histogram and the MSE qparams match it bit for bit.
#include "modules/quant/histogram_observer.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <sstream>
#include <utility>
#include <vector>

#include "framework/distributed/replica.h"
#include "framework/nn/state_check.h"
#include "modules/quant/detail/histogram_torch.h"

namespace qat::quant {

namespace {

using detail::adjust_min_max;
using detail::Adjusted;
using detail::combine_histograms;
using detail::mse_range;

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr double kInfD = std::numeric_limits<double>::infinity();
constexpr std::int64_t kChunk = 256;  // values binned per vector pass

// bin(x) = trunc((x - lo) * bins / (hi - lo)) in float32, torch.histc's bin (hi in the last bin).
// Clamped in float before the conversion, so no value (NaN included: bin 0) reaches an
// out-of-range float -> int cast.
inline std::int32_t bin_of(float x, float lo, float hi, std::int64_t bins) {
  const float t = (x - lo) * static_cast<float>(bins) / (hi - lo);
  const auto last = static_cast<float>(bins - 1);
  return static_cast<std::int32_t>(t > 0 ? (t < last ? t : last) : 0.0f);
}

// Counts the values x[i] in [lo, hi], lo < hi, by bin into four arrays of `bins` counters
// (counts[j * bins + b], x[i] in array i % 4): the bins of a chunk are computed in one vectorised
// pass, and the four arrays keep runs of equal values (ReLU zeros) from serialising on one counter.
void count_bins(const float* __restrict x, std::int64_t n, float lo, float hi, std::int64_t bins,
                std::uint32_t* __restrict counts) {
  std::uint32_t* __restrict c1 = counts + bins;
  std::uint32_t* __restrict c2 = counts + 2 * bins;
  std::uint32_t* __restrict c3 = counts + 3 * bins;
  alignas(64) std::int32_t idx[kChunk];
  for (std::int64_t begin = 0; begin < n; begin += kChunk) {
    const std::int64_t m = std::min(kChunk, n - begin);
    const float* xs = x + begin;
    for (std::int64_t i = 0; i < m; ++i) idx[i] = bin_of(xs[i], lo, hi, bins);
    std::int64_t i = 0;
    for (; i + 4 <= m; i += 4) {
      ++counts[idx[i]];
      ++c1[idx[i + 1]];
      ++c2[idx[i + 2]];
      ++c3[idx[i + 3]];
    }
    for (; i < m; ++i) ++counts[idx[i]];
  }
}

// The histogram as a distribution, mass uniform within each bin, in double. Bins holding under
// 1e-9 of the mass count as empty: resampling leaves such float-rounding crumbs (at most
// 2^-24 / 128 of the mass) in bins that are empty, and the entropy search cares which are.
struct Distribution {
  double lo = 0, width = 0;
  std::vector<double> mass, cum;  // cum[k] = mass of the bins below k

  Distribution(std::vector<double> bin_mass, double low, double bin_width)
      : lo(low), width(bin_width), mass(std::move(bin_mass)), cum(mass.size() + 1, 0.0) {
    double total = 0;
    for (double v : mass) total += std::max(v, 0.0);
    for (std::size_t k = 0; k < mass.size(); ++k) {
      if (mass[k] <= 1e-9 * total) mass[k] = 0;
      cum[k + 1] = cum[k] + mass[k];
    }
  }
  std::int64_t bins() const { return static_cast<std::int64_t>(mass.size()); }
  double total() const { return cum.back(); }
  /// Mass below t.
  double cdf(double t) const {
    const double pos = (t - lo) / width;
    if (!(pos > 0)) return 0;
    if (pos >= static_cast<double>(bins())) return total();
    const auto k = static_cast<std::size_t>(pos);
    return cum[k] + (pos - static_cast<double>(k)) * mass[k];
  }
  /// Mass in [-a, a].
  double abs_cdf(double a) const { return cdf(a) - cdf(-a); }
  /// Smallest t with cdf(t) >= m (m <= 0: the first non-empty bin's lower edge).
  double quantile(double m) const {
    m = std::min(m, total());
    if (m <= 0) {
      const auto k = std::find_if(mass.begin(), mass.end(), [](double v) { return v > 0; });
      return lo + width * static_cast<double>(k - mass.begin());
    }
    const auto k =
        static_cast<std::size_t>(std::lower_bound(cum.begin() + 1, cum.end(), m) - (cum.begin() + 1));
    return lo + width * (static_cast<double>(k) + (m - cum[k]) / mass[k]);
  }
  /// Smallest a >= 0 with abs_cdf(a) >= m, by bisection (abs_cdf is continuous, non-decreasing).
  double abs_quantile(double m) const {
    double a_lo = 0, a_hi = std::max(std::abs(lo), std::abs(lo + width * bins()));
    while (true) {
      const double mid = 0.5 * (a_lo + a_hi);
      if (mid <= a_lo || mid >= a_hi) return a_hi;
      (abs_cdf(mid) >= m ? a_hi : a_lo) = mid;
    }
  }
};

// Histogram of |x| with `bins` bins over [0, max |x|]: differences of the mass in [-a, a].
Distribution fold_abs(const Distribution& d) {
  const double a_max = std::max(std::abs(d.lo), std::abs(d.lo + d.width * d.bins()));
  const std::int64_t bins = d.bins();
  const double w = a_max / static_cast<double>(bins);
  std::vector<double> m(static_cast<std::size_t>(bins));
  double below = 0;
  for (std::int64_t k = 0; k < bins; ++k) {
    const double upto = k + 1 == bins ? d.total() : d.abs_cdf(w * static_cast<double>(k + 1));
    m[k] = std::max(upto - below, 0.0);
    below = upto;
  }
  return Distribution(std::move(m), 0.0, w);
}

inline double xlogx(double v) { return v > 0 ? v * std::log(v) : 0.0; }

// TensorRT's KL divergence (Migacz 2017) for keeping the first i bins of d:
//   P = mass[0, i), the mass above added to bin i-1 (clipped values saturate);
//   Q = mass[0, i) merged into `levels` groups of i / levels bins (the last takes the rest), each
//       group's sum spread evenly over its bins where P > 0;
//   KL = sum_k p_k log(p_k / q_k), p and q normalised; +inf where some q_k = 0 < p_k.
// Summed per group with prefix sums (P_g, Q_g group sums, nnz_g the bins of g where P > 0):
//   KL = (sum_k P_k log P_k - sum_g P_g log(Q_g / nnz_g)) / P_total + log(Q_total / P_total).
struct KlDivergence {
  const Distribution& d;
  std::int64_t levels;
  std::vector<double> xlogx_cum;  // sum of mass log mass below k
  std::vector<std::int64_t> nonzero_cum;

  KlDivergence(const Distribution& dist, std::int64_t lv)
      : d(dist), levels(lv), xlogx_cum(dist.mass.size() + 1, 0.0), nonzero_cum(dist.mass.size() + 1, 0) {
    for (std::size_t k = 0; k < d.mass.size(); ++k) {
      xlogx_cum[k + 1] = xlogx_cum[k] + xlogx(d.mass[k]);
      nonzero_cum[k + 1] = nonzero_cum[k] + (d.mass[k] > 0);
    }
  }

  double operator()(std::int64_t i) const {
    const double above = d.total() - d.cum[i], p_total = d.total(), q_total = d.cum[i];
    if (!(q_total > 0)) return kInfD;
    const double plogp = xlogx_cum[i] + xlogx(d.mass[i - 1] + above) - xlogx(d.mass[i - 1]);
    const std::int64_t merged = i / levels;
    double cross = 0;
    for (std::int64_t g = 0; g < levels; ++g) {
      const std::int64_t a = g * merged, b = g + 1 == levels ? i : a + merged;
      const double q = d.cum[b] - d.cum[a], p = q + (b == i ? above : 0.0);
      if (!(p > 0)) continue;
      if (!(q > 0)) return kInfD;
      const std::int64_t nnz =
          nonzero_cum[b] - nonzero_cum[a] + (b == i && above > 0 && d.mass[i - 1] == 0);
      cross += p * std::log(q / static_cast<double>(nnz));
    }
    return (plogp - cross) / p_total + std::log(q_total / p_total);
  }
};

// TensorRT's threshold on a histogram of |x|: t = i * width for the i in [levels, bins] with the
// least KL divergence (the larger i on ties).
float entropy_threshold(const Distribution& abs_x, std::int64_t levels) {
  const KlDivergence kl(abs_x, levels);
  std::int64_t best = abs_x.bins();
  double best_kl = kl(best);
  for (std::int64_t i = abs_x.bins() - 1; i >= levels; --i) {
    const double v = kl(i);
    if (v < best_kl) best_kl = v, best = i;
  }
  return static_cast<float>(abs_x.width * static_cast<double>(best));
}

const char* calibration_name(HistogramObserver::Calibration c) {
  switch (c) {
    case HistogramObserver::Calibration::MinMax:
      return "minmax";
    case HistogramObserver::Calibration::Percentile:
      return "percentile";
    case HistogramObserver::Calibration::MSE:
      return "mse";
    case HistogramObserver::Calibration::Entropy:
      return "entropy";
  }
  return "?";
}

}  // namespace

HistogramObserver::HistogramObserver(const QuantSpec& spec) : HistogramObserver(spec, Options{}) {}

HistogramObserver::HistogramObserver(const QuantSpec& spec, const Options& options)
    : Observer("HistogramObserver", spec), options_(options) {
  QAT_REQUIRE(spec.granularity == Granularity::PerTensor, "HistogramObserver",
              "spec must be per-tensor, got ", spec.str());
  QAT_REQUIRE(spec.format == Format::Int, "HistogramObserver", "spec must be an integer format, got ",
              spec.str());
  QAT_REQUIRE(options.bins >= 1 && options.bins <= (std::int64_t{1} << 24), "HistogramObserver",
              "bins must be in [1, 2^24], got ", options.bins);
  QAT_REQUIRE(options.percentile > 0 && options.percentile <= 100, "HistogramObserver",
              "percentile must be in (0, 100], got ", options.percentile);
  histogram_ = register_buffer("histogram", Tensor::zeros(Shape{options.bins}, DType::Float32));
}

// The bins need a range whose float32 width is finite (and some room for adjust_min_max to widen
// it): +-3e38 would make every bin index NaN. Checked before anything is recorded.
void HistogramObserver::update(const float* batch_min, const float* batch_max) {
  const float lo = std::min(batch_min[0], min_val_.data<float>()[0]),
              hi = std::max(batch_max[0], max_val_.data<float>()[0]);
  QAT_REQUIRE(std::isfinite(hi - lo) && std::fabs(lo) <= 1e30f && std::fabs(hi) <= 1e30f, who(),
              "the observed range [", lo, ", ", hi,
              "] is too wide for float32 histogram bins (|value| must stay below 1e30; a diverged "
              "training step?)");
  batch_min_ = batch_min[0];
  batch_max_ = batch_max[0];
  batch_pending_ = true;
}

// Adds the counts of x over [lo, hi] (a single point: torch.histc's middle bin) to the histogram;
// in a data-parallel forward, the counts of every replica's batch (the range is already global).
void HistogramObserver::add_batch(const float* x, std::int64_t n, float lo, float hi) {
  const std::int64_t bins = options_.bins;
  float* hist = histogram_.data<float>();
  batch_hist_.assign(static_cast<std::size_t>(bins), 0.0f);
  if (lo == hi) {
    batch_hist_[bins / 2] = static_cast<float>(n);
  } else {
    counts_.assign(static_cast<std::size_t>(4 * bins), 0);
    count_bins(x, n, lo, hi, bins, counts_.data());
    const std::uint32_t* c = counts_.data();
    for (std::int64_t k = 0; k < bins; ++k)
      batch_hist_[k] = static_cast<float>(c[k] + c[bins + k] + c[2 * bins + k] + c[3 * bins + k]);
  }
  distributed::sync_sum(batch_hist_.data(), bins);
  for (std::int64_t k = 0; k < bins; ++k) hist[k] = batch_hist_[k] + hist[k];
}

Tensor HistogramObserver::forward(const Tensor& x) {
  batch_pending_ = false;
  Observer::forward(x);  // checks x, then update() records its range
  if (!batch_pending_) return x;
  batch_pending_ = false;
  const Tensor xf = x.dtype() == DType::Float32 ? x : x.to(DType::Float32);
  const float* px = xf.data<float>();
  const std::int64_t n = xf.numel(), bins = options_.bins;
  float& min_val = min_val_.data<float>()[0];
  float& max_val = max_val_.data<float>()[0];
  float* hist = histogram_.data<float>();

  if (min_val == kInf && max_val == -kInf) {  // first batch
    min_val = batch_min_;
    max_val = batch_max_;
    add_batch(px, n, min_val, max_val);
    return x;
  }
  const float cmin = std::min(batch_min_, min_val), cmax = std::max(batch_max_, max_val);
  if (cmin == min_val && cmax == max_val) {  // inside the range (PyTorch's rounding may relax
    add_batch(px, n, min_val, max_val);      // it here when bins is not a power of 2; not us)
    return x;
  }
  const std::vector<float> old(hist, hist + bins);
  std::fill(hist, hist + bins, 0.0f);
  if (min_val == max_val) {  // every value so far equals min_val: keep them as one point
    const float point = min_val;
    const float count = std::accumulate(old.begin(), old.end(), 0.0f);
    add_batch(px, n, cmin, cmax);
    hist[bin_of(point, cmin, cmax, bins)] += count;
    min_val = cmin;
    max_val = cmax;
    return x;
  }
  const Adjusted a = adjust_min_max(min_val, max_val, cmin, cmax, bins);
  add_batch(px, n, a.min_val, a.max_val);
  if (a.as_point) {
    hist[bin_of(min_val + 0.5f * (max_val - min_val), a.min_val, a.max_val, bins)] +=
        std::accumulate(old.begin(), old.end(), 0.0f);
  } else {
    combine_histograms(old.data(), bins, a.downsample_rate, a.start_idx, hist);
  }
  min_val = a.min_val;
  max_val = a.max_val;
  return x;
}

std::pair<float, float> HistogramObserver::calibrated_range() const {
  const float min_val = min_val_.data<float>()[0], max_val = max_val_.data<float>()[0];
  if (min_val == kInf && max_val == -kInf) return {kInf, -kInf};
  if (!(min_val < max_val)) return {min_val, max_val};
  const std::int64_t bins = options_.bins;
  const float* hist = histogram_.data<float>();
  const auto levels = std::int64_t{1} << spec_.bits;
  if (options_.calibration == Calibration::MinMax) return {min_val, max_val};
  if (options_.calibration == Calibration::MSE) return mse_range(hist, bins, min_val, max_val, levels);

  const Distribution d(std::vector<double>(hist, hist + bins), min_val,
                       (static_cast<double>(max_val) - min_val) / static_cast<double>(bins));
  if (options_.calibration == Calibration::Percentile) {
    const double p = options_.percentile / 100.0;
    if (spec_.symmetric) {
      const auto a = static_cast<float>(d.abs_quantile(p * d.total()));
      return {-a, a};
    }
    const double tail = 0.5 * (1.0 - p) * d.total();
    return {static_cast<float>(d.quantile(tail)), static_cast<float>(d.quantile(d.total() - tail))};
  }
  // a symmetric grid, or an affine one spanning both signs, has 2^(bits-1) levels per side
  const bool one_sided = !spec_.symmetric && (min_val >= 0 || max_val <= 0);
  const float t = entropy_threshold(fold_abs(d), one_sided ? levels : levels / 2);
  if (spec_.symmetric) return {-t, t};
  return {std::max(min_val, -t), std::min(max_val, t)};
}

QParams HistogramObserver::calculate_qparams() const {
  const auto [lo, hi] = calibrated_range();
  QParams q{Tensor::empty(Shape{1}, DType::Float32), Tensor::empty(Shape{1}, DType::Int32)};
  quant::calculate_qparams(&lo, &hi, 1, spec_, q.scale.data<float>(), q.zero_point.data<std::int32_t>());
  return q;
}

void HistogramObserver::reset() {
  Observer::reset();
  histogram_.fill_(0);
}

std::string HistogramObserver::extra_repr() const {
  std::string s = spec_.str() + ", bins=" + std::to_string(options_.bins) +
                  ", calibration=" + calibration_name(options_.calibration);
  if (options_.calibration == Calibration::Percentile) {
    std::ostringstream p;
    p << options_.percentile;
    s += ", percentile=" + p.str();
  }
  return s;
}

void HistogramObserver::check_state(const StateView& state, std::vector<std::string>& problems) const {
  Observer::check_state(state, problems);
  // Float counts: re-binning on a wider range (PyTorch's interpolation) leaves tiny negatives.
  nn::check::in_range(problems, state, "histogram", -1e30, 1e30, "a finite bin count");
}
}  // namespace qat::quant
