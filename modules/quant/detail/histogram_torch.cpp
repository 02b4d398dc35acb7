// PyTorch 1.13's HistogramObserver arithmetic (torch/ao/quantization/observer.py), float32
// operation by operation: the histogram updates and the MSE search (detail/histogram_torch.h).
#include "modules/quant/detail/histogram_torch.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace qat::quant::detail {

namespace {
constexpr double kInfD = std::numeric_limits<double>::infinity();
constexpr std::int64_t kUpsampleRate = 128;  // PyTorch's upsample_rate
// Beyond this downsample rate the old range is under 1/2^33 of a new bin: it is merged as a point.
constexpr double kMaxDownsampleRate = 1099511627776.0;  // 2^40
}  // namespace

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
static float float_sum(const float* a, std::int64_t n) {
  double sum = 0;
  for (std::int64_t i = 0; i < n; ++i) sum += a[i];
  return static_cast<float>(sum);
}

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
static inline float floor_divide(float a, float b) {
  const float mod = std::fmod(a, b);
  float div = (a - mod) / b;
  if (mod != 0 && (b < 0) != (mod < 0)) div -= 1.0f;
  if (div == 0) return std::copysign(0.0f, a / b);
  float floordiv = std::floor(div);
  if (div - floordiv > 0.5f) floordiv += 1.0f;
  return floordiv;
}

// density * integral of x^2 over [begin, end]: _get_norm.
static inline float l2_norm(float begin, float end, float density) {
  return density * ((end * end * end - begin * begin * begin) / 3.0f);
}

// _compute_quantization_error: the L2 error of quantizing the histogram (density uniform in each
// bin) onto dst_nbins levels spanning bins [s, e]. Each source bin meets the level grid as a
// partial level at each end and whole levels between; `terms` is scratch of size bins.
static double quantization_error(const float* hist, std::int64_t bins, float min_val, float max_val,
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

}  // namespace qat::quant::detail
