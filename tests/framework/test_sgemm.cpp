// The library's float32 GEMM (framework/kernels/cpu/sgemm.cpp) on every kernel path against a
// float64 reference: every transpose combination, odd sizes around each path's register tile
// and cache blocks, leading dimensions beyond the width, alpha/beta (beta = 0 must not read
// C), the gathered variants, and bit-identical results whatever the thread count.
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "common/isa.h"
#include "framework/tensor/parallel.h"
#include "framework/tensor/random.h"
#include "framework/tensor/sgemm.h"

using namespace qat;
using i64 = std::int64_t;

BOOST_AUTO_TEST_SUITE(sgemm_kernels)

namespace {

std::vector<float> uniform(Generator& gen, i64 n) {
  std::vector<float> v(n);
  for (auto& x : v) x = static_cast<float>(gen.uniform() - 0.5);
  return v;
}

// C (M x ldc) to be overwritten: random, but `sentinel` in the padding columns j >= N (which
// must stay untouched) and everywhere when beta = 0 (C must not be read: NaN would show).
std::vector<float> output_matrix(Generator& gen, i64 M, i64 N, i64 ldc, float beta, float sentinel) {
  std::vector<float> C = uniform(gen, M * ldc);
  for (i64 i = 0; i < M; ++i)
    for (i64 j = 0; j < ldc; ++j)
      if (beta == 0.0f || j >= N) C[i * ldc + j] = sentinel;
  return C;
}

// Reference C = alpha * A B + beta * C in float64 with A(i, k) and B(k, j) given as functions,
// and the bound |alpha| sum_k |A(i,k) B(k,j)| + |beta C(i,j)| for a relative tolerance.
struct Reference {
  std::vector<double> value, scale;
};
template <class FA, class FB>
Reference reference(i64 M, i64 N, i64 K, float alpha, FA a, FB b, float beta,
                    const std::vector<float>& C, i64 ldc) {
  Reference r{std::vector<double>(M * N), std::vector<double>(M * N)};
  for (i64 i = 0; i < M; ++i)
    for (i64 j = 0; j < N; ++j) {
      double s = 0, s_abs = 0;
      for (i64 k = 0; k < K; ++k) {
        const double p = double(a(i, k)) * double(b(k, j));
        s += p;
        s_abs += std::abs(p);
      }
      const double c = beta == 0.0f ? 0.0 : double(beta) * C[i * ldc + j];
      r.value[i * N + j] = alpha * s + c;
      r.scale[i * N + j] = std::abs(alpha) * s_abs + std::abs(c);
    }
  return r;
}

// C (M x N block, leading dimension ldc) matches the reference within (K + 2) float roundings;
// the padding columns past N keep their sentinel.
void check(const std::vector<float>& C, i64 ldc, const Reference& ref, i64 M, i64 N, i64 K,
           float sentinel, const char* what) {
  i64 bad = 0, bad_pad = 0;
  for (i64 i = 0; i < M; ++i) {
    for (i64 j = 0; j < N; ++j) {
      const double err = std::abs(C[i * ldc + j] - ref.value[i * N + j]);
      if (!(err <= 6e-8 * (K + 2) * ref.scale[i * N + j] + 1e-30)) ++bad;
    }
    for (i64 j = N; j < ldc; ++j)
      if (!(C[i * ldc + j] == sentinel || (std::isnan(sentinel) && std::isnan(C[i * ldc + j]))))
        ++bad_pad;
  }
  BOOST_TEST(bad == 0, what << " M " << M << " N " << N << " K " << K << ": " << bad << " wrong");
  BOOST_TEST(bad_pad == 0, what << " M " << M << " N " << N << " K " << K << ": padding written");
}

const float kAlphaBeta[][2] = {{1.0f, 0.0f}, {-0.5f, 1.0f}, {2.0f, 0.25f}, {1.0f, 1.0f}};

// One sgemm call on the current path against the reference.
void check_sgemm(Generator& gen, i64 M, i64 N, i64 K, bool ta, bool tb, i64 extra, float alpha,
                 float beta) {
  const i64 lda = (ta ? M : K) + extra, ldb = (tb ? K : N) + extra, ldc = N + extra;
  const std::vector<float> A = uniform(gen, (ta ? K : M) * lda), B = uniform(gen, (tb ? N : K) * ldb);
  const float sentinel = beta == 0.0f ? std::nanf("") : 7.0f;
  std::vector<float> C = output_matrix(gen, M, N, ldc, beta, sentinel);
  const Reference ref = reference(
      M, N, K, alpha, [&](i64 i, i64 k) { return ta ? A[k * lda + i] : A[i * lda + k]; },
      [&](i64 k, i64 j) { return tb ? B[j * ldb + k] : B[k * ldb + j]; }, beta, C, ldc);
  detail::sgemm(ta, tb, M, N, K, alpha, A.data(), lda, B.data(), ldb, beta, C.data(), ldc);
  check(C, ldc, ref, M, N, K, sentinel,
        ta ? (tb ? "sgemm TT" : "sgemm TN") : (tb ? "sgemm NT" : "sgemm NN"));
}

}  // namespace

// Sizes around every path's tile (4x8 / 6x16 / 8x48) and vector width, all transposes.
BOOST_AUTO_TEST_CASE(sgemm_odd_sizes_every_isa) {
  qat::test::for_each_isa([](cpu::Isa) {
    Generator gen(11);
    const i64 mn[] = {1, 2, 7, 9, 17, 31, 47, 49, 97};
    const i64 ks[] = {1, 9, 49, 257};
    int n = 0;
    for (i64 M : mn)
      for (i64 N : mn)
        for (i64 K : ks) {
          ++n;
          const auto& ab = kAlphaBeta[n % 4];
          check_sgemm(gen, M, N, K, n & 1, n & 2, (n / 4) % 3 == 0 ? 5 : 0, ab[0], ab[1]);
        }
  });
}

// A few rows times a transposed B (a Linear layer on a batch of up to 8: dot products of rows,
// sgemm_dot.cpp): every row count, W rows around each tile width (8, 6, 4, 3 and the 4/2/1
// tails), K around the vector width (masked tails), leading dimensions beyond the width.
BOOST_AUTO_TEST_CASE(sgemm_few_rows_every_isa) {
  qat::test::for_each_isa([](cpu::Isa) {
    Generator gen(17);
    int n = 0;
    for (i64 M = 1; M <= 9; ++M)
      for (i64 N : {1, 2, 3, 5, 6, 7, 8, 9, 13, 17, 70})
        for (i64 K : {1, 3, 8, 9, 15, 16, 17, 63, 784}) {
          ++n;
          const auto& ab = kAlphaBeta[n % 4];
          check_sgemm(gen, M, N, K, false, true, n % 3 == 0 ? 3 : 0, ab[0], ab[1]);
        }
  });
}

// Shapes past the cache blocks (MC, KC, NC), B rows far apart (packed), the training shapes.
BOOST_AUTO_TEST_CASE(sgemm_blocked_shapes_every_isa) {
  qat::test::for_each_isa([](cpu::Isa isa) {
    Generator gen(12);
    struct Dims {
      i64 M, N, K;
    };
    std::vector<Dims> dims{{257, 33, 600}, {64, 256, 784}, {10, 1568, 64},
                           {33, 3100, 70}, {2, 1100, 300}, {130, 49, 513}};
    if (isa == cpu::Isa::Generic) dims.resize(3);  // the portable kernel is slow
    for (const Dims& d : dims)
      for (int t = 0; t < 4; ++t)
        check_sgemm(gen, d.M, d.N, d.K, t & 1, t & 2, t == 3 ? 1 : 0, 1.0f, t == 2 ? 0.5f : 0.0f);
  });
}

BOOST_AUTO_TEST_CASE(sgemm_empty_and_alpha_zero) {
  qat::test::for_each_isa([](cpu::Isa) {
    Generator gen(13);
    check_sgemm(gen, 5, 7, 0, false, false, 0, 1.0f, 0.5f);  // K = 0: C = beta C
    check_sgemm(gen, 5, 7, 0, true, true, 2, 1.0f, 0.0f);    // K = 0, beta = 0: C = 0
    check_sgemm(gen, 9, 17, 8, false, true, 0, 0.0f, 2.0f);  // alpha = 0
    check_sgemm(gen, 3, 17, 8, false, true, 0, 0.0f, 2.0f);  // alpha = 0, few rows
    check_sgemm(gen, 3, 7, 0, false, true, 1, 1.0f, 0.0f);   // K = 0, few rows
    std::vector<float> C{1.0f};
    detail::sgemm(false, false, 0, 1, 3, 1.0f, nullptr, 3, nullptr, 1, 0.0f, C.data(), 1);
    detail::sgemm(false, false, 1, 0, 3, 1.0f, nullptr, 3, nullptr, 1, 0.0f, C.data(), 1);
    BOOST_TEST(C[0] == 1.0f);
  });
}

namespace {
// Offsets of im2col matrices: (oh, ow) positions and (c, i, j) taps of a padded image.
struct Im2col {
  std::vector<i64> tap, pos;
  i64 size;  // elements of the padded image
};
Im2col im2col(i64 C, i64 H, i64 k, i64 pad) {
  const i64 hp = H + 2 * pad, ho = hp - k + 1;
  Im2col r{{}, {}, C * hp * hp};
  for (i64 c = 0; c < C; ++c)
    for (i64 i = 0; i < k; ++i)
      for (i64 j = 0; j < k; ++j) r.tap.push_back((c * hp + i) * hp + j);
  for (i64 oh = 0; oh < ho; ++oh)
    for (i64 ow = 0; ow < ho; ++ow) r.pos.push_back(oh * hp + ow);
  return r;
}
// Row/column offset lists: runs of consecutive offsets shorter than, equal to and longer than
// every vector width, repeats and backwards steps.
std::vector<std::vector<i64>> offset_lists(Generator& gen) {
  std::vector<i64> scrambled, runs, one{3};
  for (int i = 0; i < 37; ++i) scrambled.push_back(static_cast<i64>(gen.below(60)));
  for (i64 n : {1, 3, 4, 5, 8, 9, 16, 17, 31, 48, 49, 2})
    for (i64 i = 0; i < n; ++i) runs.push_back(7 * n + i);
  return {scrambled, runs, one};
}
}  // namespace

// sgemm_gather_a: A(i, k) = a[row[i] + kof[k]], every path, conv shapes and odd offset lists.
BOOST_AUTO_TEST_CASE(sgemm_gather_a_every_isa) {
  qat::test::for_each_isa([](cpu::Isa) {
    Generator gen(14);
    struct Case {
      std::vector<i64> rows, ks;
    };
    std::vector<Case> cases;
    const Im2col c1 = im2col(3, 7, 3, 1), c2 = im2col(2, 14, 5, 2);
    cases.push_back({c1.pos, c1.tap});  // forward: rows = positions, k = taps
    cases.push_back({c1.tap, c1.pos});  // dW: rows = taps, k = positions
    cases.push_back({c2.pos, c2.tap});
    for (const auto& l : offset_lists(gen)) cases.push_back({l, c1.tap}), cases.push_back({c1.tap, l});
    const std::vector<float> a = uniform(gen, 2000);
    int n = 0;
    for (const Case& c : cases)
      for (i64 N : {1, 7, 16, 17, 32, 50})
        for (int tb = 0; tb < 2; ++tb) {
          const auto& ab = kAlphaBeta[n++ % 4];
          const float alpha = ab[0], beta = ab[1];
          const i64 M = std::ssize(c.rows), K = std::ssize(c.ks), ldb = (tb ? K : N) + 1, ldc = N + 2;
          const std::vector<float> B = uniform(gen, (tb ? N : K) * ldb);
          const float sentinel = beta == 0.0f ? std::nanf("") : 7.0f;
          std::vector<float> C = output_matrix(gen, M, N, ldc, beta, sentinel);
          const Reference ref = reference(
              M, N, K, alpha, [&](i64 i, i64 k) { return a[c.rows[i] + c.ks[k]]; },
              [&](i64 k, i64 j) { return tb ? B[j * ldb + k] : B[k * ldb + j]; }, beta, C, ldc);
          detail::sgemm_gather_a(M, N, K, alpha, a.data(), c.rows.data(), c.ks.data(), tb, B.data(), ldb,
                                 beta, C.data(), ldc);
          check(C, ldc, ref, M, N, K, sentinel, tb ? "gather_a NT" : "gather_a NN");
        }
  });
}

// sgemm_gather_b: B(k, j) = b[kof[k] + col[j]]; runs of consecutive column offsets are loaded
// as vectors.
BOOST_AUTO_TEST_CASE(sgemm_gather_b_every_isa) {
  qat::test::for_each_isa([](cpu::Isa) {
    Generator gen(15);
    struct Case {
      std::vector<i64> ks, cols;
    };
    std::vector<Case> cases;
    const Im2col c1 = im2col(3, 7, 3, 1), c2 = im2col(1, 28, 5, 2), c3 = im2col(2, 14, 5, 2);
    cases.push_back({c1.tap, c1.pos});  // forward: y = W col
    cases.push_back({c2.tap, c2.pos});  // runs of 28
    cases.push_back({c3.tap, c3.pos});  // runs of 14
    for (const auto& l : offset_lists(gen)) cases.push_back({c1.tap, l}), cases.push_back({l, c1.pos});
    const std::vector<float> b = uniform(gen, 2000);
    int n = 0;
    for (const Case& c : cases)
      for (i64 M : {1, 5, 8, 9, 16, 20})
        for (int ta = 0; ta < 2; ++ta) {
          const auto& ab = kAlphaBeta[n++ % 4];
          const float alpha = ab[0], beta = ab[1];
          const i64 K = std::ssize(c.ks), N = std::ssize(c.cols), lda = (ta ? M : K) + 2, ldc = N + 3;
          const std::vector<float> A = uniform(gen, (ta ? K : M) * lda);
          const float sentinel = beta == 0.0f ? std::nanf("") : 7.0f;
          std::vector<float> C = output_matrix(gen, M, N, ldc, beta, sentinel);
          const Reference ref = reference(
              M, N, K, alpha, [&](i64 i, i64 k) { return ta ? A[k * lda + i] : A[i * lda + k]; },
              [&](i64 k, i64 j) { return b[c.ks[k] + c.cols[j]]; }, beta, C, ldc);
          detail::sgemm_gather_b(ta, M, N, K, alpha, A.data(), lda, b.data(), c.ks.data(), c.cols.data(),
                                 beta, C.data(), ldc);
          check(C, ldc, ref, M, N, K, sentinel, ta ? "gather_b TN" : "gather_b NN");
        }
  });
}

// Each element of C is summed in the same order whatever the thread count: 1, 2 and 3 threads
// give bit-identical results (shapes big enough for the parallel path).
BOOST_AUTO_TEST_CASE(sgemm_bit_identical_across_thread_counts) {
  const int threads_before = get_num_threads();
  qat::test::for_each_isa([](cpu::Isa isa) {
    if (isa == cpu::Isa::Generic) return;  // the same driver; the portable kernel is slow
    Generator gen(16);
    const Im2col conv = im2col(16, 14, 5, 2);
    const i64 P = std::ssize(conv.pos), KK = std::ssize(conv.tap);
    const std::vector<float> x = uniform(gen, conv.size), W = uniform(gen, 32 * KK),
                             D = uniform(gen, 32 * P);
    const std::vector<float> A = uniform(gen, 300 * 700), B = uniform(gen, 700 * 260);
    auto run_all = [&] {
      std::vector<std::vector<float>> out;
      for (int t = 0; t < 4; ++t) {  // 300 x 260 x 700, every transpose
        const bool ta = t & 1, tb = t & 2;
        std::vector<float> C(300 * 260, 1.0f);
        detail::sgemm(ta, tb, 300, 260, 700, 1.5f, A.data(), ta ? 300 : 700, B.data(), tb ? 700 : 260,
                      0.5f, C.data(), 260);
        out.push_back(C);
      }
      std::vector<float> C0(8 * 260, 1.0f);  // a few rows: dot products, W rows on threads
      detail::sgemm(false, true, 8, 260, 700, 1.0f, A.data(), 700, B.data(), 700, 0.5f, C0.data(), 260);
      out.push_back(C0);
      std::vector<float> C1(P * 32), C2(KK * 32), C3(32 * P);
      detail::sgemm_gather_a(P, 32, KK, 1.0f, x.data(), conv.pos.data(), conv.tap.data(), true, W.data(),
                             KK, 0.0f, C1.data(), 32);
      detail::sgemm_gather_a(KK, 32, P, 1.0f, x.data(), conv.tap.data(), conv.pos.data(), true, D.data(),
                             P, 0.0f, C2.data(), 32);
      detail::sgemm_gather_b(false, 32, P, KK, 1.0f, W.data(), KK, x.data(), conv.tap.data(),
                             conv.pos.data(), 0.0f, C3.data(), P);
      out.push_back(C1), out.push_back(C2), out.push_back(C3);
      return out;
    };
    set_num_threads(1);
    const auto one = run_all();
    for (int threads : {2, 3}) {
      set_num_threads(threads);
      const auto many = run_all();
      for (std::size_t i = 0; i < one.size(); ++i)
        BOOST_TEST(std::memcmp(one[i].data(), many[i].data(), one[i].size() * sizeof(float)) == 0,
                   "call " << i << " differs with " << threads << " threads");
    }
  });
  set_num_threads(threads_before);
}

BOOST_AUTO_TEST_SUITE_END()
