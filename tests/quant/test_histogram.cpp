// HistogramObserver: golden vectors from PyTorch 1.13 (tests/golden/gen_histogram_golden.py) for
// the histogram and the MSE calibration, hand-computed percentiles, the entropy calibration
// against a literal transcription of Migacz 2017, range growth, reset, buffers and errors.
#include <algorithm>
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include "common/errors.h"
#include "common/golden.h"
#include "framework/tensor/random.h"
#include "modules/quant/histogram_observer.h"

using namespace qat;
using namespace qat::quant;
using Calibration = HistogramObserver::Calibration;
namespace tt = boost::test_tools;

namespace {

const QuantSpec kAffine = QuantSpec::activation_affine(8);  // uint8 0..255, PyTorch's quint8
const QuantSpec kSymmetric{};                               // int8 symmetric per-tensor

const std::vector<test::GoldenCase>& golden() {
  static const auto cases = test::load_golden("golden/histogram.txt");
  return cases;
}

HistogramObserver::Options with(Calibration c, double percentile = 99.99) {
  HistogramObserver::Options o;
  o.calibration = c;
  o.percentile = percentile;
  return o;
}

Tensor f32(const std::vector<float>& v) {
  return Tensor::from_vector<float>(v, Shape{static_cast<std::int64_t>(v.size())});
}

std::vector<float> normal_values(std::size_t n, std::uint64_t seed) {
  Generator gen(seed);
  std::vector<float> v(n);
  for (float& x : v) x = static_cast<float>(gen.normal());
  return v;
}

// Feeds the golden case's batches x0, x1, ... to `obs`.
void feed(HistogramObserver& obs, const test::GoldenCase& c) {
  for (int i = 0; i < static_cast<int>(c.scalar("batches")); ++i)
    obs.forward(c.tensor("x" + std::to_string(i)));
}

float min_of(const HistogramObserver& obs) { return obs.min_val().data<float>()[0]; }
float max_of(const HistogramObserver& obs) { return obs.max_val().data<float>()[0]; }

double mass(const HistogramObserver& obs) {
  const auto h = obs.histogram().to_vector<float>();
  return std::accumulate(h.begin(), h.end(), 0.0);
}

// Migacz 2017's loop as written, on histogram h: for i = |h| .. levels bins kept, P = h[0, i) with
// the rest added to P[i-1], Q = h[0, i) merged into `levels` groups of i / levels bins (the last
// takes the rest), each group's sum spread evenly over its bins where P != 0; returns the i with
// the least KL(P/|P| || Q/|Q|), the larger i on ties.
std::int64_t tensorrt_kept_bins(const std::vector<double>& h, std::int64_t levels) {
  const auto n = static_cast<std::int64_t>(h.size());
  std::int64_t best = n;
  double best_kl = std::numeric_limits<double>::infinity();
  for (std::int64_t i = n; i >= levels; --i) {
    std::vector<double> p(h.begin(), h.begin() + i), q(static_cast<std::size_t>(i), 0.0);
    p[i - 1] += std::accumulate(h.begin() + i, h.end(), 0.0);
    const std::int64_t merged = i / levels;
    for (std::int64_t g = 0; g < levels; ++g) {
      const std::int64_t a = g * merged, b = g + 1 == levels ? i : a + merged;
      double sum = 0;
      int nonzero = 0;
      for (std::int64_t k = a; k < b; ++k) sum += h[k], nonzero += p[k] != 0;
      for (std::int64_t k = a; k < b; ++k)
        if (p[k] != 0) q[k] = sum / nonzero;
    }
    const double p_sum = std::accumulate(p.begin(), p.end(), 0.0);
    const double q_sum = std::accumulate(q.begin(), q.end(), 0.0);
    double kl = 0;
    for (std::int64_t k = 0; k < i; ++k) {
      if (p[k] == 0) continue;
      kl += q[k] == 0 ? std::numeric_limits<double>::infinity()
                      : p[k] / p_sum * std::log((p[k] / p_sum) / (q[k] / q_sum));
    }
    if (kl < best_kl) best_kl = kl, best = i;
  }
  return best;
}

template <class F>
void expect_error(F f, const std::string& message_start) {
  try {
    f();
    BOOST_ERROR("expected qat::Error starting with: " << message_start);
  } catch (const Error& e) {
    BOOST_TEST(std::string(e.what()).rfind(message_start, 0) == 0, e.what());
  }
}

}  // namespace

BOOST_AUTO_TEST_SUITE(histogram_observer)

// ---- PyTorch 1.13 golden vectors -------------------------------------------------------------

// The histogram, its range and the MSE search reproduce PyTorch's float32 arithmetic: compared
// bit for bit.
BOOST_AUTO_TEST_CASE(golden_histogram_matches_pytorch) {
  for (const auto& c : golden()) {
    BOOST_TEST_CONTEXT(c.name) {
      HistogramObserver obs(kAffine);
      feed(obs, c);
      BOOST_TEST(min_of(obs) == static_cast<float>(c.scalar("min_val")));
      BOOST_TEST(max_of(obs) == static_cast<float>(c.scalar("max_val")));
      const auto h = obs.histogram().to_vector<float>();
      const auto expected = c.tensor("histogram").to_vector<float>();
      BOOST_REQUIRE_EQUAL(h.size(), expected.size());
      int differing = 0;
      double worst = 0;
      for (std::size_t k = 0; k < h.size(); ++k) {
        differing += h[k] != expected[k];
        worst = std::max(worst, std::abs(static_cast<double>(h[k]) - expected[k]));
      }
      BOOST_TEST(differing == 0, differing << " bins differ, by up to " << worst);
    }
  }
}

BOOST_AUTO_TEST_CASE(golden_mse_qparams_match_pytorch) {
  for (const auto& c : golden()) {
    BOOST_TEST_CONTEXT(c.name) {
      for (const auto& [spec, key] : {std::pair{kAffine, "affine"}, {kSymmetric, "symmetric"}}) {
        HistogramObserver obs(spec, with(Calibration::MSE));
        feed(obs, c);
        const auto [lo, hi] = obs.calibrated_range();
        BOOST_TEST(lo == static_cast<float>(c.scalar("mse_lo")));
        BOOST_TEST(hi == static_cast<float>(c.scalar("mse_hi")));
        const QParams q = obs.calculate_qparams();
        const auto expected_scale = static_cast<float>(c.scalar(std::string(key) + "_scale"));
        BOOST_TEST(q.scale.data<float>()[0] == expected_scale, key << " scale");
        BOOST_TEST(q.zero_point.data<std::int32_t>()[0] ==
                       static_cast<std::int32_t>(c.scalar(std::string(key) + "_zero_point")),
                   key << " zero_point");
      }
    }
  }
}

// ---- range growth ----------------------------------------------------------------------------

// [0, 1] then [-3, 1]: downsample_rate 4 * 128 and start_idx 3 * 2048 * 128, so each new bin is
// exactly 4 old ones and the merged histogram equals binning all values at once (values at old
// bin centres and the shared top edge: no rounding at bin edges).
BOOST_AUTO_TEST_CASE(growth_on_an_aligned_grid_equals_binning_all_at_once) {
  std::vector<float> first, second;
  for (int k = 0; k < 2048; k += 3) first.push_back((static_cast<float>(k) + 0.5f) / 2048);
  first.front() = 0, first.back() = 1;
  for (int k = 0; k < 700; ++k) second.push_back(-3 + 4 * (static_cast<float>(k) + 0.5f) / 700);
  second.front() = -3, second.back() = 1;
  HistogramObserver grown(kAffine), at_once(kAffine);
  grown.forward(f32(first));
  grown.forward(f32(second));
  std::vector<float> all = first;
  all.insert(all.end(), second.begin(), second.end());
  at_once.forward(f32(all));
  BOOST_TEST(min_of(grown) == -3.0f);
  BOOST_TEST(max_of(grown) == 1.0f);  // relaxed by 512 * (1 / 128) - 4 = 0
  BOOST_TEST(grown.histogram().to_vector<float>() == at_once.histogram().to_vector<float>(),
             tt::per_element());
}

BOOST_AUTO_TEST_CASE(growth_keeps_the_mass_and_relaxes_only_the_max) {
  const std::vector<float> a = normal_values(3000, 7), b = normal_values(2000, 8);
  std::vector<float> wide(b);
  for (float& x : wide) x = 5 * x + 2;
  HistogramObserver obs(kAffine);
  obs.forward(f32(a));
  const float old_range = max_of(obs) - min_of(obs);
  obs.forward(f32(wide));
  const float data_min = *std::min_element(wide.begin(), wide.end());
  const float data_max = *std::max_element(wide.begin(), wide.end());
  BOOST_TEST(min_of(obs) == std::min(data_min, *std::min_element(a.begin(), a.end())));
  BOOST_TEST(max_of(obs) >= data_max);
  BOOST_TEST(max_of(obs) - data_max <= old_range / 128 * 1.0001f);
  BOOST_TEST(mass(obs) == 5000.0, tt::tolerance(1e-6));
  // a batch inside the range adds its counts without moving the range
  const float lo = min_of(obs), hi = max_of(obs);
  obs.forward(f32(a));
  BOOST_TEST(min_of(obs) == lo);
  BOOST_TEST(max_of(obs) == hi);
  BOOST_TEST(mass(obs) == 8000.0, tt::tolerance(1e-6));
}

// PyTorch 1.13 restarts from the next batch when every value so far was equal (dead ReLU);
// the observer keeps those values.
BOOST_AUTO_TEST_CASE(constant_batches_are_kept_when_the_range_grows) {
  HistogramObserver obs(kAffine, with(Calibration::MinMax));
  obs.forward(Tensor::zeros(Shape{100}));
  obs.forward(Tensor::zeros(Shape{4, 25}));
  BOOST_TEST(obs.calibrated_range().first == 0.0f);
  BOOST_TEST(obs.calibrated_range().second == 0.0f);
  BOOST_TEST(obs.histogram().data<float>()[1024] == 200.0f);  // torch.histc's middle bin
  obs.forward(f32({0.5f, 1.0f, 2.0f}));
  BOOST_TEST(min_of(obs) == 0.0f);
  BOOST_TEST(max_of(obs) == 2.0f);
  BOOST_TEST(obs.histogram().data<float>()[0] == 200.0f);
  BOOST_TEST(obs.histogram().data<float>()[512] == 1.0f);
  BOOST_TEST(obs.histogram().data<float>()[2047] == 1.0f);
  BOOST_TEST(mass(obs) == 203.0);
}

// ---- calibrations: hand-computed values ----------------------------------------------------------

// 10000 values evenly over (0, 10): the p-th percentile is p / 10, to within a bin (10 / 2048).
BOOST_AUTO_TEST_CASE(percentile_of_uniform_values) {
  std::vector<float> x(10000);
  for (std::size_t k = 0; k < x.size(); ++k) x[k] = (static_cast<float>(k) + 0.5f) / 1000;
  const double bin = 10.0 / 2048;
  HistogramObserver affine(kAffine, with(Calibration::Percentile, 90));
  HistogramObserver symmetric(kSymmetric, with(Calibration::Percentile, 90));
  affine.forward(f32(x));
  symmetric.forward(f32(x));
  const auto [lo, hi] = affine.calibrated_range();  // 5 % below lo, 5 % above hi
  BOOST_TEST(std::abs(lo - 0.5) <= bin);
  BOOST_TEST(std::abs(hi - 9.5) <= bin);
  const auto [neg, pos] = symmetric.calibrated_range();  // 90 % of |x| below 9
  BOOST_TEST(std::abs(pos - 9.0) <= bin);
  BOOST_TEST(neg == -pos);
  BOOST_TEST(symmetric.calculate_qparams().scale.data<float>()[0] == pos / 127.5f);
  const QParams q = affine.calculate_qparams();  // range widened to 0: [0, hi]
  BOOST_TEST(q.scale.data<float>()[0] == hi / 255.0f);
  BOOST_TEST(q.zero_point.data<std::int32_t>()[0] == 0);

  HistogramObserver all(kAffine, with(Calibration::Percentile, 100));
  all.forward(f32(x));
  BOOST_TEST(all.calibrated_range().first == x.front());  // outer edges of the end bins
  BOOST_TEST(all.calibrated_range().second == x.back());
}

// Symmetric data on [-1, 1]: 99 % of |x| lies below 0.99, and each tail of x holds 0.5 %.
BOOST_AUTO_TEST_CASE(percentile_of_symmetric_values) {
  std::vector<float> x(20000);
  for (std::size_t k = 0; k < x.size(); ++k) x[k] = -1 + (static_cast<float>(k) + 0.5f) / 10000;
  HistogramObserver symmetric(kSymmetric, with(Calibration::Percentile, 99));
  HistogramObserver affine(kAffine, with(Calibration::Percentile, 99));
  symmetric.forward(f32(x));
  affine.forward(f32(x));
  const double bin = 2.0 / 2048;
  BOOST_TEST(std::abs(symmetric.calibrated_range().second - 0.99) <= bin);
  BOOST_TEST(std::abs(affine.calibrated_range().first + 0.99) <= bin);
  BOOST_TEST(std::abs(affine.calibrated_range().second - 0.99) <= bin);
}

BOOST_AUTO_TEST_CASE(minmax_is_the_histogram_range) {
  HistogramObserver obs(kSymmetric, with(Calibration::MinMax));
  obs.forward(f32({-0.5f, 0.25f, 3.0f}));
  BOOST_TEST(obs.calibrated_range().first == -0.5f);
  BOOST_TEST(obs.calibrated_range().second == 3.0f);
  BOOST_TEST(obs.calculate_qparams().scale.data<float>()[0] == 3.0f / 127.5f);
}

// A Gaussian bulk and four outliers at up to 40 sigma: the threshold clips the outliers, lies
// between the bulk's 99th percentile of |x| and its largest |x|, and agrees with Migacz's loop run
// on the histogram of |x| computed directly from the values (ours folds the histogram of x).
// Data of both signs: the affine spec clips at the same threshold.
BOOST_AUTO_TEST_CASE(entropy_clips_outliers_of_a_gaussian) {
  std::vector<float> x = normal_values(20000, 3);
  std::vector<float> bulk_abs(x.size());
  std::transform(x.begin(), x.end(), bulk_abs.begin(), [](float v) { return std::abs(v); });
  std::sort(bulk_abs.begin(), bulk_abs.end());
  x.insert(x.end(), {40.0f, -40.0f, 31.0f, -27.0f});
  HistogramObserver obs(kSymmetric, with(Calibration::Entropy));
  obs.forward(f32(x));
  const auto [neg, t] = obs.calibrated_range();
  BOOST_TEST(neg == -t);
  BOOST_TEST(t > bulk_abs[bulk_abs.size() * 99 / 100]);
  BOOST_TEST(t <= bulk_abs.back() + 40.0 / 2048);

  std::vector<double> abs_hist(2048, 0.0);
  for (float v : x) abs_hist[std::min(2047, static_cast<int>(std::abs(v) / 40 * 2048))] += 1;
  const double reference = tensorrt_kept_bins(abs_hist, 128) * 40.0 / 2048;
  BOOST_TEST(std::abs(t - reference) <= 2 * 40.0 / 2048,
             "threshold " << t << ", reference " << reference);

  HistogramObserver affine(kAffine, with(Calibration::Entropy));
  affine.forward(f32(x));
  BOOST_TEST(affine.calibrated_range().first == -t);
  BOOST_TEST(affine.calibrated_range().second == t);
}

// Non-negative data: the histogram of |x| is the histogram itself, so both searches must pick
// Migacz's bin count exactly: 128 levels (int8 symmetric), 256 (uint8 affine, one-sided data).
BOOST_AUTO_TEST_CASE(entropy_matches_migacz_on_nonnegative_data) {
  std::vector<float> x = normal_values(20000, 11);
  for (float& v : x) v = std::max(v, 0.0f);
  x.insert(x.end(), {12.0f, 9.5f});
  HistogramObserver symmetric(kSymmetric, with(Calibration::Entropy));
  HistogramObserver affine(kAffine, with(Calibration::Entropy));
  symmetric.forward(f32(x));
  affine.forward(f32(x));
  const auto hf = symmetric.histogram().to_vector<float>();
  const std::vector<double> h(hf.begin(), hf.end());
  const float width = 12.0f / 2048;
  const std::int64_t sym_bins = tensorrt_kept_bins(h, 128), aff_bins = tensorrt_kept_bins(h, 256);
  BOOST_TEST(sym_bins < 2048);  // the outliers are clipped
  BOOST_TEST(symmetric.calibrated_range().second == static_cast<float>(sym_bins * (12.0 / 2048)),
             tt::tolerance(1e-6f));
  BOOST_TEST(affine.calibrated_range().first == 0.0f);
  BOOST_TEST(affine.calibrated_range().second == static_cast<float>(aff_bins * width),
             tt::tolerance(1e-6f));
}

// ---- state --------------------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(unobserved_gives_unit_scale) {
  HistogramObserver obs(kAffine);
  obs.forward(Tensor::zeros(Shape{0, 4}));  // empty: ignored
  BOOST_TEST(!obs.has_observed());
  BOOST_TEST(obs.calibrated_range().first == std::numeric_limits<float>::infinity());
  const QParams q = obs.calculate_qparams();
  BOOST_TEST(q.scale.data<float>()[0] == 1.0f);
  BOOST_TEST(q.zero_point.data<std::int32_t>()[0] == 0);
}

BOOST_AUTO_TEST_CASE(reset_clears_the_histogram) {
  const auto& c = golden().front();
  HistogramObserver obs(kAffine), fresh(kAffine);
  feed(obs, c);
  obs.forward(f32({100.0f}));
  obs.reset();
  BOOST_TEST(!obs.has_observed());
  BOOST_TEST(mass(obs) == 0.0);
  BOOST_TEST(obs.calculate_qparams().scale.data<float>()[0] == 1.0f);
  feed(obs, c);
  feed(fresh, c);
  BOOST_TEST(obs.histogram().to_vector<float>() == fresh.histogram().to_vector<float>(),
             tt::per_element());
  BOOST_TEST(obs.calculate_qparams().scale.data<float>()[0] ==
             fresh.calculate_qparams().scale.data<float>()[0]);
}

// min_val, max_val and histogram are the persistent state: copying them (as a checkpoint restore
// does) reproduces the qparams, and the next batch merges the same way.
BOOST_AUTO_TEST_CASE(buffers_are_the_state) {
  const auto& c = golden()[2];
  HistogramObserver obs(kAffine), restored(kAffine);
  feed(obs, c);
  const NamedTensors state = obs.named_buffers();
  BOOST_REQUIRE_EQUAL(state.size(), 3u);
  BOOST_TEST(state[0].first == "min_val");
  BOOST_TEST(state[1].first == "max_val");
  BOOST_TEST(state[2].first == "histogram");
  BOOST_TEST(state[2].second.shape() == Shape{2048});
  for (const auto& [name, t] : state) restored.buffer(name).copy_(t);
  BOOST_TEST(restored.calculate_qparams().scale.data<float>()[0] ==
             obs.calculate_qparams().scale.data<float>()[0]);
  const Tensor more = f32({-9.0f, 0.0f, 11.0f});
  obs.forward(more);
  restored.forward(more);
  BOOST_TEST(restored.histogram().to_vector<float>() == obs.histogram().to_vector<float>(),
             tt::per_element());
}

BOOST_AUTO_TEST_CASE(float64_input_is_binned_as_float32) {
  const auto& c = golden().front();
  HistogramObserver a(kAffine), b(kAffine);
  a.forward(c.tensor("x0"));
  b.forward(c.tensor("x0").to(DType::Float64));
  BOOST_TEST(a.histogram().to_vector<float>() == b.histogram().to_vector<float>(), tt::per_element());
}

BOOST_AUTO_TEST_CASE(extra_repr_names_the_calibration) {
  BOOST_TEST(HistogramObserver(kAffine).extra_repr() == kAffine.str() + ", bins=2048, calibration=mse");
  BOOST_TEST(HistogramObserver(kSymmetric, with(Calibration::Percentile, 99.9)).extra_repr() ==
             kSymmetric.str() + ", bins=2048, calibration=percentile, percentile=99.9");
}

// ---- errors -------------------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(rejects_bad_specs_and_options) {
  const QuantSpec per_channel = QuantSpec::weight_per_channel(8, 0);
  expect_error([&] { HistogramObserver obs(per_channel); },
               "HistogramObserver: spec must be per-tensor, got " + per_channel.str());
  const QuantSpec fp8 = QuantSpec::fp8(Format::FP8_E4M3);
  expect_error([&] { HistogramObserver obs(fp8); },
               "HistogramObserver: spec must be an integer format, got " + fp8.str());
  HistogramObserver::Options no_bins;
  no_bins.bins = 0;
  expect_error([&] { HistogramObserver obs(kAffine, no_bins); },
               "HistogramObserver: bins must be in [1, 2^24], got 0");
  expect_error([&] { HistogramObserver obs(kAffine, with(Calibration::Percentile, 0)); },
               "HistogramObserver: percentile must be in (0, 100], got 0");
  expect_error([&] { HistogramObserver obs(kAffine, with(Calibration::Percentile, 101)); },
               "HistogramObserver: percentile must be in (0, 100], got 101");
}

BOOST_AUTO_TEST_CASE(nan_input_throws_and_leaves_the_state) {
  HistogramObserver obs(kAffine);
  obs.set_label("fc1.activation_post_process");
  obs.forward(f32({0.0f, 1.0f}));
  const auto before = obs.histogram().to_vector<float>();
  const std::string message = "HistogramObserver 'fc1.activation_post_process': observed NaN or Inf";
  const Tensor nan = f32({0.5f, std::nanf(""), 2.0f});
  const Tensor inf = f32({std::numeric_limits<float>::infinity()});
  expect_error([&] { obs.forward(nan); }, message);
  expect_error([&] { obs.forward(inf); }, message);
  BOOST_TEST(obs.histogram().to_vector<float>() == before, tt::per_element());
  BOOST_TEST(max_of(obs) == 1.0f);
}

// +-3e38 is finite but its range overflows float32: refused with the observer's name before
// anything is recorded (it used to reach a NaN -> int bin index).
BOOST_AUTO_TEST_CASE(a_range_too_wide_for_float_bins_is_refused) {
  HistogramObserver obs(QuantSpec::activation_affine(8));
  obs.set_label("fc1.activation_post_process");
  obs.forward(Tensor::from_vector<float>({-1.0f, 2.0f}, Shape{2}));
  const std::string e = qat::test::error_of([&] {
    obs.forward(Tensor::from_vector<float>({-3e38f, 3e38f}, Shape{2}));
  });
  BOOST_TEST(e.find("'fc1.activation_post_process'") != std::string::npos, e);
  BOOST_TEST(e.find("too wide for float32 histogram bins") != std::string::npos, e);
  BOOST_TEST(obs.min_val().item() == -1.0);  // unchanged
  BOOST_TEST(obs.max_val().item() == 2.0);
}

BOOST_AUTO_TEST_SUITE_END()
