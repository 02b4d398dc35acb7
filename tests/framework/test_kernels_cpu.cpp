// The runtime-dispatched CPU kernels of framework/kernels/cpu against scalar references, on every
// instruction-set path (for_each_isa) and on odd sizes, so that vector bodies and tails both run.
#include <bit>
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "common/isa.h"
#include "framework/kernels/cpu/elementwise.h"
#include "framework/kernels/cpu/norm.h"
#include "framework/kernels/cpu/optim.h"
#include "framework/kernels/cpu/pool.h"
#include "framework/kernels/cpu/reduce.h"

using namespace qat;
using i64 = std::int64_t;
using qat::test::for_each_isa;

namespace {

const std::vector<i64> kSizes{1, 3, 7, 17, 31, 33, 1000 + 7};

template <class T>
std::vector<T> random_vec(i64 n, std::uint32_t seed, double lo = -2, double hi = 2) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> u(lo, hi);
  std::vector<T> v(n);
  for (auto& x : v) x = static_cast<T>(u(gen));
  return v;
}

// |a - b| <= tol * (1 + |b|)
template <class T>
bool close(T a, T b, double tol) {
  if (std::isnan(b)) return std::isnan(a);
  return std::abs(double(a) - double(b)) <= tol * (1 + std::abs(double(b)));
}

template <class T>
void check_close(const std::vector<T>& got, const std::vector<T>& want, double tol) {
  BOOST_REQUIRE_EQUAL(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i)
    BOOST_TEST_REQUIRE(close(got[i], want[i], tol), "at " << i << ": " << got[i] << " vs " << want[i]);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(kernels_cpu)

BOOST_AUTO_TEST_CASE(elementwise_binary_and_relu) {
  for_each_isa([](cpu::Isa) {
    for (i64 n : kSizes) {
      auto a = random_vec<float>(n, 1), b = random_vec<float>(n, 2);
      b[0] = 0.75f;  // no division by ~0
      for (auto& v : b) v = std::abs(v) < 0.1f ? 0.5f : v;
      a[n / 2] = std::numeric_limits<float>::quiet_NaN();
      using kernels::BinaryOp;
      for (BinaryOp op : {BinaryOp::Add, BinaryOp::Sub, BinaryOp::Mul, BinaryOp::Div})
        for (auto [sa, sb] : {std::pair<i64, i64>{1, 1}, {1, 0}, {0, 1}}) {
          std::vector<float> got(n), want(n);
          kernels::binary(op, a.data(), sa, b.data(), sb, got.data(), n);
          for (i64 i = 0; i < n; ++i) {
            const float x = a[i * sa], y = b[i * sb];
            want[i] = op == BinaryOp::Add   ? x + y
                      : op == BinaryOp::Sub ? x - y
                      : op == BinaryOp::Mul ? x * y
                                            : x / y;
          }
          check_close(got, want, 0);
        }
      std::vector<float> y(n), d(n);
      kernels::relu(a.data(), y.data(), n);
      kernels::relu_backward(b.data(), a.data(), d.data(), n);
      for (i64 i = 0; i < n; ++i) {
        BOOST_TEST_REQUIRE(y[i] == (a[i] > 0 ? a[i] : 0.0f));
        BOOST_TEST_REQUIRE(d[i] == (a[i] > 0 ? b[i] : 0.0f));
      }
      auto ad = random_vec<double>(n, 3), bd = random_vec<double>(n, 4), od(ad);
      kernels::add_inplace(od.data(), bd.data(), n);
      for (i64 i = 0; i < n; ++i) BOOST_TEST_REQUIRE(od[i] == ad[i] + bd[i]);
    }
  });
}

// The data loader's byte -> [0, 1] conversion: every byte value at every position of a vector
// and in the tails, bit for bit the division (byte * (1 / 255.f) differs for 126 of the 256 bytes).
BOOST_AUTO_TEST_CASE(unit_from_bytes_is_the_division) {
  for_each_isa([](cpu::Isa) {
    for (i64 n : {i64{1}, i64{7}, i64{33}, i64{256 * 3 + 5}}) {
      std::vector<std::uint8_t> px(n);
      for (i64 i = 0; i < n; ++i) px[i] = static_cast<std::uint8_t>((i * 37 + n) % 256);
      std::vector<float> got(n, -1.0f);
      kernels::unit_from_bytes(px.data(), got.data(), n);
      for (i64 i = 0; i < n; ++i) {
        const float want = static_cast<float>(px[i]) / 255.0f;
        BOOST_TEST_REQUIRE(std::memcmp(&got[i], &want, 4) == 0, "byte " << int(px[i]) << " at " << i);
      }
    }
  });
}

BOOST_AUTO_TEST_CASE(reduce_sum_and_rows) {
  for_each_isa([](cpu::Isa) {
    for (i64 n : kSizes) {
      const auto x = random_vec<float>(n, 5);
      double ref = 0;
      for (float v : x) ref += v;
      BOOST_TEST(close<double>(kernels::sum(x.data(), n), ref, 1e-5));
      const auto xd = random_vec<double>(n, 6);
      double refd = 0;
      for (double v : xd) refd += v;
      BOOST_TEST(close(kernels::sum(xd.data(), n), refd, 1e-12));
      for (i64 rows : {1, 5}) {
        const auto m = random_vec<float>(rows * n, 7);
        std::vector<float> got(n, 1.0f), want(n, 1.0f);
        kernels::sum_rows(m.data(), rows, n, got.data());
        for (i64 k = 0; k < rows; ++k)
          for (i64 i = 0; i < n; ++i) want[i] += m[k * n + i];
        check_close(got, want, 0);
      }
    }
  });
}

BOOST_AUTO_TEST_CASE(reduce_sum_same_on_every_path) {
  const auto x = random_vec<float>(1000 + 7, 8);
  std::vector<float> sums;
  for_each_isa([&](cpu::Isa) { sums.push_back(kernels::sum(x.data(), static_cast<i64>(x.size()))); });
  for (float s : sums) BOOST_TEST(s == sums.front());
}

// 2x2 max pool of one plane against the scalar rule (v > best or v is NaN, in scan order),
// with ties and NaNs; the backward against its definition.
BOOST_AUTO_TEST_CASE(max_pool_2x2_forward_backward) {
  for_each_isa([](cpu::Isa) {
    for (i64 H : {2, 3, 6}) {
      for (i64 W : {2, 3, 11, 17, 28, 34, 67}) {
        auto x = random_vec<float>(H * W, static_cast<std::uint32_t>(H * 100 + W));
        for (i64 i = 0; i < H * W; i += 5) x[i] = std::round(x[i]);  // ties
        x[(H * W) / 3] = std::numeric_limits<float>::quiet_NaN();
        const i64 Ho = H / 2, Wo = W / 2;
        std::vector<float> out(Ho * Wo);
        std::vector<std::uint8_t> at(Ho * Wo);
        kernels::max_pool_2x2(x.data(), H, W, out.data(), at.data());
        for (i64 oh = 0; oh < Ho; ++oh)
          for (i64 ow = 0; ow < Wo; ++ow) {
            const i64 base = 2 * oh * W + 2 * ow, pos[4] = {base, base + 1, base + W, base + W + 1};
            float best = x[pos[0]];
            int arg = 0;
            for (int k = 1; k < 4; ++k)
              if (x[pos[k]] > best || std::isnan(x[pos[k]])) best = x[pos[k]], arg = k;
            const i64 o = oh * Wo + ow;
            BOOST_TEST_REQUIRE((out[o] == best || (std::isnan(out[o]) && std::isnan(best))),
                               "H " << H << " W " << W << " window " << o);
            BOOST_TEST_REQUIRE(int(at[o]) == arg, "H " << H << " W " << W << " window " << o);
          }
        const auto g = random_vec<float>(Ho * Wo, 9);
        std::vector<float> d(H * W, 42.0f), want(H * W, 42.0f);
        for (i64 oh = 0; oh < Ho; ++oh)
          for (i64 ow = 0; ow < Wo; ++ow) {
            const i64 base = 2 * oh * W + 2 * ow, pos[4] = {base, base + 1, base + W, base + W + 1};
            for (int k = 0; k < 4; ++k) want[pos[k]] = at[oh * Wo + ow] == k ? g[oh * Wo + ow] : 0.0f;
          }
        kernels::max_pool_2x2_backward(g.data(), at.data(), H, W, d.data());
        check_close(d, want, 0);
      }
    }
  });
}

// The fused ReLU + 2x2 max pool against the two kernels one after the other: the same outputs,
// the same argmax where the window's maximum is above 0 and kNowhere elsewhere, and its
// backward = relu's backward of the pool's backward. Windows all negative, all zero (+0 and
// -0), with ties, NaNs (relu maps them to 0) and infinities.
BOOST_AUTO_TEST_CASE(max_pool_2x2_relu_matches_relu_then_pool) {
  for_each_isa([](cpu::Isa) {
    for (i64 H : {2, 3, 6}) {
      for (i64 W : {2, 3, 11, 17, 28, 34, 67}) {
        auto x = random_vec<float>(H * W, static_cast<std::uint32_t>(H * 1000 + W));
        for (i64 i = 0; i < H * W; ++i) {
          if (i % 5 == 0) x[i] = std::round(x[i]);  // ties, zeros
          if (i % 13 == 3) x[i] = i % 2 ? 0.0f : -0.0f;
          if (i % 29 == 7) x[i] = -std::fabs(x[i]);
        }
        x[(H * W) / 3] = std::numeric_limits<float>::quiet_NaN();
        x[(H * W) / 2] = -std::numeric_limits<float>::infinity();
        if (H * W > 8) x[H * W - 2] = std::numeric_limits<float>::infinity();
        for (i64 c = 0; c + 1 < W && H >= 2; c += 6)  // a whole window below or at zero
          x[c] = -1.0f, x[c + 1] = -0.0f, x[W + c] = -2.0f, x[W + c + 1] = 0.0f;
        const i64 Ho = H / 2, Wo = W / 2;
        std::vector<float> r(H * W), out(Ho * Wo), want(Ho * Wo);
        std::vector<std::uint8_t> at(Ho * Wo), arg(Ho * Wo);
        kernels::relu(x.data(), r.data(), H * W);
        kernels::max_pool_2x2(r.data(), H, W, want.data(), arg.data());
        kernels::max_pool_2x2_relu(x.data(), H, W, out.data(), at.data());
        for (i64 o = 0; o < Ho * Wo; ++o) {
          BOOST_TEST_REQUIRE(std::bit_cast<std::uint32_t>(out[o]) == std::bit_cast<std::uint32_t>(want[o]),
                             "H " << H << " W " << W << " window " << o);
          BOOST_TEST_REQUIRE(int(at[o]) == (want[o] > 0 ? int(arg[o]) : int(kernels::kNowhere)),
                             "H " << H << " W " << W << " window " << o);
        }
        const auto g = random_vec<float>(Ho * Wo, 9);
        std::vector<float> d(H * W, 42.0f), dr(H * W, 42.0f), dx(H * W, 42.0f);
        kernels::max_pool_2x2_backward(g.data(), arg.data(), H, W, dr.data());
        kernels::relu_backward(dr.data(), x.data(), dx.data(), H * W);
        for (i64 i = 2 * Ho * W; i < H * W; ++i) dx[i] = 42.0f;  // rows the pool does not cover
        for (i64 h = 0; h < 2 * Ho; ++h)
          for (i64 c = 2 * Wo; c < W; ++c) dx[h * W + c] = 42.0f;
        kernels::max_pool_2x2_backward(g.data(), at.data(), H, W, d.data());
        check_close(d, dx, 0);
      }
    }
  });
}

BOOST_AUTO_TEST_CASE(batch_norm_channel_kernels) {
  for_each_isa([](cpu::Isa) {
    for (i64 S : {1, 3, 17, 33}) {
      const i64 N = 5, C = 3, stride = C * S;
      const auto x = random_vec<float>(N * C * S, 10), g = random_vec<float>(N * C * S, 11);
      for (i64 c = 0; c < C; ++c) {
        double s = 0, sq = 0, sg = 0, sgx = 0;
        const double m = 0.125;
        for (i64 n = 0; n < N; ++n)
          for (i64 i = 0; i < S; ++i) {
            const i64 at = n * stride + c * S + i;
            s += x[at], sq += (x[at] - m) * (x[at] - m), sg += g[at], sgx += g[at] * (x[at] - m);
          }
        const float* xc = x.data() + c * S;
        const float* gc = g.data() + c * S;
        double s1 = 0, s2 = 0;
        kernels::channel_moments(xc, N, S, stride, m, &s1, &s2);
        BOOST_TEST(close(s1, s - double(N * S) * m, 1e-12));
        BOOST_TEST(close(s2, sq, 1e-12));
        double got_sg = 0, got_sgx = 0;
        kernels::channel_grad_sums(gc, xc, N, S, stride, m, &got_sg, &got_sgx);
        BOOST_TEST(close(got_sg, sg, 1e-12));
        BOOST_TEST(close(got_sgx, sgx, 1e-12));
        std::vector<float> y(x.size(), 7.0f), d(x.size(), 7.0f);
        kernels::channel_affine(xc, y.data() + c * S, N, S, stride, 1.5f, -0.25f);
        kernels::channel_backward(gc, xc, d.data() + c * S, N, S, stride, 0.9, 0.1, 0.3, m);
        for (i64 n = 0; n < N; ++n)
          for (i64 i = 0; i < S; ++i) {
            const i64 at = n * stride + c * S + i;
            BOOST_TEST_REQUIRE(close(y[at], x[at] * 1.5f - 0.25f, 1e-6));
            BOOST_TEST_REQUIRE(close(d[at], float(0.9 * (g[at] - 0.1) - 0.3 * (x[at] - m)), 1e-5));
          }
      }
    }
  });
}

BOOST_AUTO_TEST_CASE(optimizer_steps) {
  for_each_isa([](cpu::Isa) {
    for (i64 n : kSizes) {
      const auto g = random_vec<float>(n, 12);
      for (bool decay : {false, true})
        for (bool momentum : {false, true})
          for (bool nesterov : {false, true}) {
            if (nesterov && !momentum) continue;
            for (bool first : {true, false}) {
              auto p = random_vec<float>(n, 13), buf = random_vec<float>(n, 14);
              auto pr = p, br = buf;
              const kernels::SgdScalars<float> s{0.01f, 0.9f, 0.75f, -0.1f, decay, first, nesterov};
              kernels::sgd_step(n, p.data(), g.data(), momentum ? buf.data() : nullptr, s);
              for (i64 i = 0; i < n; ++i) {
                float d = g[i];
                if (decay) d = d + s.wd * pr[i];
                if (momentum) {
                  const float b = first ? d : br[i] * s.momentum + s.keep * d;
                  br[i] = b;
                  d = nesterov ? d + s.momentum * b : b;
                }
                pr[i] = pr[i] + s.neg_lr * d;
              }
              check_close(p, pr, 1e-6);
              if (momentum) check_close(buf, br, 1e-6);
            }
          }
      for (int mode = 0; mode < 3; ++mode)  // Adam, Adam + L2, AdamW
        for (bool ams : {false, true}) {
          auto p = random_vec<float>(n, 15), m = random_vec<float>(n, 16),
               v = random_vec<float>(n, 17, 0, 1), vm = random_vec<float>(n, 18, 0, 1);
          auto pr = p, mr = m, vr = v, vmr = vm;
          const kernels::AdamScalars<float> s{0.9f, 0.999f, 0.1f,   0.001f,    0.01f,    0.999f,
                                              0.3f, 1e-8f,  -0.01f, mode == 1, mode == 2};
          kernels::adam_step(n, p.data(), g.data(), m.data(), v.data(), ams ? vm.data() : nullptr, s);
          for (i64 i = 0; i < n; ++i) {
            float gi = g[i];
            if (s.l2) gi = gi + s.wd * pr[i];
            if (s.decoupled) pr[i] = pr[i] * s.shrink;
            mr[i] = mr[i] * s.b1 + s.one_minus_b1 * gi;
            vr[i] = vr[i] * s.b2 + s.one_minus_b2 * gi * gi;
            float second = vr[i];
            if (ams) second = vmr[i] = std::max(vmr[i], vr[i]);
            pr[i] = pr[i] + s.neg_step_size * mr[i] / (std::sqrt(second) / s.bc2_sqrt + s.eps);
          }
          check_close(p, pr, 1e-6);
          check_close(m, mr, 1e-6);
          check_close(v, vr, 1e-6);
          if (ams) check_close(vm, vmr, 1e-6);
        }
    }
  });
}

BOOST_AUTO_TEST_SUITE_END()
