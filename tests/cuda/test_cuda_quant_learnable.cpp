// The learnable quantizers (LSQ / LSQ+, learnable amax) and FP8 fake quantization on CUDA against
// the CPU (device tests: skipped without a GPU). Forward and dx bit-exact; dscale / dzero_point /
// damax within 1e-6 relative (the device sums in another order than the CPU) and bit-exact with
// the host simulation of the device's documented order, the same bits on a second run. Odd
// sizes (1, 7, 1000003), 3 and 17 channels with odd inner sizes, ties, values beyond the range,
// NaN / inf, empty tensors, gradients of only some inputs, and the mixed-device error.
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "cuda_test_util.h"
#include "framework/tensor/error.h"
#include "learnable_sim.h"
#include "modules/quant/fake_quant.h"
#include "modules/quant/spec.h"

using namespace qat;
using namespace qat::test;

namespace {

void require_grad_close(const Tensor& cpu, const Tensor& gpu, double abs_terms, const char* what) {
  BOOST_TEST_CONTEXT(what) {
    BOOST_REQUIRE(gpu.defined());
    BOOST_TEST((gpu.device() == Device::CUDA));
    const std::vector<float> a = cpu.to_vector<float>(), b = gpu.to_vector<float>();
    BOOST_REQUIRE_EQUAL(a.size(), b.size());
    for (std::size_t i = 0; i < a.size(); ++i)
      if (!grad_close(a[i], b[i], abs_terms))
        BOOST_FAIL("element " << i << ": cpu " << a[i] << ", cuda " << b[i]);
  }
}

void require_vector_bits(const Tensor& gpu, const std::vector<float>& want, const char* what) {
  const std::vector<float> b = gpu.to_vector<float>();
  BOOST_REQUIRE_EQUAL(b.size(), want.size());
  for (std::size_t i = 0; i < b.size(); ++i)
    if (!same_bits(b[i], want[i]))
      BOOST_FAIL(what << " element " << i << ": cuda " << b[i] << ", sim " << want[i]);
}

// Same bits, or NaN on both sides (CUDA returns the canonical NaN, the CPU keeps the payload).
void require_bits_or_nan(const Tensor& cpu, const Tensor& gpu) {
  BOOST_REQUIRE(cpu.shape() == gpu.shape());
  const std::vector<float> a = cpu.to_vector<float>(), b = gpu.to_vector<float>();
  for (std::size_t i = 0; i < a.size(); ++i)
    if (!same_bits_or_nan(a[i], b[i]))
      BOOST_FAIL("element " << i << ": cpu " << a[i] << ", cuda " << b[i]);
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

struct AmaxCase {
  quant::QuantSpec spec;
  Shape shape;
};
std::vector<AmaxCase> amax_cases() {
  return {{quant::QuantSpec::parse("int8 symmetric per-tensor"), Shape{1000003}},
          {quant::QuantSpec::parse("uint8 symmetric per-tensor"), Shape{7}},
          {quant::QuantSpec::parse("int8 symmetric per-tensor"), Shape{1}},
          {quant::QuantSpec::weight_per_channel(4, 0), Shape{3, 5, 1001}},
          {quant::QuantSpec::weight_per_channel(8, 1), Shape{5, 17, 9}},
          {quant::QuantSpec::weight_per_channel(8, 1), Shape{9, 17}}};
}

Run run_amax(const quant::QuantSpec& spec, const AmaxData& d, Device device) {
  const Tensor x = leaf(d.x.to(device)), a = leaf(d.amax.to(device));
  const Tensor y = quant::fake_quantize_learnable_amax(x, a, spec);
  y.backward(d.dy.to(device));
  return {y, x.grad(), a.grad(), Tensor()};
}

}  // namespace

BOOST_AUTO_TEST_SUITE(cuda_quant_learnable, *boost::unit_test::precondition(has_cuda_device))

// LSQ per tensor (1, 7, 1000, 100003, 1000003 elements) and per channel (3 / 17 channels, first,
// middle and last axis, ranges split over several blocks): forward and dx bit-exact with the CPU,
// dscale / dzero_point within 1e-6 and equal to the device order simulated on the host.
BOOST_AUTO_TEST_CASE(lsq_matches_cpu) {
  for (const LsqCase& c : lsq_cases(true)) {
    BOOST_TEST_CONTEXT(c.name) {
      const LsqData d = lsq_data(c, 70);
      const Run h = run_lsq(c, d, Device::CPU), g = run_lsq(c, d, Device::CUDA);
      BOOST_TEST((g.y.device() == Device::CUDA));
      require_bits_equal(h.y, g.y);
      require_bits_equal(h.dx, g.dx);
      const LsqSim sim = simulate_lsq(d.x, d.dy, layout_of(c.shape, c.axis), d.s, d.z, c.qmin, c.qmax,
                                      c.grad_factor, c.axis < 0);
      require_grad_close(h.ds, g.ds, sim.ds_abs, "dscale");
      require_grad_close(h.dz, g.dz, sim.dz_abs, "dzero_point");
      require_vector_bits(g.ds, sim.ds_dev, "dscale (device order)");
      require_vector_bits(g.dz, sim.dz_dev, "dzero_point (device order)");
    }
  }
}

// The same inputs twice: the same gradient bits (no atomics, a fixed split).
BOOST_AUTO_TEST_CASE(lsq_grads_are_deterministic) {
  for (const LsqCase& c : lsq_cases(true)) {
    if (c.shape.numel() < 5000) continue;
    BOOST_TEST_CONTEXT(c.name) {
      const LsqData d = lsq_data(c, 80);
      const Run a = run_lsq(c, d, Device::CUDA), b = run_lsq(c, d, Device::CUDA);
      require_bits_equal(a.dx, b.dx);
      require_bits_equal(a.ds, b.ds);
      require_bits_equal(a.dz, b.dz);
    }
  }
}

// Empty inputs: an empty output and zero parameter gradients, as on the CPU; with x frozen,
// only the parameters get gradients (the kernel skips dx).
BOOST_AUTO_TEST_CASE(lsq_empty_and_partial_grads) {
  for (const LsqCase& c : {LsqCase{"per tensor, empty", Shape{0}, -1, 0, 255, 1.0, false},
                           LsqCase{"per channel, no rows", Shape{0, 3}, 1, -128, 127, 1.0, false},
                           LsqCase{"per channel, empty rows", Shape{3, 0}, 0, -128, 127, 1.0, false}}) {
    BOOST_TEST_CONTEXT(c.name) {
      const LsqData d = lsq_data(c, 90);
      const Run h = run_lsq(c, d, Device::CPU), g = run_lsq(c, d, Device::CUDA);
      BOOST_TEST(g.y.numel() == 0);
      require_bits_equal(h.ds, g.ds);
      require_bits_equal(h.dz, g.dz);
    }
  }
  const LsqCase c = lsq_cases(false)[5];
  const LsqData d = lsq_data(c, 91);
  const Run h = run_lsq(c, d, Device::CPU);
  const Tensor s = leaf(d.scale.to(Device::CUDA)), z = d.zero_point.to(Device::CUDA);
  const Tensor x = d.x.to(Device::CUDA);
  quant::fake_quantize_learnable_per_channel_affine(x, s, z, c.axis, c.qmin, c.qmax, c.grad_factor)
      .backward(d.dy.to(Device::CUDA));
  const LsqSim sim = simulate_lsq(d.x, d.dy, layout_of(c.shape, c.axis), d.s, d.z, c.qmin, c.qmax,
                                  c.grad_factor, false);
  require_grad_close(h.ds, s.grad(), sim.ds_abs, "dscale");
  BOOST_TEST(!x.grad().defined());
}

// Parameters on another device than x: the ops' clear error, naming both.
BOOST_AUTO_TEST_CASE(mixed_devices_are_refused) {
  const Tensor x = Tensor::ones(Shape{4, 3}).to(Device::CUDA), one = Tensor::ones(Shape{1});
  const Tensor three = Tensor::ones(Shape{3}), zero = Tensor::zeros(Shape{1});
  for (const std::string& e :
       {error_of(
            [&] { (void)quant::fake_quantize_learnable_per_tensor_affine(x, one, zero, 0, 255, 1.0); }),
        error_of([&] {
          (void)quant::fake_quantize_learnable_per_channel_affine(x, three.to(Device::CUDA), three, 1, 0,
                                                                  255, 1);
        }),
        error_of([&] { (void)quant::fake_quantize_learnable_amax(x, one, quant::QuantSpec{}); }),
        error_of([&] {
          (void)quant::fake_quantize_fp8(x, one, quant::QuantSpec::fp8(quant::Format::FP8_E4M3));
        }),
        error_of([&] {
          (void)quant::fake_quantize_fp8(x.to(Device::CPU), one.to(Device::CUDA),
                                         quant::QuantSpec::fp8(quant::Format::FP8_E5M2));
        })})
    BOOST_TEST(e.find("tensors on different devices") != std::string::npos, e);
}

// Learnable amax, signed / unsigned, per tensor and per channel: forward, dx bit-exact, damax
// within 1e-6 of the CPU and equal to the device order simulated on the host; the same bits on
// a second run; an empty input gives a zero damax.
BOOST_AUTO_TEST_CASE(amax_matches_cpu) {
  for (const AmaxCase& c : amax_cases()) {
    BOOST_TEST_CONTEXT(c.spec.str() << " " << c.shape) {
      const AmaxData d = amax_data(c.spec, c.shape, 100);
      const Run h = run_amax(c.spec, d, Device::CPU), g = run_amax(c.spec, d, Device::CUDA);
      require_bits_equal(h.y, g.y);
      require_bits_equal(h.dx, g.dx);
      const Layout l = Layout::of(c.spec, c.shape);
      const std::vector<float> xv = d.x.to_vector<float>(), dy = d.dy.to_vector<float>();
      std::vector<float> terms(xv.size());
      double abs_terms = 0;
      for (std::size_t i = 0; i < xv.size(); ++i) {
        std::uint8_t m = 0;
        lm::amax_forward_one(xv[i],
                             lm::amax_consts(d.a[param_of(l, static_cast<std::int64_t>(i))],
                                             c.spec.is_signed, static_cast<float>(c.spec.quant_min()),
                                             static_cast<float>(c.spec.quant_max())),
                             &m);
        lm::amax_backward_one(dy[i], m, &terms[i]);
        abs_terms += std::fabs(terms[i]);
      }
      require_grad_close(h.ds, g.ds, abs_terms, "damax");
      require_vector_bits(g.ds, sum_device_order(terms, l), "damax (device order)");
      const Run again = run_amax(c.spec, d, Device::CUDA);
      require_bits_equal(g.ds, again.ds);
    }
  }
  const quant::QuantSpec spec = quant::QuantSpec::weight_per_channel(8, 1);
  const AmaxData d = amax_data(spec, Shape{0, 4}, 101);
  const Run g = run_amax(spec, d, Device::CUDA);
  BOOST_TEST(g.y.numel() == 0);
  require_bits_equal(Tensor::zeros(Shape{4}), g.ds);
}

// FP8 E4M3 / E5M2 per tensor and per channel on random inputs (ties of a binade, saturation,
// NaN / inf), and with scale 1 on every FP8 value, the midpoints and one ulp beside them:
// output bit-exact (NaN as NaN), the STE gradient bit-exact; an empty input.
BOOST_AUTO_TEST_CASE(fp8_matches_cpu) {
  using quant::Format;
  using quant::Granularity;
  using quant::QuantSpec;
  struct Case {
    QuantSpec spec;
    Shape shape;
  };
  std::vector<Case> cases;
  for (Format f : {Format::FP8_E4M3, Format::FP8_E5M2}) {
    for (const Shape& s : {Shape{1}, Shape{7}, Shape{1000003}}) cases.push_back({QuantSpec::fp8(f), s});
    cases.push_back({QuantSpec::fp8(f, Granularity::PerChannel, 0), Shape{3, 11, 13}});
    cases.push_back({QuantSpec::fp8(f, Granularity::PerChannel, 1), Shape{5, 17, 9}});
  }
  auto run = [](const QuantSpec& spec, const Tensor& x0, const Tensor& scale, const Tensor& g,
                Device dev) {
    const Tensor x = leaf(x0.to(dev));
    const Tensor y = quant::fake_quantize_fp8(x, scale.to(dev), spec);
    y.backward(g.to(dev));
    return std::make_pair(y, x.grad());
  };
  for (const Case& c : cases) {
    BOOST_TEST_CONTEXT(c.spec.str() << " " << c.shape) {
      const Fp8Data d = fp8_data(c.spec, c.shape, 110);
      const Tensor g = grad_input(c.shape, 111);
      const auto [yh, dxh] = run(c.spec, d.x, d.scale, g, Device::CPU);
      const auto [yd, dxd] = run(c.spec, d.x, d.scale, g, Device::CUDA);
      BOOST_TEST((yd.device() == Device::CUDA));
      require_bits_or_nan(yh, yd);
      require_bits_equal(dxh, dxd);
    }
  }
  for (Format f : {Format::FP8_E4M3, Format::FP8_E5M2}) {
    BOOST_TEST_CONTEXT(QuantSpec::fp8(f).str() << " probe values") {
      const std::vector<float> v = fp8_probe_values(f);
      const Shape s{static_cast<std::int64_t>(v.size())};
      const Tensor x = Tensor::from_vector(v, s), g = grad_input(s, 112);
      const auto [yh, dxh] = run(QuantSpec::fp8(f), x, Tensor::ones(Shape{1}), g, Device::CPU);
      const auto [yd, dxd] = run(QuantSpec::fp8(f), x, Tensor::ones(Shape{1}), g, Device::CUDA);
      require_bits_or_nan(yh, yd);
      require_bits_equal(dxh, dxd);
    }
  }
  const Tensor e = quant::fake_quantize_fp8(Tensor::empty(Shape{0, 3}).to(Device::CUDA),
                                            Tensor::ones(Shape{1}).to(Device::CUDA),
                                            QuantSpec::fp8(Format::FP8_E4M3));
  BOOST_TEST(e.numel() == 0);
}

BOOST_AUTO_TEST_SUITE_END()
