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

namespace qat::quant {

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr double kInfD = std::numeric_limits<double>::infinity();
constexpr std::int64_t kUpsampleRate = 128;  // PyTorch's upsample_rate
constexpr std::int64_t kChunk = 256;         // values binned per vector pass
// Beyond this downsample rate the old range is under 1/2^33 of a new bin: it is merged as a point.
constexpr double kMaxDownsampleRate = 1099511627776.0;  // 2^40

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

// ---- PyTorch 1.13's float32 arithmetic ------------------------------------------------------
// Each expression below is one PyTorch tensor op on float32 (or a Python float in double), so
// a fused multiply-add would change the rounding: contraction is off from here to the end of
// the section.
#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC push_options
#pragma GCC optimize("fp-contract=off")
#endif

// torch.sum of float32, summed in double. ATen's own order (cascade_sum) depends on its CPU build
// and can differ in the last bit; that changed no MSE result in 3000 random histograms.
float float_sum(const float* a, std::int64_t n) {
  double sum = 0;
  for (std::int64_t i = 0; i < n; ++i) sum += a[i];
  return static_cast<float>(sum);
}

struct Adjusted {
  float min_val, max_val;
  std::int64_t downsample_rate, start_idx;
  bool as_point;  // the old range is too narrow to resample: merge its mass as one point
};

// _adjust_min_max: the grown range [cmin, cmax] is relaxed upwards to downsample_rate cells of
// the old grid refined by upsample_rate, hist_bin_width = (max_val - min_val) / (bins * 128):
//   downsample_rate = ceil((cmax - cmin) / (bins * hist_bin_width)),
//   cmax += downsample_rate * bins * hist_bin_width - (cmax - cmin),
//   start_idx = round((min_val - cmin) / hist_bin_width)   (the old range's first fine cell).
Adjusted adjust_min_max(float min_val, float max_val, float cmin, float cmax, std::int64_t bins) {
  const float hist_bin_width = (max_val - min_val) / static_cast<float>(bins * kUpsampleRate);
  const float old_bin_width = static_cast<float>(bins) * hist_bin_width;
  const float rate = std::ceil((cmax - cmin) / old_bin_width);
  if (!(rate <= kMaxDownsampleRate)) return {cmin, cmax, 0, 0, true};
  const float e = static_cast<float>(rate) * old_bin_width - (cmax - cmin);
  const float start = std::nearbyint((min_val - cmin) / hist_bin_width);
  return {cmin, cmax + e, static_cast<std::int64_t>(rate), static_cast<std::int64_t>(start), false};
}

// _combine_histograms: the old histogram, each bin repeated 128 times (upsampled), sits from fine
// cell start_idx on a grid of bins * downsample_rate cells; its running sum I (double, in order,
// as torch.cumsum) read every downsample_rate cells gives the new bins:
//   hist[i] += float((I((i+1) ds) - float(I(i ds))) / 128),  I(t) = sum of the cells below t.
// Mass past the grid's end (PyTorch would fail on it) goes into the last bin.
void combine_histograms(const float* old_hist, std::int64_t bins, std::int64_t ds, std::int64_t start,
                        float* hist) {
  std::vector<double> integral(static_cast<std::size_t>(bins));
  std::int64_t i = 0, boundary = ds;  // next bin to close and its upper edge on the fine grid
  for (; i < bins - 1 && boundary <= start; ++i, boundary += ds) integral[i] = 0;
  double acc = 0;
  std::int64_t cell = start;
  for (std::int64_t j = 0; j < bins; ++j) {
    const double v = old_hist[j];
    for (std::int64_t r = 0; r < kUpsampleRate; ++r) {
      acc += v;
      if (++cell == boundary && i < bins - 1) {
        integral[i++] = acc;
        boundary += ds;
      }
    }
  }
  for (; i < bins; ++i) integral[i] = acc;
  for (std::int64_t k = 0; k < bins; ++k) {
    const double below = k == 0 ? 0.0 : static_cast<double>(static_cast<float>(integral[k - 1]));
    hist[k] = hist[k] + static_cast<float>((integral[k] - below) / kUpsampleRate);
  }
}

// torch.div(a, b, rounding_mode='floor') on float32 (b != 0).
inline float floor_divide(float a, float b) {
  const float mod = std::fmod(a, b);
  float div = (a - mod) / b;
  if (mod != 0 && (b < 0) != (mod < 0)) div -= 1.0f;
  if (div == 0) return std::copysign(0.0f, a / b);
  float floordiv = std::floor(div);
  if (div - floordiv > 0.5f) floordiv += 1.0f;
  return floordiv;
}

// density * integral of x^2 over [begin, end]: _get_norm.
inline float l2_norm(float begin, float end, float density) {
  return density * ((end * end * end - begin * begin * begin) / 3.0f);
}

// _compute_quantization_error: the L2 error of quantizing the histogram (density uniform in each
// bin) onto dst_nbins levels spanning bins [s, e]. Each source bin meets the level grid as a
// partial level at each end and whole levels between; `terms` is scratch of size bins.
double quantization_error(const float* hist, std::int64_t bins, float min_val, float max_val,
                          std::int64_t dst_nbins, std::int64_t s, std::int64_t e, float* terms) {
  const double bin_width = (static_cast<double>(max_val) - min_val) / static_cast<double>(bins);
  const double dst_bin_width = bin_width * static_cast<double>(e - s + 1) / dst_nbins;
  if (dst_bin_width == 0.0) return 0.0;
  const auto bw = static_cast<float>(bin_width), dw = static_cast<float>(dst_bin_width);
  const auto half = static_cast<float>(dst_bin_width / 2);
  const auto top = static_cast<float>(dst_nbins - 1);
  const float whole = (half * half * half - (-half) * (-half) * (-half)) / 3.0f;  // one full level
  for (std::int64_t i = 0; i < bins; ++i) {
    if (hist[i] == 0) {  // every term is a multiple of the density
      terms[i] = 0;
      continue;
    }
    const float src_begin = static_cast<float>(i - s) * bw;
    const float src_end = src_begin + bw;
    const float dst_begin = std::clamp(floor_divide(src_begin, dw), 0.0f, top);
    const float dst_end = std::clamp(floor_divide(src_end, dw), 0.0f, top);
    const float density = hist[i] / bw;
    const float dst_begin_center = (dst_begin + 0.5f) * dw;
    const float dst_end_center = dst_end * dw + half;
    float norm = l2_norm(src_begin - dst_begin_center, half, density);
    norm = norm + (dst_end - dst_begin - 1.0f) * (density * whole);
    norm = norm + l2_norm(-half, src_end - dst_end_center, density);
    terms[i] = norm;
  }
  return float_sum(terms, bins);
}

// _non_linear_param_search: starting from all bins, step the quantiles alpha (lower) and beta
// (upper) by 1e-5, move the end that the step pushes further (in bins) and stop when the L2
// error grows; returns [min_val + start * w, min_val + (end + 1) * w], w = (max - min) / bins.
std::pair<float, float> mse_range(const float* hist, std::int64_t bins, float min_val, float max_val,
                                  std::int64_t dst_nbins) {
  const double total = float_sum(hist, bins);
  std::vector<float> csum(static_cast<std::size_t>(bins)), terms(static_cast<std::size_t>(bins));
  double run = 0;
  for (std::int64_t i = 0; i < bins; ++i) csum[i] = static_cast<float>(run += hist[i]);
  double alpha = 0.0, beta = 1.0, norm_min = kInfD;
  std::int64_t start = 0, end = bins - 1;
  while (alpha < beta) {
    const double next_alpha = alpha + 1e-5, next_beta = beta - 1e-5;
    const auto lo_mass = static_cast<float>(next_alpha * total);  // compared in float32
    const auto hi_mass = static_cast<float>(next_beta * total);
    std::int64_t l = start, r = end;
    while (l < end && csum[l] < lo_mass) ++l;
    while (r > start && csum[r] > hi_mass) --r;
    std::int64_t next_start = start, next_end = end;
    if (l - start > end - r) {
      next_start = l;
      alpha = next_alpha;
    } else {
      next_end = r;
      beta = next_beta;
    }
    if (next_start == start && next_end == end) continue;
    const double norm =
        quantization_error(hist, bins, min_val, max_val, dst_nbins, next_start, next_end, terms.data());
    if (norm > norm_min) break;
    norm_min = norm;
    start = next_start;
    end = next_end;
  }
  const float w = (max_val - min_val) / static_cast<float>(bins);
  return {min_val + w * static_cast<float>(start), min_val + w * static_cast<float>(end + 1)};
}

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC pop_options
#endif
// ---- end of PyTorch's float32 arithmetic ----------------------------------------------------

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
