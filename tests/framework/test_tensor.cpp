#include <boost/test/unit_test.hpp>
#include <cmath>
#include <cstdint>
#include <limits>

#include "common/isa.h"
#include "framework/tensor/cpu.h"
#include "framework/tensor/kernels.h"
#include "framework/tensor/random.h"
#include "framework/tensor/storage.h"
#include "framework/tensor/tensor.h"

using namespace qat;

BOOST_AUTO_TEST_SUITE(tensor)

BOOST_AUTO_TEST_CASE(shape_basics_and_errors) {
  Shape s{2, 3, 4};
  BOOST_TEST(s.rank() == 3);
  BOOST_TEST(s.numel() == 24);
  BOOST_TEST(s.at(-1) == 4);
  BOOST_TEST(s.str() == "[2, 3, 4]");
  BOOST_TEST(Shape{}.numel() == 1);
  BOOST_CHECK_THROW(s.at(3), Error);
  BOOST_CHECK_THROW((Shape{2, -1}), Error);
  BOOST_TEST(broadcast_shapes(Shape{4, 1, 3}, Shape{5, 1}, "t") == (Shape{4, 5, 3}));
  try {
    broadcast_shapes(Shape{2, 3}, Shape{4}, "myop");
    BOOST_FAIL("expected an error");
  } catch (const Error& e) {
    BOOST_TEST(std::string(e.what()) == "myop: shapes [2, 3] and [4] cannot be broadcast together");
  }
}

BOOST_AUTO_TEST_CASE(size_classes_bound_slack) {
  BOOST_TEST(CachingAllocator::size_class(1) == 64u);
  BOOST_TEST(CachingAllocator::size_class(64) == 64u);
  BOOST_TEST(CachingAllocator::size_class(65) == 128u);
  BOOST_TEST(CachingAllocator::size_class(4096) == 4096u);
  BOOST_TEST(CachingAllocator::size_class(4097) == 5120u);
  for (std::size_t n = 1; n < (1u << 20); n = n * 3 + 1) {
    const std::size_t c = CachingAllocator::size_class(n);
    BOOST_TEST(c >= n);
    BOOST_TEST(c <= n + n / 4 + 64);
    BOOST_TEST(c % 64 == 0u);
  }
}

BOOST_AUTO_TEST_CASE(pool_reuses_buffers) {
  auto& pool = CachingAllocator::cpu();
  { Tensor warm = Tensor::empty(Shape{1000, 37}); }
  const auto before = pool.stats();
  for (int i = 0; i < 10; ++i) {
    Tensor t = Tensor::empty(Shape{1000, 37});
    BOOST_TEST(reinterpret_cast<std::uintptr_t>(t.raw_data()) % 64 == 0u);
  }
  const auto after = pool.stats();
  BOOST_TEST(after.fresh_allocations == before.fresh_allocations);
  BOOST_TEST(after.reused_allocations == before.reused_allocations + 10);
}

BOOST_AUTO_TEST_CASE(creation_and_access) {
  Tensor z = Tensor::zeros(Shape{2, 3});
  BOOST_TEST(z.numel() == 6);
  BOOST_TEST(z.dtype() == DType::Float32);
  for (float v : z.to_vector<float>()) BOOST_TEST(v == 0.0f);
  Tensor f = Tensor::full(Shape{4}, 2.5, DType::Float64);
  BOOST_TEST(f.to_vector<double>() == std::vector<double>(4, 2.5), boost::test_tools::per_element());
  Tensor s = Tensor::scalar(7.0);
  BOOST_TEST(s.dim() == 0);
  BOOST_TEST(s.item() == 7.0);
  Tensor v = Tensor::from_vector<std::int32_t>({1, 2, 3, 4, 5, 6}, Shape{3, 2});
  BOOST_TEST(v.dtype() == DType::Int32);
  BOOST_CHECK_THROW(v.data<float>(), Error);
  BOOST_CHECK_THROW(Tensor::from_vector<float>({1, 2}, Shape{3}), Error);
  BOOST_CHECK_THROW(v.item(), Error);
  BOOST_CHECK_THROW(Tensor().shape(), Error);
}

BOOST_AUTO_TEST_CASE(views_share_storage) {
  Tensor t = Tensor::from_vector<float>({0, 1, 2, 3, 4, 5}, Shape{3, 2});
  Tensor r = t.rows(1, 3);
  BOOST_TEST(r.shape() == (Shape{2, 2}));
  BOOST_TEST(r.to_vector<float>() == (std::vector<float>{2, 3, 4, 5}), boost::test_tools::per_element());
  r.fill_(9);
  BOOST_TEST(t.to_vector<float>() == (std::vector<float>{0, 1, 9, 9, 9, 9}),
             boost::test_tools::per_element());
  Tensor c = t.clone();
  c.fill_(0);
  BOOST_TEST(t.to_vector<float>()[0] == 0.0f);
  BOOST_TEST(t.to_vector<float>()[2] == 9.0f);
  BOOST_CHECK_THROW(t.rows(2, 4), Error);
  BOOST_CHECK_THROW(t.view_as_shape(Shape{4}), Error);
}

BOOST_AUTO_TEST_CASE(conversion_rounds_half_even_and_saturates) {
  Tensor f =
      Tensor::from_vector<float>({0.5f, 1.5f, 2.5f, -0.5f, -1.5f, 300.f, -300.f, 126.6f}, Shape{8});
  auto q = f.to(DType::Int8).to_vector<std::int8_t>();
  std::vector<std::int8_t> expect{0, 2, 2, 0, -2, 127, -128, 127};
  BOOST_TEST(q == expect, boost::test_tools::per_element());
  auto u = f.to(DType::UInt8).to_vector<std::uint8_t>();
  std::vector<std::uint8_t> expect_u{0, 2, 2, 0, 0, 255, 0, 127};
  BOOST_TEST(u == expect_u, boost::test_tools::per_element());
  auto back =
      Tensor::from_vector<std::int8_t>({-128, 5}, Shape{2}).to(DType::Float32).to_vector<float>();
  BOOST_TEST(back[0] == -128.0f);
  BOOST_TEST(back[1] == 5.0f);
}

BOOST_AUTO_TEST_CASE(generator_is_deterministic_and_restorable) {
  Generator a(42), b(42), c(43);
  for (int i = 0; i < 100; ++i) BOOST_TEST(a.next_u64() == b.next_u64());
  BOOST_TEST(Generator(42).next_u64() != c.next_u64());
  Generator g(7);
  g.normal();
  const auto st = g.state();
  const double n1 = g.normal(), u1 = g.uniform();
  g.set_state(st);
  BOOST_TEST(g.normal() == n1);
  BOOST_TEST(g.uniform() == u1);
  double sum = 0, sq = 0;
  const int n = 200000;
  for (int i = 0; i < n; ++i) {
    const double x = g.normal();
    sum += x;
    sq += x * x;
  }
  BOOST_TEST(std::abs(sum / n) < 0.01);
  BOOST_TEST(std::abs(sq / n - 1.0) < 0.02);
  std::vector<int> counts(7, 0);
  for (int i = 0; i < 70000; ++i) ++counts[g.below(7)];
  for (int c7 : counts) BOOST_TEST(std::abs(c7 - 10000) < 500);
}

BOOST_AUTO_TEST_SUITE_END()

#include "framework/tensor/blas.h"
#include "framework/tensor/sgemm.h"

BOOST_AUTO_TEST_SUITE(gemm)

namespace {
// C = alpha * A B + beta * C in float64, A (M, K) and B (K, N) given elementwise.
template <class FA, class FB>
std::vector<double> reference_gemm(std::int64_t M, std::int64_t N, std::int64_t K, float alpha, FA a,
                                   FB b, float beta, const std::vector<float>& C, std::int64_t ldc) {
  std::vector<double> ref(M * N);
  for (std::int64_t i = 0; i < M; ++i)
    for (std::int64_t j = 0; j < N; ++j) {
      double s = 0;
      for (std::int64_t k = 0; k < K; ++k) s += double(a(i, k)) * double(b(k, j));
      ref[i * N + j] = alpha * s + (beta == 0.0f ? 0.0 : beta * double(C[i * ldc + j]));
    }
  return ref;
}

// Worst |C - ref| over the M x N block of C (leading dimension ldc).
double worst_error(const std::vector<float>& C, std::int64_t ldc, const std::vector<double>& ref,
                   std::int64_t M, std::int64_t N) {
  double worst = 0;
  for (std::int64_t i = 0; i < M; ++i)
    for (std::int64_t j = 0; j < N; ++j)
      worst = std::max(worst, std::abs(C[i * ldc + j] - ref[i * N + j]));
  return worst;
}

std::vector<float> uniform_values(Generator& gen, std::int64_t n, double lo, double hi) {
  std::vector<float> v(n);
  for (auto& x : v) x = static_cast<float>(lo + (hi - lo) * gen.uniform());
  return v;
}

const std::pair<float, float> kAlphaBeta[] = {{1.0f, 0.0f}, {-0.5f, 1.0f}, {2.0f, 0.25f}};
}  // namespace

// The library's float GEMM against a float64 reference, over edge-heavy shapes, every
// transpose combination, leading dimensions equal to and larger than the rows, and alpha/beta
// variants (including beta = 0 with NaN in C, which must not be read).
BOOST_AUTO_TEST_CASE(sgemm_matches_reference) {
  Generator gen(5);
  const std::int64_t dims[][3] = {{1, 1, 1},      {7, 5, 3},       {8, 48, 256},  {9, 49, 257},
                                  {64, 256, 784}, {130, 3100, 20}, {33, 17, 600}, {0, 5, 3},
                                  {4, 6, 0},      {400, 32, 196},  {25, 16, 784}, {16, 196, 400},
                                  {9, 1100, 100}};
  for (auto [M, N, K] : dims)
    for (int t = 0; t < 8; ++t)
      for (auto [alpha, beta] : kAlphaBeta) {
        const bool ta = t & 1, tb = t & 2, padded = t & 4;
        const std::int64_t extra = padded ? 3 : 0;  // leading dimensions beyond the rows
        const std::int64_t lda = (ta ? M : K) + extra, ldb = (tb ? K : N) + extra, ldc = N + extra;
        const std::vector<float> A = uniform_values(gen, (ta ? K : M) * lda, -0.5, 0.5);
        const std::vector<float> B = uniform_values(gen, (tb ? N : K) * ldb, -0.5, 0.5);
        std::vector<float> C = uniform_values(gen, M * ldc, 0, 1);
        if (beta == 0.0f) std::fill(C.begin(), C.end(), std::nanf(""));
        const auto ref = reference_gemm(
            M, N, K, alpha, [&](auto i, auto k) { return ta ? A[k * lda + i] : A[i * lda + k]; },
            [&](auto k, auto j) { return tb ? B[j * ldb + k] : B[k * ldb + j]; }, beta, C, ldc);
        detail::gemm<float>(ta, tb, M, N, K, alpha, A.data(), lda, B.data(), ldb, beta, C.data(), ldc);
        BOOST_TEST(
            worst_error(C, ldc, ref, M, N) < 1e-5 * std::max<std::int64_t>(K, 1),
            "M " << M << " N " << N << " K " << K << " ta " << ta << " tb " << tb << " ld+" << extra);
      }
}

// Offsets of an im2col matrix: a 3-channel (5 + 2*2)-square padded image with a 3x3 kernel,
// positions 5x5 (tap + pos), and scrambled offsets that repeat and go backwards.
struct GatherShape {
  std::vector<std::int64_t> rows, ks;
};
std::vector<GatherShape> gather_shapes(Generator& gen) {
  std::vector<std::int64_t> taps, pos, scrambled, one{7};
  for (std::int64_t c = 0; c < 3; ++c)
    for (std::int64_t i = 0; i < 3; ++i)
      for (std::int64_t j = 0; j < 3; ++j) taps.push_back((c * 9 + i) * 9 + j);
  for (std::int64_t oh = 0; oh < 5; ++oh)
    for (std::int64_t ow = 0; ow < 5; ++ow) pos.push_back(oh * 9 + ow);
  for (int i = 0; i < 37; ++i) scrambled.push_back(static_cast<std::int64_t>(gen.below(40)));
  std::vector<std::int64_t> long_runs;  // runs of 20 and 3 consecutive offsets, then 40
  for (std::int64_t i = 0; i < 20; ++i) long_runs.push_back(100 + i);
  for (std::int64_t i = 0; i < 3; ++i) long_runs.push_back(200 + i);
  for (std::int64_t i = 0; i < 40; ++i) long_runs.push_back(300 + i);
  return {{pos, taps},      {taps, pos},      {scrambled, taps}, {one, pos},
          {long_runs, one}, {one, long_runs}, {taps, scrambled}};
}

// sgemm_gather_a: A(i, k) = a[row[i] + kof[k]], read inside the kernel.
BOOST_AUTO_TEST_CASE(sgemm_gather_a_matches_reference) {
  if (!detail::sgemm_available()) return;
  Generator gen(6);
  const std::vector<float> a = uniform_values(gen, 400, -0.5, 0.5);
  for (const GatherShape& shape : gather_shapes(gen))
    for (std::int64_t N : {1, 16, 32, 33, 50})
      for (int tb = 0; tb < 2; ++tb)
        for (auto [alpha, beta] : kAlphaBeta) {
          const std::int64_t M = std::ssize(shape.rows), K = std::ssize(shape.ks),
                             ldb = (tb ? K : N) + 1;
          const std::vector<float> B = uniform_values(gen, (tb ? N : K) * ldb, -0.5, 0.5);
          std::vector<float> C = uniform_values(gen, M * N, 0, 1);
          if (beta == 0.0f) std::fill(C.begin(), C.end(), std::nanf(""));
          const auto ref = reference_gemm(
              M, N, K, alpha, [&](auto i, auto k) { return a[shape.rows[i] + shape.ks[k]]; },
              [&](auto k, auto j) { return tb ? B[j * ldb + k] : B[k * ldb + j]; }, beta, C, N);
          detail::sgemm_gather_a(M, N, K, alpha, a.data(), shape.rows.data(), shape.ks.data(), tb,
                                 B.data(), ldb, beta, C.data(), N);
          BOOST_TEST(worst_error(C, N, ref, M, N) < 1e-5 * double(K),
                     "M " << M << " N " << N << " K " << K);
        }
}

// sgemm_gather_b: B(k, j) = b[kof[k] + col[j]]; runs of consecutive column offsets are loaded
// as vectors (up to 16), so runs shorter, equal to and longer than a vector all occur.
BOOST_AUTO_TEST_CASE(sgemm_gather_b_matches_reference) {
  if (!detail::sgemm_available()) return;
  Generator gen(7);
  const std::vector<float> b = uniform_values(gen, 400, -0.5, 0.5);
  for (const GatherShape& shape : gather_shapes(gen))
    for (std::int64_t M : {1, 8, 9, 20})
      for (int ta = 0; ta < 2; ++ta)
        for (auto [alpha, beta] : kAlphaBeta) {
          const std::int64_t K = std::ssize(shape.rows), N = std::ssize(shape.ks),
                             lda = (ta ? M : K) + 2;
          const std::vector<float> A = uniform_values(gen, (ta ? K : M) * lda, -0.5, 0.5);
          std::vector<float> C = uniform_values(gen, M * N, 0, 1);
          if (beta == 0.0f) std::fill(C.begin(), C.end(), std::nanf(""));
          const auto ref = reference_gemm(
              M, N, K, alpha, [&](auto i, auto k) { return ta ? A[k * lda + i] : A[i * lda + k]; },
              [&](auto k, auto j) { return b[shape.rows[k] + shape.ks[j]]; }, beta, C, N);
          detail::sgemm_gather_b(ta, M, N, K, alpha, A.data(), lda, b.data(), shape.rows.data(),
                                 shape.ks.data(), beta, C.data(), N);
          BOOST_TEST(worst_error(C, N, ref, M, N) < 1e-5 * double(K),
                     "M " << M << " N " << N << " K " << K);
        }
}

// The float64 fallbacks build the matrix and call BLAS: the same results on the same offsets.
BOOST_AUTO_TEST_CASE(gemm_gather_double_fallback) {
  Generator gen(8);
  std::vector<double> a(400);
  for (auto& x : a) x = gen.uniform() - 0.5;
  const std::vector<std::int64_t> rows{0, 5, 17, 3}, ks{1, 2, 3, 10, 11};
  std::vector<double> B(5 * 3), C(4 * 3), A(3 * 4), C2(3 * 5);
  for (auto& x : B) x = gen.uniform();
  for (auto& x : A) x = gen.uniform();
  detail::gemm_gather_a<double>(4, 3, 5, 1.0, a.data(), rows.data(), ks.data(), false, B.data(), 3, 0.0,
                                C.data(), 3);
  detail::gemm_gather_b<double>(false, 3, 5, 4, 1.0, A.data(), 4, a.data(), rows.data(), ks.data(), 0.0,
                                C2.data(), 5);
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 3; ++j) {
      double s = 0;
      for (int k = 0; k < 5; ++k) s += a[rows[i] + ks[k]] * B[k * 3 + j];
      BOOST_TEST(std::abs(C[i * 3 + j] - s) < 1e-12);
    }
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 5; ++j) {
      double s = 0;
      for (int k = 0; k < 4; ++k) s += A[i * 4 + k] * a[rows[k] + ks[j]];
      BOOST_TEST(std::abs(C2[i * 5 + j] - s) < 1e-12);
    }
}

BOOST_AUTO_TEST_SUITE_END()

// ---- runtime CPU dispatch (framework/tensor/cpu.h) ------------------------------------------

BOOST_AUTO_TEST_SUITE(cpu_dispatch)

BOOST_AUTO_TEST_CASE(isa_names_round_trip_and_bad_names_are_named) {
  for (cpu::Isa i :
       {cpu::Isa::Generic, cpu::Isa::AVX2, cpu::Isa::AVX2_VNNI, cpu::Isa::AVX512, cpu::Isa::AVX512_VNNI})
    BOOST_TEST(static_cast<int>(cpu::parse_isa(cpu::isa_name(i))) == static_cast<int>(i));
  BOOST_TEST(std::string(cpu::isa_name(cpu::Isa::AVX2_VNNI)) == "avx2_vnni");
  BOOST_CHECK_EXCEPTION(cpu::parse_isa("avx9"), Error, [](const Error& e) {
    const std::string m = e.what();
    return m.find("cpu::parse_isa") != std::string::npos && m.find("'avx9'") != std::string::npos;
  });
}

BOOST_AUTO_TEST_CASE(every_supported_path_runs_its_own_kernels) {
  const auto supported = cpu::supported_isas();
  BOOST_TEST_REQUIRE(!supported.empty());
  BOOST_TEST(static_cast<int>(supported.front()) == static_cast<int>(cpu::Isa::Generic));
  BOOST_TEST(static_cast<int>(supported.back()) == static_cast<int>(cpu::best_isa()));
  const cpu::Isa before = cpu::isa();
  for (cpu::Isa i : supported) BOOST_TEST(cpu::supports(i));
  // Generic is Highway's portable target: EMU128, or SCALAR where the compiler breaks EMU128;
  // AVX2_VNNI is the AVX2 target with its int8 GEMM on AVX-VNNI
  const char* expected[] = {"", "AVX2", "AVX2", "AVX3", "AVX3_DL"};
  test::for_each_int8_isa([&](cpu::Isa isa) {
    BOOST_TEST(static_cast<int>(cpu::isa()) == static_cast<int>(isa));
    BOOST_TEST(cpu::int8_avx_vnni() == (isa == cpu::Isa::AVX2_VNNI));
    const std::string target = cpu::kernel_target();
    if (isa == cpu::Isa::Generic)
      BOOST_TEST((target == "EMU128" || target == "SCALAR"), "generic path runs " << target);
    else
      BOOST_TEST(target == expected[static_cast<int>(isa)]);
  });
  BOOST_TEST(static_cast<int>(cpu::isa()) == static_cast<int>(before));  // IsaGuard restored it
}

BOOST_AUTO_TEST_CASE(a_path_the_cpu_lacks_is_refused) {
  for (cpu::Isa i : {cpu::Isa::AVX2, cpu::Isa::AVX2_VNNI, cpu::Isa::AVX512, cpu::Isa::AVX512_VNNI}) {
    if (cpu::supports(i)) continue;
    BOOST_CHECK_EXCEPTION(cpu::set_isa(i), Error, [&](const Error& e) {
      const std::string m = e.what();
      return m.find("cpu::set_isa") != std::string::npos &&
             m.find(std::string("'") + cpu::isa_name(i) + "'") != std::string::npos;
    });
  }
}

BOOST_AUTO_TEST_CASE(kernels_agree_on_every_path) {
  std::vector<float> a(1037), b(1037);
  for (std::size_t i = 0; i < a.size(); ++i) {
    a[i] = static_cast<float>(i % 97) * 0.25f - 7.0f;
    b[i] = static_cast<float>(i % 31) * -0.5f + 3.0f;
  }
  const Shape s{static_cast<std::int64_t>(a.size())};
  const Tensor ta = Tensor::from_vector(a, s), tb = Tensor::from_vector(b, s);
  test::for_each_isa([&](cpu::Isa) {
    const Tensor sum = detail::add(ta, tb);
    for (std::size_t i = 0; i < a.size(); ++i) BOOST_TEST(sum.data<float>()[i] == a[i] + b[i]);
  });
}

BOOST_AUTO_TEST_SUITE_END()
