// Fake quantization with its straight-through mask as bits (kernels.h: element i at bit i % 8
// of byte i / 8): the kernels against the scalar reference (fq_run, ste_run) on every path,
// masks starting inside a byte (the bits around them kept), and the op's output and gradient
// on layouts whose runs start anywhere, split over threads, against the float64 path.
#include <algorithm>
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <cstdint>
#include <tuple>
#include <vector>

#include "common/isa.h"
#include "framework/autograd/ops.h"
#include "framework/tensor/parallel.h"
#include "modules/quant/detail/fq_kernels.h"
#include "modules/quant/fake_quant.h"
#include "modules/quant/kernels/cpu/kernels.h"
#include "quant/kernel_test_data.h"

using namespace qat;
using namespace qat::quant;
using namespace qat::test;
namespace k = qat::quant::kernels;

BOOST_AUTO_TEST_SUITE(fq_bits)

namespace {

const std::int64_t kMoreSizes[] = {1, 3, 15, 16, 17, 33, 64, 65, 127, 200, 1007};
constexpr std::uint8_t kFill = 0xA5;  // what the bytes around the written bits hold

bool bit(const U8& bits, std::int64_t i) { return (bits[i >> 3] >> (i & 7)) & 1; }

/// Bits [first, first + n) as bytes 0 / 1, and whether every other bit kept kFill's.
U8 unpack(const U8& bits, std::int64_t first, std::int64_t n, bool& others_kept) {
  U8 m(n);
  others_kept = true;
  for (std::int64_t i = 0; i < static_cast<std::int64_t>(bits.size()) * 8; ++i) {
    if (i >= first && i < first + n)
      m[i - first] = bit(bits, i);
    else if (bit(bits, i) != ((kFill >> (i & 7)) & 1))
      others_kept = false;
  }
  return m;
}

/// n mask bits: kind 0 all set, 1 all clear, 2 one clear per 70, 3 two of three clear, 4 random.
U8 mask_bits(std::int64_t n, int kind, U8& bytes) {
  std::mt19937 gen(static_cast<std::uint32_t>(n * 5 + kind));
  bytes.assign(n, 1);
  for (std::int64_t i = 0; i < n; ++i)
    bytes[i] = kind == 0   ? 1
               : kind == 1 ? 0
               : kind == 2 ? i % 70 != 5
               : kind == 3 ? i % 3 == 0
                           : gen() % 2;
  U8 bits((n + 7) / 8, 0);
  for (std::int64_t i = 0; i < n; ++i) bits[i >> 3] |= static_cast<std::uint8_t>(bytes[i] << (i & 7));
  return bits;
}

}  // namespace

BOOST_AUTO_TEST_CASE(fake_quant_bits_match_reference) {
  const struct {
    float scale;
    std::int32_t zp;
    std::int64_t qmin, qmax;
  } cases[] = {{0.25f, 0, -128, 127},
               {0.1f, 3, 0, 255},
               {0.0173f, -5, -8, 7},
               {1e-3f, 0, -127, 127},
               {0.5f, 7, -32768, 32767},             // 16 bits (the kernels' magic-number domain)
               {0.01f, 1000, -(1 << 22), 1 << 22}};  // past 2^21: the kernels round
  for (const auto& c : cases)
    for (std::int64_t n : kMoreSizes)
      for (std::int64_t first : {0, 3, 8, 13}) {
        const F x =
            data(n, c.scale, c.qmin - c.zp, c.qmax - c.zp, static_cast<std::uint32_t>(n + first));
        F ref(n);
        U8 mref(n);
        quant::detail::fq_run<float>(x.data(), ref.data(), mref.data(), n, c.scale, c.zp, c.qmin,
                                     c.qmax);
        F y0;
        for_each_isa([&](cpu::Isa) {
          BOOST_TEST_CONTEXT("scale " << c.scale << " n " << n << " first " << first) {
            F y(n), y2(n);
            U8 bits((first + n + 7) / 8 + 1, kFill);
            k::fake_quant(x.data(), y.data(), bits.data(), first, n, c.scale, c.zp, c.qmin, c.qmax);
            k::fake_quant(x.data(), y2.data(), nullptr, first, n, c.scale, c.zp, c.qmin, c.qmax);
            expect_bits(y, ref, "y");
            expect_bits(y2, ref, "y without mask");
            bool kept = false;
            BOOST_TEST(unpack(bits, first, n, kept) == mref, boost::test_tools::per_element());
            BOOST_TEST(kept);
            if (y0.empty()) y0 = y;
            BOOST_TEST(same_bits(y, y0));
          }
        });
      }
}

// Far outside the grid, where the kernels' magic-number rounding (fl(x inv + 1.5 2^23)) stops
// being a rounding: x inv around +-2^21, 2^22, 2^23, 2^24, huge and tiny values; the same bits
// as the reference on every path.
BOOST_AUTO_TEST_CASE(fake_quant_far_outside_the_grid) {
  for (const auto& [scale, zp, qmin, qmax] :
       {std::tuple{0.05f, 3, std::int64_t{-128}, std::int64_t{127}},
        std::tuple{0.5f, 128, std::int64_t{0}, std::int64_t{255}},
        std::tuple{0.25f, -1000, std::int64_t{-32768}, std::int64_t{32767}}}) {
    F x;
    for (float e : {2097152.0f, 4194304.0f, 8388608.0f, 16777216.0f})
      for (float d : {-2.5f, -1.5f, -1.0f, -0.5f, 0.0f, 0.5f, 1.0f, 1.5f, 2.5f})
        for (float sign : {1.0f, -1.0f}) x.push_back(sign * (e + d) * scale);
    for (float v : {1e30f, -1e30f, 3.4e38f, -3.4e38f, 1e-40f, -1e-40f, 1e-45f, -1e-45f}) x.push_back(v);
    // NaN of either sign (to quant_min, mask 0) and the infinities
    for (float v : {std::nanf(""), -std::nanf(""), HUGE_VALF, -HUGE_VALF, 0.0f, -0.0f}) x.push_back(v);
    const std::int64_t n = static_cast<std::int64_t>(x.size());
    F ref(n);
    U8 mref(n);
    quant::detail::fq_run<float>(x.data(), ref.data(), mref.data(), n, scale, zp, qmin, qmax);
    // (copies of the bindings: clang 14 captures no structured binding)
    for_each_isa([&, scale = scale, zp = zp, qmin = qmin, qmax = qmax](cpu::Isa) {
      BOOST_TEST_CONTEXT("scale " << scale << " zero point " << zp) {
        F y(n);
        U8 bits((n + 7) / 8 + 1, kFill);
        k::fake_quant(x.data(), y.data(), bits.data(), 0, n, scale, zp, qmin, qmax);
        expect_bits(y, ref, "y");
        bool kept = false;
        BOOST_TEST(unpack(bits, 0, n, kept) == mref, boost::test_tools::per_element());
      }
    });
  }
}

// Runs with their own scale / zero point in one call, the first starting inside a mask byte:
// the same as one fake_quant per run.
BOOST_AUTO_TEST_CASE(fake_quant_runs_match_per_run_calls) {
  for (std::int64_t n : {16, 17, 33, 64, 200})
    for (std::int64_t first : {0, 5}) {
      const std::int64_t runs = 4;
      const F x = data(runs * n, 0.05f, -128, 127, static_cast<std::uint32_t>(n));
      const F s = {0.05f, 0.013f, 0.25f, 1e-3f};
      const std::vector<std::int32_t> z = {0, 3, -2, 0};
      for_each_isa([&](cpu::Isa) {
        BOOST_TEST_CONTEXT("n " << n << " first " << first) {
          F y(runs * n), yref(runs * n);
          U8 bits((first + runs * n + 7) / 8 + 1, kFill), bref = bits;
          k::fake_quant_runs(x.data(), y.data(), bits.data(), first, runs, n, s.data(), z.data(), -128,
                             127);
          for (std::int64_t r = 0; r < runs; ++r)
            k::fake_quant(x.data() + r * n, yref.data() + r * n, bref.data(), first + r * n, n, s[r],
                          z[r], -128, 127);
          expect_bits(y, yref, "y");
          BOOST_TEST(bits == bref, boost::test_tools::per_element());
          F ref(n);
          U8 mref(n);
          quant::detail::fq_run<float>(x.data() + n, ref.data(), mref.data(), n, s[1], z[1], -128, 127);
          expect_bits(F(y.begin() + n, y.begin() + 2 * n), ref, "run 1 vs fq_run");
          bool kept = false;
          const U8 m = unpack(bits, first, runs * n, kept);
          BOOST_TEST(U8(m.begin() + n, m.begin() + 2 * n) == mref, boost::test_tools::per_element());
          BOOST_TEST(kept);
        }
      });
    }
}

BOOST_AUTO_TEST_CASE(fake_quant_rows_bits_match_reference) {
  for (std::int64_t cols : {1, 3, 17, 33, 70}) {
    const std::int64_t rows = 5;
    F inv(cols), s(cols), z(cols);
    std::vector<std::int32_t> zi(cols);
    for (std::int64_t c = 0; c < cols; ++c) {
      s[c] = 0.01f * static_cast<float>(c + 1);
      inv[c] = 1.0f / s[c];
      zi[c] = static_cast<std::int32_t>(c % 7) - 3;
      z[c] = static_cast<float>(zi[c]);
    }
    const F x = data(rows * cols, 0.05f, -128, 127, 11);
    F ref(rows * cols);
    U8 mref(rows * cols);
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t c = 0; c < cols; ++c)
        quant::detail::fq_run<float>(&x[r * cols + c], &ref[r * cols + c], &mref[r * cols + c], 1, s[c],
                                     zi[c], -128, 127);
    for_each_isa([&](cpu::Isa) {
      BOOST_TEST_CONTEXT("cols " << cols) {
        F y(rows * cols), y2(rows * cols);
        U8 bits((rows * cols + 7) / 8 + 1, kFill);
        k::fake_quant_rows(x.data(), y.data(), bits.data(), rows, cols, inv.data(), s.data(), z.data(),
                           -128, 127);
        k::fake_quant_rows(x.data(), y2.data(), nullptr, rows, cols, inv.data(), s.data(), z.data(),
                           -128, 127);
        expect_bits(y, ref, "rows y");
        expect_bits(y2, ref, "rows y without mask");
        bool kept = false;
        BOOST_TEST(unpack(bits, 0, rows * cols, kept) == mref, boost::test_tools::per_element());
        BOOST_TEST(kept);
      }
    });
  }
}

BOOST_AUTO_TEST_CASE(masked_bits_match_reference) {
  for (std::int64_t n : kMoreSizes)
    for (int kind = 0; kind < 5; ++kind) {
      U8 bytes;
      const U8 bits = mask_bits(n, kind, bytes);
      const F dy = data(n, 1.0f, -10, 10, 9, true);
      F ref(n);
      quant::detail::ste_run<float>(dy.data(), bytes.data(), ref.data(), n);
      for_each_isa([&](cpu::Isa) {
        BOOST_TEST_CONTEXT("n " << n << " mask kind " << kind) {
          F dx(n, 7.0f), g = dy;
          k::masked_copy_bits(dy.data(), bits.data(), dx.data(), n);
          k::masked_zero_bits(g.data(), bits.data(), n);
          expect_bits(dx, ref, "masked_copy_bits");
          expect_bits(g, ref, "masked_zero_bits");
        }
      });
    }
}

// Per channel with runs starting inside a mask byte (inner 33, 49), the rows layout, a weight's
// rows and per tensor split over two threads; the gradient in place (g held by nobody else) and copied
// (the caller keeps g), both against the float64 op (power-of-two scales: x / s exact in both).
BOOST_AUTO_TEST_CASE(fake_quantize_op_output_and_gradient) {
  struct Case {
    Shape shape;
    int axis;  // -1: per tensor
  };
  // [300, 256] axis 0: a weight's rows, split over the two threads
  const Case cases[] = {{Shape{7, 33}, 0},
                        {Shape{3, 5, 7, 7}, 1},
                        {Shape{33, 7}, 1},
                        {Shape{300, 256}, 0},
                        {Shape{3, 65549}, -1}};
  const int threads = get_num_threads();
  set_num_threads(2);
  for (const Case& c : cases) {
    const std::int64_t numel = c.shape.numel(), channels = c.axis < 0 ? 1 : c.shape[c.axis];
    const F v = data(numel, 0.125f, -128, 127, static_cast<std::uint32_t>(numel) + 3);
    const F w = data(numel, 1.0f, -10, 10, 17, false);
    F s(channels);
    std::vector<std::int32_t> z(channels);
    for (std::int64_t ch = 0; ch < channels; ++ch) {
      s[ch] = std::ldexp(1.0f, -static_cast<int>(ch % 5));
      z[ch] = static_cast<std::int32_t>(ch % 3) - 1;
    }
    const Tensor scale = Tensor::from_vector<float>(s, Shape{channels});
    const Tensor zp = Tensor::from_vector<std::int32_t>(z, Shape{channels});
    const auto run = [&](DType dtype, bool keep_grad, F& y, F& dx) {
      Tensor x = Tensor::from_vector<float>(v, c.shape).to(dtype);
      x.requires_grad_(true);
      Tensor out = c.axis < 0 ? fake_quantize_per_tensor_affine(x, s[0], z[0], -128, 127)
                              : fake_quantize_per_channel_affine(x, scale, zp, c.axis, -128, 127);
      const Tensor g = Tensor::from_vector<float>(w, c.shape).to(dtype);
      if (keep_grad) {
        out.backward(g);
        BOOST_TEST(same_bits(g.to(DType::Float32).to_vector<float>(), w));  // not written in place
      } else {
        out.backward(g.clone());
      }
      y = out.to(DType::Float32).to_vector<float>();
      dx = x.grad().to(DType::Float32).to_vector<float>();
    };
    F y64, dx64;
    run(DType::Float64, false, y64, dx64);
    for_each_isa([&](cpu::Isa) {
      for (bool keep_grad : {false, true})
        BOOST_TEST_CONTEXT("shape " << c.shape << " axis " << c.axis << " caller keeps g "
                                    << keep_grad) {
          F y, dx;
          run(DType::Float32, keep_grad, y, dx);
          expect_bits(y, y64, "y");
          expect_bits(dx, dx64, "dx");
        }
    });
  }
  set_num_threads(threads);
}

BOOST_AUTO_TEST_SUITE_END()
