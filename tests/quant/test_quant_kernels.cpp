// The runtime-dispatched quantization kernels (modules/quant/kernels/cpu/kernels.h) against
// scalar references on every path this CPU has: odd sizes (tails), NaN, +-inf, values exactly at
// .5 ties and at the qmin / qmax edges; and bit-identical outputs across paths. Then the ops
// that use them on the layouts that pick different kernels (runs vs. rows). Fake quantization
// with its bit mask: test_fq_bits.cpp.
#include <algorithm>
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "common/isa.h"
#include "framework/autograd/ops.h"
#include "modules/quant/detail/fq_kernels.h"
#include "modules/quant/fake_quant.h"
#include "modules/quant/kernels/cpu/kernels.h"
#include "modules/quant/observer.h"
#include "quant/kernel_test_data.h"
#include "quant/quant_test_util.h"

using namespace qat;
using namespace qat::quant;
using namespace qat::test;
namespace k = qat::quant::kernels;

BOOST_AUTO_TEST_SUITE(quant_kernels)

namespace {

// chunk256 (kernels.h): per chunk of 256 terms, term j of each 16-term block added in float to
// lane j (a missing term is +0), each chunk's lanes added to double lanes; the 16 lanes combined
// pairwise. With `factors`, the terms are the products factors[i] terms[i], each added as
// fma(factors[i], terms[i], lane).
double chunk256(const std::vector<float>& terms, const std::vector<float>* factors = nullptr) {
  double l[16] = {};
  const std::size_t n = terms.size();
  for (std::size_t c = 0; c < n; c += 256) {
    float f[16] = {};
    for (std::size_t i = c; i < std::min(n, c + 256); ++i) {
      float& lane = f[(i - c) % 16];
      lane = factors != nullptr ? std::fma((*factors)[i], terms[i], lane) : lane + terms[i];
    }
    for (int j = 0; j < 16; ++j) l[j] += static_cast<double>(f[j]);
  }
  for (int w = 8; w >= 1; w /= 2)
    for (int j = 0; j < w; ++j) l[j] += l[j + w];
  return l[0];
}

}  // namespace

// The byte-mask STE (FP8, MX): in place, masks all ones (only read), all zeros and ones with
// isolated zeros (one per 70 elements: most vector-sized runs skipped, some not), and copied,
// against the reference STE.
BOOST_AUTO_TEST_CASE(masked_zero_matches_reference) {
  for (std::int64_t n : kSizes)
    for (int kind = 0; kind < 3; ++kind) {
      U8 m(n, kind == 1 ? 0 : 1);
      if (kind == 2)
        for (std::int64_t i = 5; i < n; i += 70) m[i] = 0;
      const F dy = data(n, 1.0f, -10, 10, 9, true);
      F ref(n);
      qat::quant::detail::ste_run<float>(dy.data(), m.data(), ref.data(), n);
      for_each_isa([&](cpu::Isa) {
        BOOST_TEST_CONTEXT("n " << n << " mask kind " << kind) {
          F g = dy, dx(n, 7.0f);
          k::masked_zero(g.data(), m.data(), n);
          k::masked_copy(dy.data(), m.data(), dx.data(), n);
          expect_bits(g, ref, "masked_zero");
          expect_bits(dx, ref, "masked_copy");
        }
      });
    }
}

// The reference for lsq_backward (kernels.h): inside the products dx r, r = fma(q - zp, s, -x),
// added by fma; outside PyTorch's own terms, b = (dy (qmin|qmax - zp)) gf and z = ((-dy) s) gf, each
// summed by chunk256; then ds = gf (A / s) + B, dz = Z in double.
void lsq_ref(const F& x, const F& dy, float s, float zp, std::int64_t qmin, std::int64_t qmax, float gf,
             F& dx, double& ds, double& dz) {
  const float inv = 1.0f / s, lo = static_cast<float>(qmin), hi = static_cast<float>(qmax);
  F a(x.size()), b(x.size()), z(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    const float q = std::nearbyint(std::fma(x[i], inv, zp));
    const bool below = !(q >= lo), above = q > hi, inside = !below && !above;
    dx[i] = inside ? dy[i] : 0.0f;
    a[i] = inside ? std::fma(q - zp, s, -x[i]) : 0.0f;
    const float t = below ? dy[i] * (lo - zp) : dy[i] * (hi - zp);
    b[i] = inside ? 0.0f : t * gf;
    const float u = dy[i] * -1.0f;
    z[i] = inside ? 0.0f : u * s * gf;
  }
  ds = static_cast<double>(gf) * (static_cast<double>(inv) * chunk256(a, &dx)) + chunk256(b);
  dz = chunk256(z);
}

// x: `data` (a third beyond the range, ties, edges, NaN, +-inf) or mostly inside the range, one
// element in 40 beyond it: 16-element blocks that are all inside (the kernel's short path) next
// to blocks that are not, in one run; 1007 elements span 4 chunks of 256.
BOOST_AUTO_TEST_CASE(lsq_backward_matches_reference) {
  const struct {
    float s, zp;
    std::int64_t qmin, qmax;
    float gf;
  } cases[] = {{0.25f, 0, -128, 127, 1.0f}, {0.0173f, 3, 0, 255, 0.01f}, {0.5f, -2, -8, 7, 0.3f}};
  for (const auto& c : cases)
    for (const bool mostly_inside : {false, true})
      for (std::int64_t n : kSizes) {
        F x = data(n, c.s, c.qmin, c.qmax, static_cast<std::uint32_t>(n) + 1);
        if (mostly_inside) {
          std::mt19937 gen(static_cast<std::uint32_t>(n) + 7);
          std::uniform_real_distribution<float> u(static_cast<float>(c.qmin) - c.zp,
                                                  static_cast<float>(c.qmax) - c.zp);
          for (std::int64_t i = 0; i < n; ++i)
            x[i] = i % 40 == 39 ? static_cast<float>(c.qmax - c.qmin) * c.s * (i % 80 == 79 ? 1 : -1)
                                : u(gen) * c.s;
        }
        const F dy = data(n, 1.0f, -10, 10, static_cast<std::uint32_t>(n) + 2, false);
        F dref(n);
        double ds_ref, dz_ref;
        lsq_ref(x, dy, c.s, c.zp, c.qmin, c.qmax, c.gf, dref, ds_ref, dz_ref);
        double ds0 = 0, dz0 = 0;
        bool first = true;
        for_each_isa([&](cpu::Isa) {
          BOOST_TEST_CONTEXT("s " << c.s << " n " << n << " mostly inside " << mostly_inside) {
            F dx(n);
            double ds = 0.5, dz = -0.25;  // the kernel adds to these
            k::lsq_backward(x.data(), dy.data(), dx.data(), n, c.s, c.zp, c.qmin, c.qmax, c.gf, &ds,
                            &dz);
            expect_bits(dx, dref, "dx");
            BOOST_TEST(ds == ds_ref + 0.5);
            BOOST_TEST(dz == dz_ref - 0.25);
            if (first) ds0 = ds, dz0 = dz, first = false;
            BOOST_TEST(std::memcmp(&ds, &ds0, 8) == 0);
            BOOST_TEST(std::memcmp(&dz, &dz0, 8) == 0);
          }
        });
      }
}

// Runs the kernel on every path and checks dx bit for bit and ds / dz exactly against lsq_ref.
void expect_lsq_matches(const F& x, const F& dy, float s, float zp, std::int64_t qmin, std::int64_t qmax,
                        float gf) {
  const std::int64_t n = static_cast<std::int64_t>(x.size());
  F dref(x.size());
  double ds_ref, dz_ref;
  lsq_ref(x, dy, s, zp, qmin, qmax, gf, dref, ds_ref, dz_ref);
  for_each_isa([&](cpu::Isa) {
    F dx(x.size());
    double ds = 0, dz = 0;
    k::lsq_backward(x.data(), dy.data(), dx.data(), n, s, zp, qmin, qmax, gf, &ds, &dz);
    expect_bits(dx, dref, "dx");
    BOOST_TEST(ds == ds_ref);
    BOOST_TEST(dz == dz_ref);
  });
}

// The kernel sends a block down its unmasked path when every x lies in an interval of x whose q
// is inside (found once per run, a few floats inside the exact ends): blocks of the last inside
// x with one element a float beyond it (each position), for ranges and scales where the ends
// fall on ties and far from them. An interval a float too wide fails here (432 checks).
BOOST_AUTO_TEST_CASE(lsq_blocks_at_the_inside_range_ends) {
  const struct {
    float s, zp;
    std::int64_t qmin, qmax;
  } cases[] = {{0.25f, 0, -128, 127},
               {0.0173f, 3, 0, 255},
               {0.5f, -2, -8, 7},
               {0.037f, 127, 0, 255},
               {3.0e-5f, -30000, -32768, 32767},
               {1.0f, 0, 0, 1},
               {0.05f, 300, 0, 255}};  // a zero point outside the range (the ops clamp theirs)
  for (const auto& c : cases) {
    const float inv = 1.0f / c.s, lo = static_cast<float>(c.qmin), hi = static_cast<float>(c.qmax);
    const auto q = [&](float v) { return std::nearbyint(std::fma(v, inv, c.zp)); };
    // the ends by walking one float at a time from below the estimate
    float x_hi = std::nextafter((hi + 0.5f - c.zp) * c.s, -kInf), x_lo = (lo - 0.5f - c.zp) * c.s;
    for (int i = 0; i < 64 && q(x_hi) <= hi; ++i) x_hi = std::nextafter(x_hi, kInf);
    while (q(x_hi) > hi) x_hi = std::nextafter(x_hi, -kInf);
    for (int i = 0; i < 64 && q(x_lo) >= lo; ++i) x_lo = std::nextafter(x_lo, -kInf);
    while (q(x_lo) < lo) x_lo = std::nextafter(x_lo, kInf);
    BOOST_TEST_REQUIRE(q(std::nextafter(x_hi, kInf)) > hi);
    BOOST_TEST_REQUIRE(q(std::nextafter(x_lo, -kInf)) < lo);
    F x;
    for (int end = 0; end < 2; ++end) {
      const float last = end ? x_hi : x_lo, beyond = std::nextafter(last, end ? kInf : -kInf);
      for (int j = 0; j <= 16; ++j)  // j = 16: the block is all inside
        for (int i = 0; i < 16; ++i) x.push_back(i == j ? beyond : last);
    }
    const F dy = data(static_cast<std::int64_t>(x.size()), 1.0f, -10, 10, 77, false);
    BOOST_TEST_CONTEXT("s " << c.s << " zp " << c.zp << " [" << c.qmin << ", " << c.qmax << "]") {
      expect_lsq_matches(x, dy, c.s, c.zp, c.qmin, c.qmax, 0.01f);
    }
  }
}

// The kernel switches between a branch per block and masking every block by how many blocks
// had an element outside recently: runs of chunks with none, with some, with most, in turn.
BOOST_AUTO_TEST_CASE(lsq_switches_between_branching_and_masking) {
  const float s = 0.02f, zp = 3;
  const std::int64_t qmin = -128, qmax = 127, chunks = 96;
  std::mt19937 gen(5);
  std::uniform_real_distribution<float> inside(-120 * s, 120 * s), u01(0, 1);
  F x(chunks * 128 - 5);
  for (std::size_t i = 0; i < x.size(); ++i) {
    const std::int64_t phase = static_cast<std::int64_t>(i) / 128 / 12 % 4;  // 12 chunks each
    const float p_out = phase == 0 ? 0.0f : phase == 1 ? 0.01f : phase == 2 ? 0.3f : 0.05f;
    x[i] = u01(gen) < p_out ? (u01(gen) < 0.5f ? 200 * s : -200 * s) : inside(gen);
  }
  const F dy = data(static_cast<std::int64_t>(x.size()), 1.0f, -10, 10, 8, false);
  expect_lsq_matches(x, dy, s, zp, qmin, qmax, 0.001f);
}

// Per-channel LSQ along the innermost axis runs one element per run, without the vector kernel:
// the same bits as the kernel on each run, added in row order.
BOOST_AUTO_TEST_CASE(lsq_runs_of_one_element_match_the_kernel) {
  const std::int64_t rows = 37, ch = 3, qmin = -8, qmax = 7;
  const float sc[ch] = {0.25f, 0.0173f, 0.5f}, zc[ch] = {0, 3, -2}, gf = 0.3f;
  const F xv = data(rows * ch, 0.3f, qmin, qmax, 11), gv = data(rows * ch, 1.0f, -10, 10, 12, false);
  Tensor x = Tensor::from_vector(xv, Shape{rows, ch}),
         s = Tensor::from_vector(F(sc, sc + ch), Shape{ch}),
         z = Tensor::from_vector(F(zc, zc + ch), Shape{ch});
  for (Tensor* t : {&x, &s, &z}) t->requires_grad_(true);
  fake_quantize_learnable_per_channel_affine(x, s, z, 1, qmin, qmax, gf)
      .backward(Tensor::from_vector(gv, Shape{rows, ch}));
  F dx_ref(rows * ch);
  for (std::int64_t p = 0; p < ch; ++p) {
    double ds = 0, dz = 0;
    for (std::int64_t r = 0; r < rows; ++r) {
      const std::int64_t i = r * ch + p;
      k::lsq_backward(&xv[i], &gv[i], &dx_ref[i], 1, sc[p], zc[p], qmin, qmax, gf, &ds, &dz);
    }
    BOOST_TEST_CONTEXT("channel " << p) {
      BOOST_TEST(s.grad().data<float>()[p] == static_cast<float>(ds));
      BOOST_TEST(z.grad().data<float>()[p] == static_cast<float>(dz));
    }
  }
  expect_bits(x.grad().to_vector<float>(), dx_ref, "dx");
}

// The kernel skips the clamp of q where round(c / s) cannot leave [qmin, qmax] (the symmetric
// grids); the last two grids keep it (their qmin lies above round(lo_x / s)).
BOOST_AUTO_TEST_CASE(amax_matches_reference) {
  const struct {
    bool is_signed;
    std::int64_t qmin, qmax;
    float amax;
  } cases[] = {{true, -127, 127, 2.5f}, {false, 0, 255, 2.5f},    {true, -128, 127, 0.3737f},
               {true, -8, 7, 1.0e-3f},  {false, 0, 15, 77.7f},    {true, -32768, 32767, 3.1f},
               {true, -100, 127, 2.5f}, {false, 10, 255, 0.3737f}};
  for (const auto& [is_signed, qmin, qmax, amax] : cases)
    for (std::int64_t n : kSizes) {
      const F x =
          data(n, amax / static_cast<float>(qmax), -static_cast<std::int64_t>(qmax), qmax, 3 + n);
      const F dy = data(n, 1.0f, -10, 10, 5 + n, false);
      // reference: amax_run of learnable.cpp, written out
      const float scale = amax / static_cast<float>(qmax), inv = 1.0f / scale;
      const float lo_x = is_signed ? -amax : 0.0f, lo = static_cast<float>(qmin),
                  hi = static_cast<float>(qmax);
      F yref(n), dref(n), terms(n);
      U8 mref(n);
      for (std::int64_t i = 0; i < n; ++i) {
        const float v = x[i];
        mref[i] = static_cast<std::uint8_t>((!(v >= lo_x && v <= amax)) | ((v >= amax) << 1) |
                                            ((is_signed && v <= lo_x) << 2));
        float c = v > lo_x ? v : lo_x;
        c = c < amax ? c : amax;
        const float q = std::nearbyint(c * inv), qc = q > lo ? q : lo;
        yref[i] = (qc < hi ? qc : hi) * scale;
        dref[i] = (mref[i] & 1) ? 0.0f : dy[i];
        terms[i] = (mref[i] & 2) ? dy[i] : (mref[i] & 4) ? -dy[i] : 0.0f;
      }
      const double da_ref = chunk256(terms);
      // (copies of the bindings: clang 14 captures no structured binding)
      for_each_isa([&, is_signed = is_signed, qmin = qmin, qmax = qmax, amax = amax](cpu::Isa) {
        BOOST_TEST_CONTEXT("signed " << is_signed << " [" << qmin << ", " << qmax << "] amax " << amax
                                     << " n " << n) {
          F y(n), dx(n);
          U8 m(n);
          k::amax_forward(x.data(), y.data(), m.data(), n, amax, is_signed, qmin, qmax);
          expect_bits(y, yref, "amax y");
          BOOST_TEST(m == mref, boost::test_tools::per_element());
          const double da = k::amax_backward(dy.data(), m.data(), dx.data(), n);
          expect_bits(dx, dref, "amax dx");
          BOOST_TEST(da == da_ref);
        }
      });
    }
}

BOOST_AUTO_TEST_CASE(fp8_matches_reference) {
  for (Format f : {Format::FP8_E4M3, Format::FP8_E5M2})
    for (std::int64_t n : kSizes) {
      const bool e4 = f == Format::FP8_E4M3;
      const float max = e4 ? 448.0f : 57344.0f, scale = 0.37f;
      F x = data(n, max * scale / 200.0f, -300, 300, 9 + n);
      // exact FP8 values and ties between neighbours (1 + 1/16 is a tie for E4M3), subnormals
      const float extra[] = {1.0625f,
                             1.125f,
                             0.0f,
                             std::ldexp(1.0f, -9),
                             3 * std::ldexp(1.0f, -11),
                             1e-30f,
                             max,
                             max * 1.01f,
                             500.0f,
                             -464.0f,
                             61440.0f};
      for (std::int64_t i = 0; i < n; i += 3) x[i] = extra[(i / 3) % 11] * (i % 2 ? -scale : scale);
      F yref(n);
      U8 mref(n);
      for (std::int64_t i = 0; i < n; ++i) {
        const float v = x[i] / scale;
        mref[i] = std::fabs(v) <= max;
        yref[i] = round_to_fp8(v, f) * scale;
      }
      for_each_isa([&](cpu::Isa) {
        BOOST_TEST_CONTEXT((e4 ? "e4m3" : "e5m2") << " n " << n) {
          F y(n);
          U8 m(n);
          k::fp8_fake_quant(x.data(), y.data(), m.data(), n, scale, e4 ? 3 : 2, e4 ? -6 : -14, max);
          expect_bits(y, yref, "fp8 y");
          BOOST_TEST(m == mref, boost::test_tools::per_element());
        }
      });
    }
}

BOOST_AUTO_TEST_CASE(min_max_matches_reference) {
  for (std::int64_t n : kSizes)
    for (int special = 0; special < 12; ++special) {
      F x = data(n, 0.1f, -100, 100, 21 + n, false);
      if (special == 1) x[n / 2] = kNaN;
      if (special == 2) x[n - 1] = kInf;
      if (special == 3) x[0] = -kInf;
      // a NaN with its sign bit set (the integer-order scan's low end), and one in the tail
      if (special == 10) x[0] = -kNaN;
      if (special == 11) x[n - 1] = kNaN;
      // signed zeros at the minimum (4, 6, 8) or maximum (5, 7, 9): -0 counts below +0.
      // 4, 5: both signs; 6, 7: the one sign that is not the extreme (a ReLU's +0 minimum);
      // 8, 9: the extreme's sign only at the last element (the scalar tail where there is one)
      const bool at_min = special % 2 == 0;
      for (std::int64_t i = 0; special >= 4 && special <= 9 && i < n; ++i) {
        x[i] = at_min ? std::fabs(x[i]) : -std::fabs(x[i]);
        const float other = at_min ? 0.0f : -0.0f, extreme = at_min ? -0.0f : 0.0f;
        if (special <= 5 && i % 5 == 1) x[i] = (i / 5) % 2 ? 0.0f : -0.0f;
        if (special >= 6 && i % 5 == 1) x[i] = other;
        if (special >= 8 && i == n - 1) x[i] = extreme;
      }
      float mn_ref = kInf, mx_ref = -kInf;
      for (float v : x) {
        if (v < mn_ref || (v == 0 && mn_ref == 0 && std::signbit(v))) mn_ref = v;
        if (v > mx_ref || (v == 0 && mx_ref == 0 && !std::signbit(v))) mx_ref = v;
      }
      for_each_isa([&](cpu::Isa) {
        BOOST_TEST_CONTEXT("n " << n << " special " << special) {
          float mn, mx;
          bool bad = false;
          k::min_max(x.data(), n, &mn, &mx, &bad);
          BOOST_TEST(mn == mn_ref);
          BOOST_TEST(mx == mx_ref);
          BOOST_TEST(std::signbit(mn) == std::signbit(mn_ref));
          BOOST_TEST(std::signbit(mx) == std::signbit(mx_ref));
          const bool nonfinite = (special >= 1 && special <= 3) || special >= 10;
          BOOST_TEST(bad == nonfinite);
          // column-wise: [rows, cols] with cols = n, 3 rows
          const std::int64_t rows = 3;
          F xr(rows * n);
          for (std::int64_t r = 0; r < rows; ++r)
            for (std::int64_t c = 0; c < n; ++c)
              xr[r * n + c] = x[c] * static_cast<float>(r + 1) - static_cast<float>(r);
          F cmin(n, kInf), cmax(n, -kInf);
          bool bad2 = false;
          k::min_max_rows(xr.data(), rows, n, cmin.data(), cmax.data(), &bad2);
          BOOST_TEST(bad2 == nonfinite);
          for (std::int64_t c = 0; c < n; ++c) {
            float a = kInf, b = -kInf;
            for (std::int64_t r = 0; r < rows; ++r) {
              const float v = xr[r * n + c];
              if (v < a) a = v;
              if (v > b) b = v;
            }
            BOOST_TEST(cmin[c] == a);
            BOOST_TEST(cmax[c] == b);
          }
          // run-wise: 3 runs of n, x then its negation then x again (signs of zeros swapped)
          F xs(rows * n);
          for (std::int64_t r = 0; r < rows; ++r)
            for (std::int64_t c = 0; c < n; ++c) xs[r * n + c] = r == 1 ? -x[c] : x[c];
          F rmin(rows), rmax(rows);
          bool bad3 = false;
          k::min_max_runs(xs.data(), rows, n, rmin.data(), rmax.data(), &bad3);
          BOOST_TEST(bad3 == nonfinite);
          for (std::int64_t r = 0; r < rows && !bad3; ++r) {
            float a, b;
            bool unused = false;
            k::min_max(xs.data() + r * n, n, &a, &b, &unused);
            BOOST_TEST(rmin[r] == a);
            BOOST_TEST(rmax[r] == b);
            BOOST_TEST(std::signbit(rmin[r]) == std::signbit(a));
            BOOST_TEST(std::signbit(rmax[r]) == std::signbit(b));
          }
          BOOST_TEST((bad3 || (rmin[0] == mn_ref && std::signbit(rmin[0]) == std::signbit(mn_ref))));
        }
      });
    }
}

// ---- the ops on the layouts that pick different kernels -----------------------------------

BOOST_AUTO_TEST_CASE(observer_per_channel_layouts) {
  // [N, C] axis 1 (rows kernel), [C, K] axis 0 (runs), [N, C, H, W] axis 1 with H W = 49 (runs)
  // and 4 (rows): per-channel min / max against a plain loop, on every path
  struct Case {
    Shape shape;
    int axis;
  };
  const Case cases[] = {
      {Shape{33, 7}, 1}, {Shape{7, 33}, 0}, {Shape{3, 5, 7, 7}, 1}, {Shape{3, 5, 2, 2}, 1}};
  for (const Case& c : cases) {
    const std::int64_t numel = c.shape.numel(), channels = c.shape[c.axis];
    const F v = data(numel, 0.1f, -100, 100, static_cast<std::uint32_t>(numel), false);
    const Tensor x = Tensor::from_vector<float>(v, c.shape);
    std::int64_t inner = 1;
    for (int d = c.axis + 1; d < c.shape.rank(); ++d) inner *= c.shape[d];
    F mn(channels, kInf), mx(channels, -kInf);
    for (std::int64_t i = 0; i < numel; ++i) {
      const std::int64_t ch = (i / inner) % channels;
      mn[ch] = std::min(mn[ch], v[i]);
      mx[ch] = std::max(mx[ch], v[i]);
    }
    for_each_isa([&](cpu::Isa) {
      BOOST_TEST_CONTEXT("shape " << c.shape << " axis " << c.axis) {
        PerChannelMinMaxObserver obs(QuantSpec::weight_per_channel(8, c.axis), channels);
        obs.forward(x);
        BOOST_TEST(obs.min_val().to_vector<float>() == mn, boost::test_tools::per_element());
        BOOST_TEST(obs.max_val().to_vector<float>() == mx, boost::test_tools::per_element());
        F bad = v;
        bad[numel / 2] = kNaN;
        PerChannelMinMaxObserver obs2(QuantSpec::weight_per_channel(8, c.axis), channels);
        BOOST_CHECK_THROW(obs2.forward(Tensor::from_vector<float>(bad, c.shape)), Error);
      }
    });
  }
}

BOOST_AUTO_TEST_CASE(fake_quantize_per_channel_layouts) {
  // float32 against the float64 path of the same op: both give the float32 grid values for
  // these inputs (power-of-two scales, so x / s is exact in both)
  struct Case {
    Shape shape;
    int axis;
  };
  const Case cases[] = {
      {Shape{33, 7}, 1}, {Shape{7, 33}, 0}, {Shape{3, 5, 7, 7}, 1}, {Shape{3, 5, 2, 2}, 1}};
  for (const Case& c : cases) {
    const std::int64_t numel = c.shape.numel(), channels = c.shape[c.axis];
    const F v = data(numel, 0.125f, -128, 127, static_cast<std::uint32_t>(numel) + 5);
    F s(channels);
    std::vector<std::int32_t> z(channels);
    for (std::int64_t ch = 0; ch < channels; ++ch) {
      s[ch] = std::ldexp(1.0f, -static_cast<int>(ch % 5));
      z[ch] = static_cast<std::int32_t>(ch % 3) - 1;
    }
    const Tensor scale = Tensor::from_vector<float>(s, Shape{channels});
    const Tensor zp = Tensor::from_vector<std::int32_t>(z, Shape{channels});
    const Tensor x = Tensor::from_vector<float>(v, c.shape);
    const Tensor ref =
        fake_quantize_per_channel_affine(x.to(DType::Float64), scale, zp, c.axis, -128, 127);
    F first;
    for_each_isa([&](cpu::Isa) {
      BOOST_TEST_CONTEXT("shape " << c.shape << " axis " << c.axis) {
        const Tensor y = fake_quantize_per_channel_affine(x, scale, zp, c.axis, -128, 127);
        expect_exact(y, ref.to(DType::Float32), "per-channel fake quant");
        const F yv = y.to_vector<float>();
        if (first.empty()) first = yv;
        BOOST_TEST(same_bits(yv, first));
      }
    });
  }
}

// LSQ and learnable amax through the ops: per tensor, per channel on axis 0 (runs) and axis 1
// (runs of one element, the scalar loop): the same bits on every path, and gradients within
// float32 rounding of the float64 path
BOOST_AUTO_TEST_CASE(learnable_ops_same_bits_on_every_path) {
  const F v = data(33 * 31, 0.05f, -128, 127, 99, false);  // finite: the gradient sums too
  for (int mode = 0; mode < 4; ++mode) {
    const std::int64_t channels = mode == 1 ? 33 : mode == 2 ? 31 : 1;
    auto run = [&](DType dtype, F& y, F& dx, F& ds, F& dz) {
      Tensor x = Tensor::from_vector<float>(v, Shape{33, 31}).to(dtype);
      Tensor s = Tensor::full(Shape{channels}, 0.05f, DType::Float32);
      Tensor z = Tensor::full(Shape{channels}, 2.0f, DType::Float32);
      x.requires_grad_(true);
      s.requires_grad_(true);
      z.requires_grad_(true);
      Tensor out = mode == 0 ? fake_quantize_learnable_per_tensor_affine(x, s, z, -128, 127, 0.01)
                   : mode == 3
                       ? fake_quantize_learnable_amax(x, s, QuantSpec{})
                       : fake_quantize_learnable_per_channel_affine(x, s, z, mode - 1, -128, 127, 0.01);
      sum(mul(out, x.detach())).backward();
      y = out.to(DType::Float32).to_vector<float>();
      dx = x.grad().to(DType::Float32).to_vector<float>();
      ds = s.grad().to_vector<float>();
      dz = mode == 3 ? F{} : z.grad().to_vector<float>();
    };
    F y64, dx64, ds64, dz64;
    run(DType::Float64, y64, dx64, ds64, dz64);
    F y0, dx0, ds0, dz0;
    for_each_isa([&](cpu::Isa) {
      BOOST_TEST_CONTEXT("mode " << mode) {
        F y, dx, ds, dz;
        run(DType::Float32, y, dx, ds, dz);
        if (y0.empty()) y0 = y, dx0 = dx, ds0 = ds, dz0 = dz;
        BOOST_TEST(same_bits(y, y0));
        BOOST_TEST(same_bits(dx, dx0));
        BOOST_TEST(same_bits(ds, ds0));
        BOOST_TEST(same_bits(dz, dz0));
        for (std::size_t p = 0; p < ds.size(); ++p)
          BOOST_TEST(ds[p] == ds64[p], boost::test_tools::tolerance(1e-4f));
      }
    });
  }
}

BOOST_AUTO_TEST_SUITE_END()
