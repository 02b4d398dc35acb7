// The quantization math against PyTorch 1.13: golden vectors (tests/golden/gen_quant_golden.py)
// compared bit-exactly for fake quantization (fixed and learnable qparams), observers and
// FakeQuantize; QuantSpec validation, qparams edge cases, error messages and the FakeQuantize
// switches by hand. FP8, learnable amax, central differences and per-block quantization:
// test_quant_numerics.cpp.
#include <bit>
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "common/golden.h"
#include "framework/autograd/ops.h"
#include "modules/quant/fake_quant.h"
#include "modules/quant/observer.h"
#include "modules/quant/qconfig.h"
#include "modules/quant/quantizer.h"
#include "quant/quant_test_util.h"

using namespace qat;
using namespace qat::quant;
using namespace qat::test;
namespace tt = boost::test_tools;
using F = std::vector<float>;

namespace {

const std::vector<GoldenCase>& golden() {
  static const auto cases = test::load_golden("golden/quant.txt");
  return cases;
}

std::vector<const GoldenCase*> cases_of(const std::string& prefix) {
  std::vector<const GoldenCase*> out;
  for (const auto& c : golden())
    if (c.name.rfind(prefix, 0) == 0) out.push_back(&c);
  return out;
}

std::int64_t as_int(const GoldenCase& c, const std::string& key) {
  return static_cast<std::int64_t>(c.scalar(key));
}

Tensor leaf(const GoldenCase& c, const std::string& key) {
  return c.tensor(key).clone().requires_grad_();
}

// |actual - expected| <= max(rtol |expected|, atol) per element.
void expect_near(const Tensor& actual, const Tensor& expected, double rtol, double atol,
                 const std::string& what) {
  BOOST_TEST_CONTEXT(what) {
    BOOST_REQUIRE(actual.defined());
    const auto a = actual.to(DType::Float64).to_vector<double>();
    const auto e = expected.to(DType::Float64).to_vector<double>();
    BOOST_REQUIRE(a.size() == e.size());
    for (std::size_t i = 0; i < a.size(); ++i)
      BOOST_TEST(std::abs(a[i] - e[i]) <= std::max(rtol * std::abs(e[i]), atol),
                 "element " << i << ": " << a[i] << " vs " << e[i]);
  }
}

// The integer spec of [qmin, qmax] (2^b values, or the narrow signed range).
QuantSpec spec_of_range(std::int64_t qmin, std::int64_t qmax, Granularity g = Granularity::PerTensor,
                        int axis = 0) {
  const bool narrow = qmin < 0 && qmin == -qmax;
  const int bits = std::bit_width(static_cast<std::uint64_t>(qmax - qmin + (narrow ? 1 : 0)));
  return QuantSpec{.bits = bits,
                   .is_signed = qmin < 0,
                   .symmetric = false,
                   .narrow_range = narrow,
                   .granularity = g,
                   .axis = axis};
}

QuantSpec spec_of_case(const GoldenCase& c) {
  return QuantSpec{
      .bits = static_cast<int>(as_int(c, "bits")),
      .is_signed = c.scalar("is_signed") != 0,
      .symmetric = c.scalar("symmetric") != 0,
      .narrow_range = c.has("narrow") && c.scalar("narrow") != 0,
      .granularity = c.scalar("per_channel") != 0 ? Granularity::PerChannel : Granularity::PerTensor,
      .axis = static_cast<int>(as_int(c, "axis"))};
}

}  // namespace

BOOST_AUTO_TEST_SUITE(quant_golden)

BOOST_AUTO_TEST_CASE(fake_quantize_per_tensor) {
  const auto cs = cases_of("fqt");
  BOOST_TEST(cs.size() == 75u);
  for (const GoldenCase* c : cs) {
    const auto qmin = as_int(*c, "qmin"), qmax = as_int(*c, "qmax"), zp = as_int(*c, "zero_point");
    const auto scale = static_cast<float>(c->scalar("scale"));
    Tensor x = leaf(*c, "x");
    Tensor y = fake_quantize_per_tensor_affine(x, scale, zp, qmin, qmax);
    expect_exact(y, c->tensor("out"), c->name + " out");
    sum(mul(y, c->tensor("gout"))).backward();
    expect_exact(x.grad(), c->tensor("grad_x"), c->name + " grad_x");
    const QParams q{Tensor::full(Shape{1}, scale), Tensor::full(Shape{1}, zp, DType::Int32)};
    expect_exact(fake_quantize(c->tensor("x"), q, spec_of_range(qmin, qmax)), c->tensor("out"),
                 c->name + " fake_quantize");
  }
}

BOOST_AUTO_TEST_CASE(fake_quantize_per_channel) {
  const auto cs = cases_of("fqc");
  BOOST_TEST(cs.size() == 72u);
  for (const GoldenCase* c : cs) {
    const auto qmin = as_int(*c, "qmin"), qmax = as_int(*c, "qmax");
    const int axis = static_cast<int>(as_int(*c, "axis"));
    Tensor x = leaf(*c, "x");
    const Tensor &s = c->tensor("scale"), &z = c->tensor("zero_point");
    Tensor y = fake_quantize_per_channel_affine(x, s, z, axis, qmin, qmax);
    expect_exact(y, c->tensor("out"), c->name + " out");
    sum(mul(y, c->tensor("gout"))).backward();
    expect_exact(x.grad(), c->tensor("grad_x"), c->name + " grad_x");
    // negative axis, and the QuantSpec entry point
    expect_exact(fake_quantize_per_channel_affine(x.detach(), s, z, axis - x.dim(), qmin, qmax),
                 c->tensor("out"), c->name + " negative axis");
    const QuantSpec spec = spec_of_range(qmin, qmax, Granularity::PerChannel, axis);
    expect_exact(fake_quantize(x.detach(), {s, z}, spec), c->tensor("out"), c->name + " fake_quantize");
  }
}

// Scale / zero-point gradients: within 1e-6 of the float64 sum of PyTorch's per-element
// gradients, and of PyTorch's own float32 sum within what float32 summation allows.
void check_learnable(const GoldenCase& c, bool per_channel) {
  const auto qmin = as_int(c, "qmin"), qmax = as_int(c, "qmax");
  const double gf = c.scalar("grad_factor");
  Tensor x = leaf(c, "x"), s = leaf(c, "scale"), z = leaf(c, "zero_point");
  Tensor y = per_channel ? fake_quantize_learnable_per_channel_affine(
                               x, s, z, static_cast<int>(as_int(c, "axis")), qmin, qmax, gf)
                         : fake_quantize_learnable_per_tensor_affine(x, s, z, qmin, qmax, gf);
  expect_exact(y, c.tensor("out"), c.name + " out");
  sum(mul(y, c.tensor("gout"))).backward();
  expect_exact(x.grad(), c.tensor("grad_x"), c.name + " grad_x");
  expect_near(s.grad(), c.tensor("grad_scale_f64"), 1e-6, 1e-7, c.name + " grad_scale");
  expect_near(z.grad(), c.tensor("grad_zero_point_f64"), 1e-6, 1e-7, c.name + " grad_zero_point");
  expect_near(s.grad(), c.tensor("grad_scale"), 1e-5, 1e-6, c.name + " grad_scale (float32 sum)");
  expect_near(z.grad(), c.tensor("grad_zero_point"), 1e-5, 1e-6, c.name + " grad_zero_point (f32 sum)");
}

BOOST_AUTO_TEST_CASE(learnable_per_tensor) {
  const auto cs = cases_of("lsqt");
  BOOST_TEST(cs.size() == 55u);
  for (const GoldenCase* c : cs) check_learnable(*c, false);
}

BOOST_AUTO_TEST_CASE(learnable_per_channel) {
  const auto cs = cases_of("lsqc");
  BOOST_TEST(cs.size() == 55u);
  for (const GoldenCase* c : cs) check_learnable(*c, true);
}

BOOST_AUTO_TEST_CASE(observers) {
  const auto cs = cases_of("obs_");
  BOOST_TEST(cs.size() == 80u);
  for (const GoldenCase* c : cs) {
    const QuantSpec spec = spec_of_case(*c);
    const bool moving = c->scalar("moving_average") != 0;
    const double ac = c->scalar("averaging_constant");
    std::shared_ptr<Observer> obs;
    if (spec.granularity == Granularity::PerChannel) {
      const std::int64_t channels = c->tensor("x_0").size(spec.axis);
      if (moving)
        obs = std::make_shared<MovingAveragePerChannelMinMaxObserver>(spec, channels, ac);
      else
        obs = std::make_shared<PerChannelMinMaxObserver>(spec, channels);
    } else if (moving) {
      obs = std::make_shared<MovingAverageMinMaxObserver>(spec, Shape{1}, ac);
    } else {
      obs = std::make_shared<MinMaxObserver>(spec);
    }
    for (std::int64_t i = 0; i < as_int(*c, "batches"); ++i) {
      const std::string k = std::to_string(i), tag = c->name + " batch " + k;
      obs->forward(c->tensor("x_" + k));
      expect_exact(obs->min_val(), c->tensor("min_" + k), tag + " min_val");
      expect_exact(obs->max_val(), c->tensor("max_" + k), tag + " max_val");
      const QParams q = obs->calculate_qparams();
      expect_exact(q.scale, c->tensor("scale_" + k), tag + " scale");
      expect_exact(q.zero_point, c->tensor("zero_point_" + k), tag + " zero_point");
    }
  }
}

BOOST_AUTO_TEST_CASE(fake_quantize_module) {
  const auto cs = cases_of("fqmod_");
  BOOST_TEST(cs.size() == 6u);
  for (const GoldenCase* c : cs) {
    const QuantSpec spec = spec_of_case(*c);
    if (c->name == "fqmod_fbgemm_activation")  // PyTorch fbgemm's reduce_range activation
      BOOST_TEST(QConfigRegistry().get("int8_fbgemm").activation->spec.str() == spec.str());
    const bool pc = spec.granularity == Granularity::PerChannel;
    const Shape ps = pc ? Shape{c->tensor("x_0").size(spec.axis)} : Shape{1};
    FakeQuantize fq(spec, make_observer(ObserverKind::MovingAverage, spec, ps), ps);
    for (int i = 0; i < 3; ++i) {
      const std::string k = std::to_string(i);
      expect_exact(fq.forward(c->tensor("x_" + k)), c->tensor("out_" + k), c->name + " out_" + k);
    }
    expect_exact(fq.scale(), c->tensor("scale"), c->name + " scale");
    expect_exact(fq.zero_point(), c->tensor("zero_point"), c->name + " zero_point");
  }
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(quant_math)

BOOST_AUTO_TEST_CASE(spec_validation_messages) {
  auto msg = [](QuantSpec s) { return error_of([&] { s.validate(); }); };
  BOOST_TEST(msg({.bits = 1}) == "QuantSpec: bits must be in [2, 16] for integer formats, got 1");
  BOOST_TEST(msg({.bits = 17}) == "QuantSpec: bits must be in [2, 16] for integer formats, got 17");
  BOOST_TEST((msg({.format = Format::FP8_E4M3, .bits = 4}) ==
              "QuantSpec: bits must be 8 for FP8 formats, got 4"));
  BOOST_TEST((msg({.format = Format::FP8_E5M2, .is_signed = false}) ==
              "QuantSpec: FP8 formats are signed and symmetric"));
  BOOST_TEST(msg(QuantSpec::fp8(Format::FP8_E4M3, Granularity::PerBlock)) ==
             "QuantSpec: FP8 formats support per-tensor and per-channel scales, not per-block");
  BOOST_TEST((msg({.is_signed = false, .narrow_range = true}) ==
              "QuantSpec: narrow_range applies to signed ranges only"));
  BOOST_TEST(msg({.axis = 8}) == "QuantSpec: axis 8 is out of range");
  BOOST_TEST(msg(QuantSpec::weight_per_block(4, 0)) ==
             "QuantSpec: block_size must be positive for per-block granularity, got 0");
  QuantSpec affine_block = QuantSpec::weight_per_block(4, 32);
  affine_block.symmetric = false;
  BOOST_TEST(msg(affine_block) == "QuantSpec: per-block granularity requires a symmetric spec");
  BOOST_TEST(msg(QuantSpec::weight_per_block(4, 32, -1, 1)) ==
             "QuantSpec: block_scale_bits must be 0 (off) or in [2, 16], got 1");
  BOOST_TEST(msg({.block_size = 4}) ==
             "QuantSpec: block_size is only meaningful for per-block granularity, got 4");
  BOOST_TEST(msg({.block_scale_bits = 8}) ==
             "QuantSpec: block_scale_bits is only meaningful for per-block granularity, got 8");
  BOOST_TEST(error_of([] {
               QuantSpec::weight_per_channel(8, 2).validate_for(Shape{3, 4}, "f");
             }) == "f: QuantSpec axis 2 is out of range for shape [3, 4]");
  BOOST_TEST(error_of([] {
               QuantSpec::weight_per_block(4, 3).validate_for(Shape{2, 8}, "f");
             }) == "f: QuantSpec block_size 3 does not divide dimension -1 (8) of shape [2, 8]");
  QuantSpec::weight_per_block(4, 4).validate_for(Shape{2, 8}, "f");  // fine
  // ranges
  BOOST_TEST(QuantSpec{.bits = 2}.quant_min() == -2);
  BOOST_TEST((QuantSpec{.bits = 16, .is_signed = false}.quant_max() == 65535));
  BOOST_TEST(QuantSpec{.narrow_range = true}.quant_min() == -127);
  BOOST_TEST(QuantSpec::activation_affine(4).str() == "uint4 affine per-tensor");
  BOOST_TEST(QuantSpec::weight_per_block(4, 32, -1, 8).str() ==
             "int4 symmetric per-block(32, axis -1) double-quant 8-bit scales");
}

BOOST_AUTO_TEST_CASE(qparams_edge_cases) {
  const QuantSpec u8 = QuantSpec::activation_affine(8);
  QuantSpec u8_sym = u8, u4_sym = QuantSpec::activation_affine(4), s8 = {};
  u8_sym.symmetric = u4_sym.symmetric = true;
  // never observed: scale 1, zero point 0
  const QParams none = MinMaxObserver(u8).calculate_qparams();
  BOOST_TEST(none.scale.item() == 1.0);
  BOOST_TEST(none.zero_point.item() == 0.0);
  // all-zero range: eps scale; zero points qmin (affine), 128 (uint8 symmetric), 7 ((0 + 15) / 2)
  auto of = [](float lo, float hi, const QuantSpec& s) {
    return calculate_qparams(vec({lo}), vec({hi}), s);
  };
  using Expected = std::vector<std::pair<QuantSpec, int>>;
  for (const auto& [spec, zp] : Expected{{u8, 0}, {u8_sym, 128}, {u4_sym, 7}, {s8, 0}}) {
    const QParams q = of(0, 0, spec);
    BOOST_TEST(q.scale.item() == kScaleEps);
    BOOST_TEST(q.zero_point.item() == zp);
  }
  // a positive-only range still contains 0; [-1, 1]: 2/255 and zero point 127 (-1 / float(2/255)
  // is -127.49999..., as in PyTorch)
  BOOST_TEST(of(2, 3, u8).scale.item() == 3.0f / 255);
  BOOST_TEST(of(2, 3, u8).zero_point.item() == 0);
  BOOST_TEST(of(-1, 1, u8).scale.item() == 2.0f / 255);
  BOOST_TEST(of(-1, 1, u8).zero_point.item() == 127);
  BOOST_TEST(of(-1, 0.5f, s8).scale.item() == 1.0f / 127.5f);
  BOOST_TEST(error_of([&] { of(2, 1, u8); }) == "calculate_qparams: min 2 exceeds max 1 at index 0");
  MinMaxObserver obs(s8);
  BOOST_TEST(error_of([&] {
               obs.forward(vec({1, kNaN}));
             }) ==
             "MinMaxObserver: observed NaN or Inf in an input of shape [2] (a diverged training step or "
             "bad data)");
  BOOST_TEST(!obs.has_observed());
}

BOOST_AUTO_TEST_CASE(error_messages) {
  const Tensor x = Tensor::zeros(Shape{2, 3});
  const Tensor s1 = vec({1}), s3 = vec({1, 1, 1}), z3 = Tensor::zeros(Shape{3}, DType::Int32);
  const Tensor z1 = Tensor::zeros(Shape{1}, DType::Int32), i3 = z3;
  auto check = [](const std::function<void()>& f, const std::string& fn, const std::string& msg) {
    BOOST_TEST(error_of(f) == fn + ": " + msg);
  };
  const std::string pt = "fake_quantize_per_tensor_affine", pc = "fake_quantize_per_channel_affine";
  check([&] { fake_quantize_per_tensor_affine(x, -1, 0, -128, 127); }, pt,
        "scale must be positive and finite, got -1 at index 0");
  check([&] { fake_quantize_per_tensor_affine(x, kInf, 0, -128, 127); }, pt,
        "scale must be positive and finite, got inf at index 0");
  check([&] { fake_quantize_per_tensor_affine(x, 1, 300, 0, 255); }, pt,
        "zero_point 300 at index 0 is outside [0, 255]");
  check([&] { fake_quantize_per_tensor_affine(x, 1, (std::int64_t{1} << 32) + 5, 0, 255); }, pt,
        "zero_point 4294967301 at index 0 is outside [0, 255]");
  check([&] { fake_quantize_per_tensor_affine(x, 1, 5, 5, 5); }, pt,
        "quant_min (5) must be below quant_max (5)");
  check(
      [&] {
        fake_quantize_per_channel_affine(x, vec({1, 1}), z3, 1, -128, 127);
      },
      pc, "expected 3 scales and zero points, got scale [2] and zero_point [3]");
  check([&] { fake_quantize_per_channel_affine(x, s3, s3, 1, -128, 127); }, pc,
        "argument 'zero_point' must be int32, got float32 of shape [3]");
  check([&] { fake_quantize_per_channel_affine(x, s3, z3, 2, -128, 127); }, pc,
        "dim 2 is out of range for shape [2, 3]");
  check(
      [&] {
        fake_quantize_per_channel_affine(x, vec({1, 0, 1}), z3, 1, -128, 127);
      },
      pc, "scale must be positive and finite, got 0 at index 1");
  check([&] { fake_quantize_per_channel_affine(i3, s3, z3, 0, -128, 127); }, pc,
        "argument 'x' must be float32 or float64, got int32 of shape [3]");
  const std::string lt = "fake_quantize_learnable_per_tensor_affine";
  const std::string lc = "fake_quantize_learnable_per_channel_affine";
  check([&] { fake_quantize_learnable_per_tensor_affine(x, s1, z3, 0, 255, 1); }, lt,
        "argument 'zero_point' must be float32, got int32 of shape [3]");
  check([&] { fake_quantize_learnable_per_tensor_affine(x, s3, vec({0}), 0, 255, 1); }, lt,
        "expected 1 scales and zero points, got scale [3] and zero_point [1]");
  check(
      [&] {
        fake_quantize_learnable_per_channel_affine(x, vec({1, -2, 1}), s3, 1, 0, 255, 1);
      },
      lc, "scale must be positive and finite, got -2 at index 1");
  check([&] { fake_quantize_learnable_per_channel_affine(x, s3, s3, -3, 0, 255, 1); }, lc,
        "dim -3 is out of range for shape [2, 3]");
  const std::string la = "fake_quantize_learnable_amax";
  check(
      [&] {
        fake_quantize_learnable_amax(x, vec({1, 1}), QuantSpec{});
      },
      la, "expected 1 amax values, got shape [2]");
  check([&] { fake_quantize_learnable_amax(x, vec({0}), QuantSpec{}); }, la,
        "amax must be positive and finite, got 0 at index 0");
  check([&] { fake_quantize_learnable_amax(x, s1, QuantSpec::activation_affine()); }, la,
        "needs a symmetric integer per-tensor or per-channel spec, got uint8 affine per-tensor");
  const QuantSpec e4m3 = QuantSpec::fp8(Format::FP8_E4M3);
  check([&] { fake_quantize_fp8(x, s1, QuantSpec{}); }, "fake_quantize_fp8",
        "spec int8 symmetric per-tensor is not an FP8 format");
  const QuantSpec e4m3_axis1 = QuantSpec::fp8(Format::FP8_E4M3, Granularity::PerChannel, 1);
  check(
      [&] {
        fake_quantize_fp8(x, vec({1, 1}), e4m3_axis1);
      },
      "fake_quantize_fp8", "expected 3 scales, got shape [2]");
  check(
      [&] {
        fake_quantize(x, {s1, z1}, e4m3);
      },
      "fake_quantize", "spec fp8_e4m3 per-tensor is not an integer format; use fake_quantize_fp8");
  check(
      [&] {
        fake_quantize(x, {s3, z3}, QuantSpec::weight_per_channel(8, 0));
      },
      "fake_quantize", "expected 2 scales and zero points, got scale [3] and zero_point [3]");
}

// ---- FakeQuantize switches ------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(fake_quantize_switches) {
  const QuantSpec spec = QuantSpec::activation_affine(8);
  FakeQuantize fq(spec, make_observer(ObserverKind::MovingAverage, spec, Shape{1}));
  BOOST_TEST(fq.scale().item() == 1.0);  // not yet observed
  BOOST_TEST(fq.zero_point().item() == 0.0);
  const Tensor a = vec({-1, 0.5f, 2});
  fq.forward(a);
  const double scale = fq.scale().item(), zp = fq.zero_point().item();
  BOOST_TEST(scale == 3.0f / 255);
  // observer off: qparams and statistics stay, the input is still fake-quantized with them
  fq.disable_observer();
  const Tensor big = vec({-10, 5, 20});
  Tensor y = fq.forward(big);
  BOOST_TEST(fq.scale().item() == scale);
  BOOST_TEST(fq.zero_point().item() == zp);
  BOOST_TEST(fq.observer()->max_val().item() == 2.0);
  const Tensor expected = fake_quantize_per_tensor_affine(big, float(scale), std::int64_t(zp), 0, 255);
  BOOST_TEST(y.to_vector<float>() == expected.to_vector<float>(), tt::per_element());
  // fake quant off: the input comes back as is (the same tensor), the observer can still run
  fq.disable_fake_quant();
  BOOST_TEST(fq.forward(big).is_same(big));
  BOOST_TEST(fq.scale().item() == scale);
  fq.enable_observer();
  BOOST_TEST(fq.forward(big).is_same(big));
  BOOST_TEST(fq.observer()->max_val().item() == 2.0f + 0.01f * (20.0f - 2.0f));
  BOOST_TEST(fq.scale().item() != scale);
  BOOST_TEST(fq.fake_quant_enabled() == false);
  BOOST_TEST(fq.observer_enabled() == true);
}

BOOST_AUTO_TEST_SUITE_END()
