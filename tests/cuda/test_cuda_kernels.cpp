// Each CUDA kernel against the CPU reference on random inputs of odd sizes (not multiples of
// the 256-thread block), empty ranges and ties: elementwise ops with broadcasting, scalar ops,
// relu, sums, matmul / linear (float32 tolerance), fake quantization and the fused observer
// (bit-exact), each forward and backward.
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <limits>

#include "cuda_test_util.h"
#include "framework/autograd/ops.h"
#include "modules/quant/fake_quant.h"
#include "modules/quant/fused_observer.h"

using namespace qat;
using qat::test::has_cuda_device;
using qat::test::require_bits_equal;
using qat::test::require_close;

using qat::test::compare;
using qat::test::leaf;
using qat::test::rnd;

BOOST_AUTO_TEST_SUITE(cuda_kernels, *boost::unit_test::precondition(has_cuda_device))

BOOST_AUTO_TEST_CASE(binary_ops_broadcast) {
  const std::vector<std::pair<Shape, Shape>> shapes = {
      {Shape{1031}, Shape{1031}},  {Shape{37, 1, 5}, Shape{1, 13, 5}},
      {Shape{3, 257}, Shape{257}}, {Shape{7, 9}, Shape{}},
      {Shape{0, 5}, Shape{5}},     {Shape{4, 1}, Shape{1, 3}}};
  for (const auto& [sa, sb] : shapes) {
    const Tensor a = rnd(sa, 1), b = add(rnd(sb, 2, 0.5, 2), 0.0);  // b away from 0 for div
    // the gradient of a broadcast input sums over the broadcast dimensions, in another order
    // on the GPU: float32 tolerance there, bit-exact elsewhere
    compare(
        {a, b}, [](const auto& in) { return add(in[0], in[1]); }, 0, 1e-5);
    compare(
        {a, b}, [](const auto& in) { return sub(in[0], in[1]); }, 0, 1e-5);
    compare(
        {a, b}, [](const auto& in) { return mul(in[0], in[1]); }, 1e-6, 1e-5);
    compare(
        {a, b}, [](const auto& in) { return div(in[0], in[1]); }, 1e-5);
  }
}

BOOST_AUTO_TEST_CASE(scalar_ops_and_relu_with_ties) {
  Tensor x = rnd(Shape{3, 333}, 3);
  std::vector<float> v = x.to_vector<float>();
  v[0] = 0.0f, v[1] = -0.0f, v[2] = std::numeric_limits<float>::quiet_NaN(), v[3] = 1e-30f;
  x = Tensor::from_vector(v, x.shape());
  const auto same = [&](auto f) { require_bits_equal(f(x), f(x.to(Device::CUDA))); };
  same([](const Tensor& t) { return relu(t); });
  same([](const Tensor& t) { return neg(t); });
  same([](const Tensor& t) { return add(t, 0.1); });
  same([](const Tensor& t) { return mul(t, -3.5); });
  same([](const Tensor& t) { return div(t, 7.0); });
  same([](const Tensor& t) { return rsub(1.5, t); });
  same([](const Tensor& t) { return rdiv(2.0, t); });
  const Tensor y = rnd(Shape{1001}, 4);
  compare(
      {y}, [](const auto& in) { return relu(in[0]); }, 0);
  compare(
      {y}, [](const auto& in) { return mul(add(in[0], 0.25), 3.0); }, 0);
  compare(
      {add(y, 3.0)}, [](const auto& in) { return pow(in[0], 2.0); }, 1e-5);
}

BOOST_AUTO_TEST_CASE(sums_and_means) {
  for (const Shape& s : {Shape{1}, Shape{257}, Shape{100003}, Shape{0}, Shape{3, 0, 2}}) {
    compare(
        {rnd(s, 5)}, [](const auto& in) { return sum(in[0]); }, 1e-5);
  }
  const Tensor x = rnd(Shape{7, 301, 3}, 6);
  for (int d = 0; d < 3; ++d) {
    compare(
        {x}, [d](const auto& in) { return sum(in[0], d, false); }, 1e-5);
    compare(
        {x}, [d](const auto& in) { return mean(in[0], d, true); }, 1e-5);
  }
  compare(
      {x}, [](const auto& in) { return mean(in[0]); }, 1e-5);
  // deterministic: twice the same bits
  const Tensor d = rnd(Shape{1 << 20}, 7).to(Device::CUDA);
  require_bits_equal(sum(d).to(Device::CPU), sum(d));
}

BOOST_AUTO_TEST_CASE(matmul_and_linear) {
  compare(
      {rnd(Shape{37, 61}, 8), rnd(Shape{61, 29}, 9)},
      [](const auto& in) { return matmul(in[0], in[1]); }, 1e-4);
  compare(
      {rnd(Shape{3, 5, 7}, 8), rnd(Shape{3, 7, 2}, 9)},
      [](const auto& in) { return matmul(in[0], in[1]); }, 1e-4);
  compare(
      {rnd(Shape{33, 131}, 10), rnd(Shape{67, 131}, 11), rnd(Shape{67}, 12)},
      [](const auto& in) { return linear(in[0], in[1], in[2]); }, 1e-4);
  compare(
      {rnd(Shape{0, 5}, 10), rnd(Shape{3, 5}, 11), rnd(Shape{3}, 12)},
      [](const auto& in) { return linear(in[0], in[1], in[2]); }, 1e-4);
}

// Fake quantization per tensor, channel and block: the same bits as the CPU kernel, ties
// (x = (k + 1/2) scale) included.
BOOST_AUTO_TEST_CASE(fake_quant_bit_exact) {
  const float scale = 0.0173f;
  Tensor x = rnd(Shape{5, 7, 211}, 13, -3, 3);
  std::vector<float> v = x.to_vector<float>();
  for (int k = 0; k < 64; ++k) v[k] = (static_cast<float>(k) - 32.5f) * scale;  // ties
  v[64] = std::numeric_limits<float>::quiet_NaN(), v[65] = INFINITY, v[66] = -INFINITY, v[67] = -0.0f;
  x = Tensor::from_vector(v, x.shape());
  for (auto [zp, lo, hi] : {std::tuple{0, -128, 127}, std::tuple{7, 0, 255}, std::tuple{0, -8, 7}}) {
    require_bits_equal(quant::fake_quantize_per_tensor_affine(x, scale, zp, lo, hi),
                       quant::fake_quantize_per_tensor_affine(x.to(Device::CUDA), scale, zp, lo, hi));
  }
  for (int axis : {0, 1, 2}) {
    const std::int64_t c = x.size(axis);
    std::vector<float> s(c);
    std::vector<std::int32_t> z(c);
    for (std::int64_t i = 0; i < c; ++i)
      s[i] = 0.01f + 0.003f * static_cast<float>(i % 17), z[i] = i % 5;
    const Tensor st = Tensor::from_vector(s, Shape{c}), zt = Tensor::from_vector(z, Shape{c});
    compare(
        {x},
        [&](const auto& in) {
          const bool d = in[0].device() == Device::CUDA;
          return quant::fake_quantize_per_channel_affine(in[0], d ? st.to(Device::CUDA) : st,
                                                         d ? zt.to(Device::CUDA) : zt, axis, -128, 127);
        },
        0);
  }
  // per block along each axis whose size the block divides (7: blocks of 7; 211: one block)
  for (const auto& [axis, block] : {std::pair{0, 5}, {1, 7}, {2, 211}}) {
    const quant::QuantSpec spec = quant::QuantSpec::weight_per_block(8, block, axis);
    const Shape ps = quant::param_shape(spec, x.shape());
    std::vector<float> s(ps.numel());
    std::vector<std::int32_t> z(ps.numel(), 0);
    for (std::int64_t i = 0; i < ps.numel(); ++i) s[i] = 0.01f + 0.003f * static_cast<float>(i % 19);
    const Tensor st = Tensor::from_vector(s, ps), zt = Tensor::from_vector(z, ps);
    compare(
        {x},
        [&](const auto& in) {
          const bool d = in[0].device() == Device::CUDA;
          return quant::fake_quantize(
              in[0], {d ? st.to(Device::CUDA) : st, d ? zt.to(Device::CUDA) : zt}, spec);
        },
        0);
  }
  compare(
      {rnd(Shape{1001}, 14)},
      [&](const auto& in) { return quant::fake_quantize_per_tensor_affine(in[0], scale, 3, 0, 255); },
      0);
  {  // channels in runs of 12 (the kernel's 4-wide steps share one channel's parameters)
    std::vector<float> s(8);
    std::vector<std::int32_t> z(8);
    for (int i = 0; i < 8; ++i) s[i] = 0.01f + 0.004f * static_cast<float>(i), z[i] = i - 3;
    const Tensor st = Tensor::from_vector(s, Shape{8}), zt = Tensor::from_vector(z, Shape{8});
    compare(
        {rnd(Shape{3, 8, 12}, 15)},
        [&](const auto& in) {
          const bool d = in[0].device() == Device::CUDA;
          return quant::fake_quantize_per_channel_affine(in[0], d ? st.to(Device::CUDA) : st,
                                                         d ? zt.to(Device::CUDA) : zt, 1, -128, 127);
        },
        0);
  }
  // a view that starts 1477 floats into its storage: not 16-byte aligned (one element at a time)
  require_bits_equal(
      quant::fake_quantize_per_tensor_affine(x.rows(1, 5), scale, 2, -128, 127),
      quant::fake_quantize_per_tensor_affine(x.to(Device::CUDA).rows(1, 5), scale, 2, -128, 127));
  const Tensor empty = Tensor::empty(Shape{0, 3});
  BOOST_TEST(
      quant::fake_quantize_per_tensor_affine(empty.to(Device::CUDA), scale, 0, -128, 127).numel() == 0);
}

// The fused observer + fake quant: running min / max, qparams and output bit-exact with the CPU
// path over several batches, affine and symmetric; a NaN batch is counted and skipped.
BOOST_AUTO_TEST_CASE(fused_observer_bit_exact) {
  for (const char* spec_text : {"uint8 affine per-tensor", "int8 symmetric per-tensor"}) {
    const quant::QuantSpec spec = quant::QuantSpec::parse(spec_text);
    quant::FusedObserverState h = quant::FusedObserverState::make(Device::CPU);
    quant::FusedObserverState d = quant::FusedObserverState::make(Device::CUDA);
    for (int step = 0; step < 6; ++step) {
      Tensor x = rnd(Shape{3, 1000 + 37 * step}, 20 + step, -1 - step, 2 + step);
      if (step == 3) {
        std::vector<float> v = x.to_vector<float>();
        v[5] = std::numeric_limits<float>::quiet_NaN();
        x = Tensor::from_vector(v, x.shape());
      }
      const Tensor xh = leaf(x), xd = leaf(x.to(Device::CUDA));
      const Tensor yh = quant::fused_moving_avg_obs_fake_quant(xh, h, spec, 0.01, true, step != 4);
      const Tensor yd = quant::fused_moving_avg_obs_fake_quant(xd, d, spec, 0.01, true, step != 4);
      require_bits_equal(yh, yd);
      require_bits_equal(h.running_min, d.running_min);
      require_bits_equal(h.running_max, d.running_max);
      require_bits_equal(h.scale, d.scale);
      BOOST_TEST(h.zero_point.to_vector<std::int32_t>() == d.zero_point.to_vector<std::int32_t>(),
                 boost::test_tools::per_element());
      const Tensor g = rnd(x.shape(), 40 + step);
      yh.backward(g);
      yd.backward(g.to(Device::CUDA));
      require_bits_equal(xh.grad(), xd.grad());
    }
    BOOST_TEST(d.nonfinite_batches.item() == 1.0);
    BOOST_TEST(h.nonfinite_batches.item() == 1.0);
  }
}

BOOST_AUTO_TEST_SUITE_END()
