// Quantization numerics without a PyTorch reference, by hand: FP8 rounding (every code, ties to
// even, saturation), fake_quantize_fp8, the learnable-amax and LSQ gradients (hand values and
// central differences in float64 away from kinks), per-block fake quantization with double
// quantization of the block scales, and the documented divergence from PyTorch where its
// kernel overflows an int64.
#include <algorithm>
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <functional>
#include <vector>

#include "framework/autograd/ops.h"
#include "framework/tensor/random.h"
#include "modules/quant/fake_quant.h"
#include "modules/quant/observer.h"
#include "quant/quant_test_util.h"

using namespace qat;
using namespace qat::quant;
using namespace qat::test;
namespace tt = boost::test_tools;
using F = std::vector<float>;
using D = std::vector<double>;

BOOST_AUTO_TEST_SUITE(quant_numerics)

// ---- FP8 ------------------------------------------------------------------------------------

// Every finite positive FP8 value by code (E4M3: bias 7, no infinities, 0x7F NaN; E5M2: bias
// 15, codes from 0x7C are Inf / NaN).
std::vector<float> fp8_values(Format f) {
  const int m_bits = f == Format::FP8_E4M3 ? 3 : 2, bias = f == Format::FP8_E4M3 ? 7 : 15;
  const int codes = f == Format::FP8_E4M3 ? 0x7F : 0x7C;
  std::vector<float> v;
  for (int code = 0; code < codes; ++code) {
    const int e = code >> m_bits, m = code & ((1 << m_bits) - 1);
    v.push_back(e == 0 ? std::ldexp(float(m), 1 - bias - m_bits)
                       : std::ldexp(1.0f + float(m) / float(1 << m_bits), e - bias));
  }
  return v;
}

BOOST_AUTO_TEST_CASE(fp8_rounding) {
  using enum Format;
  for (Format f : {FP8_E4M3, FP8_E5M2}) {
    const auto v = fp8_values(f);
    BOOST_TEST(v.back() == fp8_max(f));
    for (std::size_t k = 0; k < v.size(); ++k) {
      BOOST_TEST(round_to_fp8(v[k], f) == v[k]);
      BOOST_TEST(round_to_fp8(-v[k], f) == -v[k]);
      if (k + 1 == v.size()) break;
      // midpoints go to the even code, anything off the midpoint to the nearer value
      const float mid = (v[k] + v[k + 1]) / 2;
      BOOST_TEST(round_to_fp8(mid, f) == v[k % 2 == 0 ? k : k + 1], "midpoint after code " << k);
      BOOST_TEST(round_to_fp8(std::nextafter(mid, 0.0f), f) == v[k]);
      BOOST_TEST(round_to_fp8(std::nextafter(mid, kInf), f) == v[k + 1]);
    }
  }
  // E4M3: 448 max, saturating; subnormal step 2^-9; ties to even
  BOOST_TEST(round_to_fp8(480, FP8_E4M3) == 448);
  BOOST_TEST(round_to_fp8(-1e9f, FP8_E4M3) == -448);
  BOOST_TEST(round_to_fp8(kInf, FP8_E4M3) == 448);
  BOOST_TEST(round_to_fp8(1.0625f, FP8_E4M3) == 1.0f);
  BOOST_TEST(round_to_fp8(1.1875f, FP8_E4M3) == 1.25f);
  BOOST_TEST(round_to_fp8(std::ldexp(5.0f, -9), FP8_E4M3) == std::ldexp(5.0f, -9));
  BOOST_TEST(round_to_fp8(std::ldexp(1.0f, -10), FP8_E4M3) == 0.0f);  // half the step: to 0
  BOOST_TEST(round_to_fp8(std::ldexp(3.0f, -10), FP8_E4M3) == std::ldexp(1.0f, -8));
  BOOST_TEST(std::isnan(round_to_fp8(kNaN, FP8_E4M3)));
  BOOST_TEST(std::signbit(round_to_fp8(-0.0f, FP8_E4M3)));
  // E5M2: 57344 max; subnormal step 2^-16
  BOOST_TEST(round_to_fp8(61440, FP8_E5M2) == 57344);
  BOOST_TEST(round_to_fp8(std::ldexp(3.0f, -16), FP8_E5M2) == std::ldexp(3.0f, -16));
  BOOST_TEST(round_to_fp8(std::ldexp(1.0f, -17), FP8_E5M2) == 0.0f);
  BOOST_TEST(round_to_fp8(1.125f, FP8_E5M2) == 1.0f);
  BOOST_TEST(round_to_fp8(1.375f, FP8_E5M2) == 1.5f);
  BOOST_TEST(std::isnan(round_to_fp8(kNaN, FP8_E5M2)));
  BOOST_TEST(error_of([] { round_to_fp8(1, Format::Int); }) ==
             "round_to_fp8: format must be FP8_E4M3 or FP8_E5M2");
}

BOOST_AUTO_TEST_CASE(fake_quantize_fp8_values_and_mask) {
  // per tensor, scale 2: x / 2 = 1.0625 -> 1; 500 saturates (no gradient); 0.15 -> 0.15625
  Tensor x = vec({2.125f, 1000, -1000, 0.3f, kNaN, -896}).requires_grad_();
  Tensor y = fake_quantize_fp8(x, vec({2}), QuantSpec::fp8(Format::FP8_E4M3));
  expect_exact(y, vec({2, 896, -896, 0.3125f, kNaN, -896}), "fp8 per tensor");
  sum(mul(y, vec({1, 2, 3, 4, 5, 6}))).backward();
  BOOST_TEST(x.grad().to_vector<float>() == (F{1, 0, 0, 4, 0, 6}), tt::per_element());
  // per channel along axis 1 (float64 x): y = round_to_fp8(x / s) * s, dx = dy [|x / s| <= max]
  Generator gen(11);
  Tensor xd = Tensor::normal(Shape{4, 3}, 0, 3000, gen, DType::Float64).requires_grad_();
  const F s{1, 8, 0.001f};
  const QuantSpec spec = QuantSpec::fp8(Format::FP8_E5M2, Granularity::PerChannel, 1);
  Tensor yd = fake_quantize_fp8(xd, vec(s), spec);
  sum(yd).backward();
  for (std::int64_t i = 0; i < 12; ++i) {
    const double xi = xd.data<double>()[i], si = s[i % 3], v = xi / si;
    const double ref = round_to_fp8(static_cast<float>(v), Format::FP8_E5M2) * si;
    BOOST_TEST(yd.data<double>()[i] == ref, "element " << i);
    BOOST_TEST(xd.grad().data<double>()[i] == (std::abs(v) <= 57344 ? 1.0 : 0.0), "element " << i);
  }
}

// ---- learnable amax -------------------------------------------------------------------------

// The STE backward zeroes its gradient in place when nobody else holds it: an add hands the
// same gradient to both fake quantizers, a reused output gets the sum; each must see its own mask.
BOOST_AUTO_TEST_CASE(ste_gradient_shared_or_reused) {
  Tensor x1 = vec({-3, -0.2f, 0.4f, 9, 1}).requires_grad_(),
         x2 = vec({0.3f, 5, -0.1f, 0.2f, -4}).requires_grad_();
  const Tensor gout = vec({1, 2, 3, 4, 5});
  auto fq = [](const Tensor& x) { return fake_quantize_per_tensor_affine(x, 0.01f, 0, -128, 127); };
  sum(mul(add(fq(x1), fq(x2)), gout)).backward();
  BOOST_TEST(x1.grad().to_vector<float>() == (F{0, 2, 3, 0, 5}), tt::per_element());
  BOOST_TEST(x2.grad().to_vector<float>() == (F{1, 0, 3, 4, 0}), tt::per_element());
  Tensor x3 = vec({0.5f, -7, 0.25f, 2, -1}).requires_grad_();
  const Tensor y = fq(x3);
  sum(mul(add(y, y), gout)).backward();
  BOOST_TEST(x3.grad().to_vector<float>() == (F{2, 0, 6, 0, 10}), tt::per_element());
}

BOOST_AUTO_TEST_CASE(learnable_amax_by_hand) {
  // int8, amax 127: scale 1, y = clamp(round(clamp(x, -127, 127)), -128, 127)
  Tensor x = vec({-200, -127, -3.5f, 2.5f, 0.4f, 126.6f, 127, 300, kNaN}).requires_grad_();
  Tensor amax = vec({127}).requires_grad_();
  Tensor y = fake_quantize_learnable_amax(x, amax, QuantSpec{});
  BOOST_TEST(y.to_vector<float>() == (F{-127, -127, -4, 2, 0, 127, 127, 127, -127}), tt::per_element());
  const F dy{1, 2, 3, 4, 5, 6, 7, 8, 9};
  sum(mul(y, vec(dy))).backward();
  BOOST_TEST(x.grad().to_vector<float>() == (F{0, 2, 3, 4, 5, 6, 7, 0, 0}), tt::per_element());
  BOOST_TEST(amax.grad().item() == (7 + 8) - (1 + 2));  // sum(dy[x >= amax]) - sum(dy[x <= -amax])
  // uint8, amax 255: only the upper clip has an amax gradient; negatives clip to 0 (no dx)
  Tensor xu = vec({-5, 0, 3.5f, 254.6f, 255, 400}).requires_grad_();
  Tensor au = vec({255}).requires_grad_();
  Tensor yu = fake_quantize_learnable_amax(xu, au, QuantSpec{.is_signed = false});
  BOOST_TEST(yu.to_vector<float>() == (F{0, 0, 4, 255, 255, 255}), tt::per_element());
  sum(mul(yu, vec({1, 2, 3, 4, 5, 6}))).backward();
  BOOST_TEST(xu.grad().to_vector<float>() == (F{0, 2, 3, 4, 5, 0}), tt::per_element());
  BOOST_TEST(au.grad().item() == 5 + 6);
}

// Central differences on amax (float32, step 2^-6) with float64 x: elements clipped (y = +-amax)
// or rounding to 0 (|x| < scale / 2), where the clipping gradient is the true derivative.
BOOST_AUTO_TEST_CASE(learnable_amax_central_differences) {
  for (bool is_signed : {true, false}) {
    for (bool per_channel : {false, true}) {
      QuantSpec spec{.bits = 4, .is_signed = is_signed};
      if (per_channel) spec.granularity = Granularity::PerChannel, spec.axis = 1;
      const F a0 = per_channel ? F{2.0f, 1.5f} : F{2.0f};
      // [3, 2]: columns are channels; amax 2 (1.5): scale 2/7 (1.5/7 or 1.5/15 unsigned)
      Tensor x = vecd({3.1, -0.01, -2.5, 1.9, 0.05, -4.0}).view_as_shape(Shape{3, 2});
      if (!per_channel) x = vecd({3.1, -0.01, -2.5, 2.6, 0.05, -4.0}).view_as_shape(Shape{3, 2});
      const Tensor w = vecd({0.7, 1.3, 0.9, 1.1, 1.7, 0.6}).view_as_shape(Shape{3, 2});
      Tensor amax = vec(a0).requires_grad_();
      sum(mul(fake_quantize_learnable_amax(x, amax, spec), w)).backward();
      const float h = std::ldexp(1.0f, -6);
      for (std::size_t p = 0; p < a0.size(); ++p) {
        F up = a0, down = a0;
        up[p] += h;
        down[p] -= h;
        auto loss = [&](const F& a) {
          return weighted_sum(fake_quantize_learnable_amax(x, vec(a), spec), w);
        };
        const double numeric = (loss(up) - loss(down)) / (2 * h);
        BOOST_TEST(amax.grad().data<float>()[p] == numeric, tt::tolerance(1e-4));
        BOOST_TEST(std::abs(numeric) > 0.1);  // something is clipped in every configuration
      }
    }
  }
}

// ---- LSQ scale / zero-point gradients by central differences -----------------------------

// float64 x, clipped or exactly 0: there the LSQ scale gradient (qmin|qmax - zp outside,
// (xfq - x) / s = 0 at 0) is the true derivative. The zero point lives on the integers (the
// forward rounds it), so its central difference takes steps of 1 from an integer zero point,
// with every element more than one step away from the clamp: -scale outside, 0 inside, exactly.
BOOST_AUTO_TEST_CASE(learnable_gradients_central_differences) {
  const Tensor x = vecd({4.5, -6.0, 0.0, 5.0, -7.5, 0.0, 3.9, -5.25});
  const Tensor w = vecd({0.7, 1.3, 0.9, 1.1, 1.7, 0.6, 1.2, 0.8});
  for (bool per_channel : {false, true}) {
    const Tensor xx = per_channel ? x.view_as_shape(Shape{2, 4}) : x;
    const Tensor ww = per_channel ? w.view_as_shape(Shape{2, 4}) : w;
    const F s0 = per_channel ? F{0.25f, 0.125f} : F{0.25f}, z0 = per_channel ? F{3, 5} : F{3};
    auto run = [&](const F& s, const F& z) {
      return per_channel
                 ? fake_quantize_learnable_per_channel_affine(xx, vec(s), vec(z), 0, -16, 15, 1.0)
                 : fake_quantize_learnable_per_tensor_affine(xx, vec(s), vec(z), -16, 15, 1.0);
    };
    auto loss = [&](const F& s, const F& z) { return weighted_sum(run(s, z), ww); };
    Tensor s = vec(s0).requires_grad_(), z = vec(z0).requires_grad_();
    Tensor y = per_channel ? fake_quantize_learnable_per_channel_affine(xx, s, z, 0, -16, 15, 1.0)
                           : fake_quantize_learnable_per_tensor_affine(xx, s, z, -16, 15, 1.0);
    sum(mul(y, ww)).backward();
    for (std::size_t p = 0; p < s0.size(); ++p) {
      F up = s0, down = s0, zu = z0, zd = z0;
      const float h = std::ldexp(1.0f, -12);
      up[p] += h;
      down[p] -= h;
      zu[p] += 1;
      zd[p] -= 1;
      const double ds = (loss(up, z0) - loss(down, z0)) / (2 * h);
      const double dz = (loss(s0, zu) - loss(s0, zd)) / 2;
      BOOST_TEST(s.grad().data<float>()[p] == ds, tt::tolerance(1e-6));
      BOOST_TEST(z.grad().data<float>()[p] == dz, tt::tolerance(1e-6));
      BOOST_TEST(std::abs(dz) > 0.1);
    }
  }
}

// ---- per-block ------------------------------------------------------------------------------

// Reference: per block amax = max|x| (with 0), scale = max(amax / ((qmax - qmin) / 2), eps),
// y = clamp(round(x * (1/scale)), qmin, qmax) * scale, all in float32.
void check_per_block(const Tensor& x, const QuantSpec& spec, const Shape& scale_shape,
                     const std::function<std::int64_t(std::int64_t)>& block_of) {
  MinMaxObserver obs(spec);
  obs.forward(x);
  QParams q = obs.calculate_qparams();
  BOOST_REQUIRE(q.scale.shape() == scale_shape);
  const std::int64_t nb = scale_shape.numel(), qmin = spec.quant_min(), qmax = spec.quant_max();
  const float* px = x.data<float>();
  std::vector<float> amax(nb, 0.0f), scale(nb);
  for (std::int64_t i = 0; i < x.numel(); ++i)
    amax[block_of(i)] = std::max(amax[block_of(i)], std::abs(px[i]));
  for (std::int64_t b = 0; b < nb; ++b)
    scale[b] = std::max(amax[b] / (float(qmax - qmin) / 2), kScaleEps);
  if (spec.block_scale_bits > 0) {  // double quantization: s2 = max(scale) / (2^bits - 1)
    const float levels = float((1 << spec.block_scale_bits) - 1);
    const float s2 = *std::max_element(scale.begin(), scale.end()) / levels;
    for (float& s : scale) s = std::max(std::nearbyint(s / s2), 1.0f) * s2;
  }
  BOOST_TEST(q.scale.to_vector<float>() == scale, tt::per_element());
  BOOST_TEST(q.zero_point.to_vector<std::int32_t>() == std::vector<std::int32_t>(nb, 0),
             tt::per_element());
  F ref(x.numel());
  for (std::int64_t i = 0; i < x.numel(); ++i) {
    const float s = scale[block_of(i)];
    ref[i] = std::clamp(std::nearbyint(px[i] * (1.0f / s)), float(qmin), float(qmax)) * s;
  }
  BOOST_TEST(fake_quantize(x, q, spec).to_vector<float>() == ref, tt::per_element());
}

BOOST_AUTO_TEST_CASE(per_block_fake_quantize) {
  Generator gen(5);
  // blocks of 4 along the last axis of [3, 8]: scales [3, 2]
  const Tensor a = Tensor::normal(Shape{3, 8}, 0, 1, gen);
  auto last = [](std::int64_t i) { return (i / 8) * 2 + (i % 8) / 4; };
  check_per_block(a, QuantSpec::weight_per_block(4, 4), Shape{3, 2}, last);
  check_per_block(a, QuantSpec::weight_per_block(4, 4, -1, 3), Shape{3, 2}, last);  // 3-bit scales
  // blocks of 2 along axis 0 of [4, 3]: scales [2, 3], block (i / 3) / 2, column i % 3
  const Tensor b = Tensor::normal(Shape{4, 3}, 0, 1, gen);
  auto first = [](std::int64_t i) { return (i / 3) / 2 * 3 + i % 3; };
  check_per_block(b, QuantSpec::weight_per_block(8, 2, 0), Shape{2, 3}, first);
  check_per_block(b, QuantSpec::weight_per_block(2, 2, 0, 2), Shape{2, 3}, first);
  // double quantization keeps at least one step: the smallest scales do not collapse to 0
  Tensor s = vec({1e-6f, 0.5f, 1.0f});
  double_quantize_scales(s, 2);
  BOOST_TEST(s.to_vector<float>() == (F{1.0f / 3, 1.0f / 3 * 2, 1.0f}), tt::per_element());
}

// ---- divergence from PyTorch ----------------------------------------------------------------

// PyTorch 1.13's CPU kernel casts x / scale to int64: for |x / scale| >= 2^63 or +-inf that
// overflows (qmin on x86). Here they saturate; NaN maps to qmin as in PyTorch. No gradient.
BOOST_AUTO_TEST_CASE(divergence_huge_and_inf) {
  const F xs{1e30f, -1e30f, kInf, -kInf, kNaN, 0x1p63f, -0x1p63f};
  const F expect{252, -3, 252, -3, -3, 252, -3};  // (qmax | qmin - 3) * 1
  Tensor x = vec(xs).requires_grad_();
  Tensor y = fake_quantize_per_tensor_affine(x, 1.0f, 3, 0, 255);
  BOOST_TEST(y.to_vector<float>() == expect, tt::per_element());
  sum(y).backward();
  BOOST_TEST(x.grad().to_vector<float>() == F(7, 0.0f), tt::per_element());
  BOOST_TEST(fake_quantize_per_channel_affine(vec(xs).view_as_shape(Shape{1, 7}), vec({1}),
                                              Tensor::full(Shape{1}, 3, DType::Int32), 0, 0, 255)
                     .to_vector<float>() == expect,
             tt::per_element());
  // learnable: forward as above; the backward classifies +inf as above qmax, -inf / NaN below qmin
  Tensor xl = vec(xs).requires_grad_(), s = vec({1}).requires_grad_(), z = vec({3}).requires_grad_();
  Tensor yl = fake_quantize_learnable_per_tensor_affine(xl, s, z, 0, 255, 1.0);
  BOOST_TEST(yl.to_vector<float>() == expect, tt::per_element());
  sum(mul(yl, vec({1, 2, 4, 8, 16, 32, 64}))).backward();
  BOOST_TEST(xl.grad().to_vector<float>() == F(7, 0.0f), tt::per_element());
  BOOST_TEST(s.grad().item() == (1 + 4 + 32) * 252.0 + (2 + 8 + 16 + 64) * -3.0);
  BOOST_TEST(z.grad().item() == -127.0);
  // amax and FP8 saturate too; NaN takes no gradient
  Tensor xa = vec({kInf, -kInf, kNaN}).requires_grad_();
  Tensor ya = fake_quantize_learnable_amax(xa, vec({127}), QuantSpec{});
  BOOST_TEST(ya.to_vector<float>() == (F{127, -127, -127}), tt::per_element());
  sum(ya).backward();
  BOOST_TEST(xa.grad().to_vector<float>() == (F{0, 0, 0}), tt::per_element());
  BOOST_TEST(fake_quantize_fp8(vec({kInf, -kInf}), vec({2}), QuantSpec::fp8(Format::FP8_E4M3))
                     .to_vector<float>() == (F{896, -896}),
             tt::per_element());
}

BOOST_AUTO_TEST_SUITE_END()
