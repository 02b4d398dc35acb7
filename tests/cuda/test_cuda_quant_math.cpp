// The per-element code of the learnable-quantizer and FP8 CUDA kernels (learnable_math.h,
// fp8_math.h), run on the host against the CPU ops (no device needed). LSQ / LSQ+ and the
// learnable amax: forward and dx bit-exact, and the per-element gradient terms summed in the
// CPU's order give the CPU's dscale / dzero_point / damax bit for bit (so the terms are the
// CPU's: LSQ's inside ones are the CPU's times (1/s) gf), while the device's summation order
// stays within 1e-6 of them. FP8: the rounding
// against the CPU's vectorised kernel and an independent frexp / ldexp reference, on every FP8
// value, the midpoints between them and one ulp either side, specials and a sweep of bit patterns.
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <limits>
#include <vector>

#include "cuda_test_util.h"
#include "learnable_sim.h"
#include "modules/quant/detail/float_round.h"
#include "modules/quant/fake_quant.h"
#include "modules/quant/kernels/cuda/fp8_math.h"
#include "modules/quant/spec.h"

using namespace qat;
using namespace qat::test;

namespace {

void require_sim_bits(const Tensor& cpu, const std::vector<float>& sim, const char* what) {
  const std::vector<float> a = cpu.to_vector<float>();
  BOOST_REQUIRE_EQUAL(a.size(), sim.size());
  for (std::size_t i = 0; i < a.size(); ++i)
    if (!same_bits(a[i], sim[i]))
      BOOST_FAIL(what << " element " << i << ": cpu " << a[i] << ", sim " << sim[i]);
}

void require_sim_close(const Tensor& cpu, const std::vector<float>& sim, double abs_terms,
                       const char* what) {
  const std::vector<float> a = cpu.to_vector<float>();
  BOOST_REQUIRE_EQUAL(a.size(), sim.size());
  for (std::size_t i = 0; i < a.size(); ++i)
    if (!grad_close(a[i], sim[i], abs_terms))
      BOOST_FAIL(what << " element " << i << ": cpu " << a[i] << ", device order " << sim[i]);
}

}  // namespace

// lsq_forward_one / lsq_grad_one and the zero-point maps against the CPU LSQ ops.
BOOST_AUTO_TEST_CASE(lsq_math_matches_cpu_ops) {
  for (const LsqCase& c : lsq_cases(false)) {
    BOOST_TEST_CONTEXT(c.name) {
      const LsqData d = lsq_data(c, 40);
      const Run cpu = run_lsq(c, d, Device::CPU);
      const LsqSim sim = simulate_lsq(d.x, d.dy, layout_of(c.shape, c.axis), d.s, d.z, c.qmin, c.qmax,
                                      c.grad_factor, c.axis < 0);
      require_sim_bits(cpu.y, sim.y, "y");
      require_sim_bits(cpu.dx, sim.dx, "dx");
      require_sim_bits(cpu.ds, sim.ds_cpu, "dscale (cpu order)");
      require_sim_bits(cpu.dz, sim.dz_cpu, "dzero_point (cpu order)");
      BOOST_TEST(sim.terms_differ == 0);
      require_sim_close(cpu.ds, sim.ds_dev, sim.ds_abs, "dscale");
      require_sim_close(cpu.dz, sim.dz_dev, sim.dz_abs, "dzero_point");
      // the data reach every branch: clamped below and above, and dzero_point non-zero
      const std::vector<float> dx = cpu.dx.to_vector<float>(), dy = d.dy.to_vector<float>();
      std::size_t masked = 0;
      for (std::size_t i = 0; i < dx.size(); ++i) masked += dx[i] == 0 && dy[i] != 0;
      if (c.shape.numel() > 100) BOOST_TEST(masked > 0);
    }
  }
}

// The zero points of the two ops where they differ: 2.5 -> 2 (round half even) forward and in the
// per-channel backward, 3 (trunc(2.5 + 0.5)) in the per-tensor backward; -0.4 -> +0 forward.
BOOST_AUTO_TEST_CASE(lsq_zero_points) {
  BOOST_TEST(lm::rounded_zero_point(2.5f, 0, 255) == 2.0f);
  BOOST_TEST(lm::truncated_zero_point(2.5f, 0, 255) == 3.0f);
  BOOST_TEST(lm::truncated_zero_point(-0.7f, -128, 127) == 0.0f);
  BOOST_TEST(lm::rounded_zero_point(300.0f, 0, 255) == 255.0f);
  BOOST_TEST(std::signbit(lm::rounded_zero_point(-0.4f, -128, 127)));
  BOOST_TEST(!std::signbit(lm::forward_zero_point(-0.4f, -128, 127)));
  BOOST_TEST(lm::reduce_splits(0, 1) == 1);
  BOOST_TEST(lm::reduce_splits(4097, 1) == 2);
  BOOST_TEST(lm::reduce_splits(std::int64_t{1} << 26, 1) == lm::kMaxBlocks);
  BOOST_TEST(lm::reduce_splits(1 << 20, 10000) == 1);
}

namespace {

struct AmaxCase {
  const char* name;
  quant::QuantSpec spec;
  Shape shape;
};

}  // namespace

// amax_forward_one / amax_backward_one against fake_quantize_learnable_amax on the CPU: y, dx
// and damax (its terms in the CPU's order) bit-exact, signed and unsigned, per tensor and per
// channel, values on the ties, at +-amax, beyond it, NaN and +-inf.
BOOST_AUTO_TEST_CASE(amax_math_matches_cpu_op) {
  const std::vector<AmaxCase> cases{
      {"int8 per tensor", quant::QuantSpec::parse("int8 symmetric per-tensor"), Shape{1001}},
      {"uint8 per tensor", quant::QuantSpec::parse("uint8 symmetric per-tensor"), Shape{7, 13}},
      {"int4 per channel axis 0", quant::QuantSpec::weight_per_channel(4, 0), Shape{3, 5, 7}},
      {"int8 per channel axis 1", quant::QuantSpec::weight_per_channel(8, 1), Shape{2, 17, 9}},
  };
  for (const AmaxCase& c : cases) {
    BOOST_TEST_CONTEXT(c.name) {
      const Layout l = quant::detail::Layout::of(c.spec, c.shape);
      const float qmax = static_cast<float>(c.spec.quant_max()),
                  qmin = static_cast<float>(c.spec.quant_min());
      const AmaxData d = amax_data(c.spec, c.shape, 50);
      const std::vector<float>& amax = d.a;
      const Tensor &x = d.x, &dy = d.dy;
      const Tensor xl = leaf(x), al = leaf(d.amax);
      const Tensor y = quant::fake_quantize_learnable_amax(xl, al, c.spec);
      y.backward(dy);
      const std::vector<float> xv = x.to_vector<float>(), g = dy.to_vector<float>();
      std::vector<float> ys(xv.size()), dxs(xv.size()), terms(xv.size());
      int bits_seen = 0;
      for (std::size_t i = 0; i < xv.size(); ++i) {
        const std::int64_t p = param_of(l, static_cast<std::int64_t>(i));
        std::uint8_t m = 0;
        ys[i] = lm::amax_forward_one(xv[i], lm::amax_consts(amax[p], c.spec.is_signed, qmin, qmax), &m);
        dxs[i] = lm::amax_backward_one(g[i], m, &terms[i]);
        bits_seen |= 1 << m;
      }
      require_sim_bits(y, ys, "y");
      require_sim_bits(xl.grad(), dxs, "dx");
      require_sim_bits(al.grad(), sum_cpu_order(terms, l), "damax (cpu order)");
      double abs_terms = 0;
      for (float t : terms) abs_terms += std::fabs(t);
      require_sim_close(al.grad(), sum_device_order(terms, l), abs_terms, "damax");
      // inside (0), clipped below (1, or 5 signed) and above (3)
      BOOST_TEST((bits_seen & (1 << 0)));
      BOOST_TEST((bits_seen & (1 << 3)));
      BOOST_TEST((bits_seen & (1 << (c.spec.is_signed ? 5 : 1))));
    }
  }
}

// fp8::round_element, the CPU's scalar float32 rounding, against the CPU's vectorised kernel
// (fake_quantize_fp8 with scale 1, mask included) and the frexp / ldexp reference in double.
BOOST_AUTO_TEST_CASE(fp8_rounding_matches_cpu_kernel) {
  namespace fp8 = quant::kernels::cuda::fp8;
  for (quant::Format format : {quant::Format::FP8_E4M3, quant::Format::FP8_E5M2}) {
    BOOST_TEST_CONTEXT(quant::QuantSpec::fp8(format).str()) {
      const quant::ElementFormat f = quant::element_format(format);
      const float max = static_cast<float>(f.max);
      const std::vector<float> v = fp8_probe_values(format);
      const Tensor x = leaf(Tensor::from_vector(v, Shape{static_cast<std::int64_t>(v.size())}));
      const Tensor y =
          quant::fake_quantize_fp8(x, Tensor::ones(Shape{1}), quant::QuantSpec::fp8(format));
      y.backward(Tensor::ones(x.shape()));
      const std::vector<float> yk = y.to_vector<float>(), mask = x.grad().to_vector<float>();
      // not a constant: x / 1 and r * 1 run (and quiet a signalling NaN) as in the kernel
      const volatile float one = 1.0f;
      for (std::size_t i = 0; i < v.size(); ++i) {
        std::uint8_t m = 2;
        const float ys = fp8::fake_quant_one(v[i], one, f.mantissa_bits, f.min_exponent, max, &m);
        const float ref = static_cast<float>(quant::detail::round_element(static_cast<double>(v[i]), f));
        if (!same_bits(ys, yk[i]) || m != mask[i] || !same_bits_or_nan(ys, ref))
          BOOST_FAIL("x = " << v[i] << ": sim " << ys << " mask " << int(m) << ", cpu kernel " << yk[i]
                            << " mask " << mask[i] << ", reference " << ref);
      }
      // ties go to even, saturation, NaN
      const float step1 = std::ldexp(1.0f, -f.mantissa_bits);  // spacing in [1, 2)
      BOOST_TEST(fp8::round_element(1.0f + 0.5f * step1, f.mantissa_bits, f.min_exponent, max) == 1.0f);
      BOOST_TEST(fp8::round_element(1.0f + 1.5f * step1, f.mantissa_bits, f.min_exponent, max) ==
                 1.0f + 2 * step1);
      BOOST_TEST(fp8::round_element(-kInf, f.mantissa_bits, f.min_exponent, max) == -max);
      BOOST_TEST(std::isnan(fp8::round_element(kNaN, f.mantissa_bits, f.min_exponent, max)));
    }
  }
}

// fp8::fake_quant_one with float32 scales (the division and the product rounding) against
// fake_quantize_fp8 on the CPU, per tensor and per channel: y bit-exact, the STE mask equal.
BOOST_AUTO_TEST_CASE(fp8_fake_quant_matches_cpu_op) {
  namespace fp8 = quant::kernels::cuda::fp8;
  struct Case {
    quant::QuantSpec spec;
    Shape shape;
  };
  for (const Case& c :
       {Case{quant::QuantSpec::fp8(quant::Format::FP8_E4M3), Shape{100003}},
        Case{quant::QuantSpec::fp8(quant::Format::FP8_E5M2), Shape{7}},
        Case{quant::QuantSpec::fp8(quant::Format::FP8_E4M3, quant::Granularity::PerChannel, 0),
             Shape{3, 11, 13}},
        Case{quant::QuantSpec::fp8(quant::Format::FP8_E5M2, quant::Granularity::PerChannel, 1),
             Shape{5, 17, 9}}}) {
    BOOST_TEST_CONTEXT(c.spec.str() << " " << c.shape) {
      const quant::ElementFormat f = quant::element_format(c.spec.format);
      const float max = static_cast<float>(f.max);
      const Layout l = quant::detail::Layout::of(c.spec, c.shape);
      const Fp8Data d = fp8_data(c.spec, c.shape, 60);
      const std::vector<float>& scale = d.s;
      const Tensor x = leaf(d.x);
      const Tensor y = quant::fake_quantize_fp8(x, d.scale, c.spec);
      y.backward(Tensor::ones(c.shape));
      const std::vector<float> xv = x.to_vector<float>(), yv = y.to_vector<float>(),
                               mask = x.grad().to_vector<float>();
      std::size_t saturated = 0;
      for (std::size_t i = 0; i < xv.size(); ++i) {
        std::uint8_t m = 2;
        saturated += mask[i] == 0;
        const float ys = fp8::fake_quant_one(xv[i], scale[param_of(l, static_cast<std::int64_t>(i))],
                                             f.mantissa_bits, f.min_exponent, max, &m);
        if (!same_bits(ys, yv[i]) || m != mask[i])
          BOOST_FAIL("element " << i << " x = " << xv[i] << ": sim " << ys << " mask " << int(m)
                                << ", cpu " << yv[i] << " mask " << mask[i]);
      }
      BOOST_TEST(saturated > 0);
      BOOST_TEST(saturated < xv.size() / 2);
    }
  }
}
