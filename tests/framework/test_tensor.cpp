#include <boost/test/unit_test.hpp>

#include <cmath>
#include <cstdint>
#include <limits>

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
  BOOST_TEST(t.to_vector<float>() == (std::vector<float>{0, 1, 9, 9, 9, 9}), boost::test_tools::per_element());
  Tensor c = t.clone();
  c.fill_(0);
  BOOST_TEST(t.to_vector<float>()[0] == 0.0f);
  BOOST_TEST(t.to_vector<float>()[2] == 9.0f);
  BOOST_CHECK_THROW(t.rows(2, 4), Error);
  BOOST_CHECK_THROW(t.view_as_shape(Shape{4}), Error);
}

BOOST_AUTO_TEST_CASE(conversion_rounds_half_even_and_saturates) {
  Tensor f = Tensor::from_vector<float>({0.5f, 1.5f, 2.5f, -0.5f, -1.5f, 300.f, -300.f, 126.6f}, Shape{8});
  auto q = f.to(DType::Int8).to_vector<std::int8_t>();
  std::vector<std::int8_t> expect{0, 2, 2, 0, -2, 127, -128, 127};
  BOOST_TEST(q == expect, boost::test_tools::per_element());
  auto u = f.to(DType::UInt8).to_vector<std::uint8_t>();
  std::vector<std::uint8_t> expect_u{0, 2, 2, 0, 0, 255, 0, 127};
  BOOST_TEST(u == expect_u, boost::test_tools::per_element());
  auto back = Tensor::from_vector<std::int8_t>({-128, 5}, Shape{2}).to(DType::Float32).to_vector<float>();
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

// The library's float GEMM against a float64 reference, over edge-heavy shapes, every
// transpose combination and alpha/beta variants (including beta = 0 with NaN in C).
BOOST_AUTO_TEST_CASE(sgemm_matches_reference) {
  Generator gen(5);
  const std::int64_t dims[][3] = {{1, 1, 1},   {7, 5, 3},    {8, 48, 256}, {9, 49, 257},
                                  {64, 256, 784}, {130, 3100, 20}, {33, 17, 600}, {0, 5, 3}, {4, 6, 0}};
  for (auto [M, N, K] : dims)
    for (int t = 0; t < 4; ++t)
      for (auto [alpha, beta] : {std::pair{1.0f, 0.0f}, std::pair{-0.5f, 1.0f}, std::pair{2.0f, 0.25f}}) {
        const bool ta = t & 1, tb = t & 2;
        std::vector<float> A(M * K), B(K * N), C(M * N);
        for (auto& v : A) v = static_cast<float>(gen.uniform() - 0.5);
        for (auto& v : B) v = static_cast<float>(gen.uniform() - 0.5);
        for (auto& v : C) v = beta == 0.0f ? std::nanf("") : static_cast<float>(gen.uniform());
        std::vector<double> ref(M * N);
        for (std::int64_t i = 0; i < M; ++i)
          for (std::int64_t j = 0; j < N; ++j) {
            double s = 0;
            for (std::int64_t k = 0; k < K; ++k)
              s += double(ta ? A[k * M + i] : A[i * K + k]) * double(tb ? B[j * K + k] : B[k * N + j]);
            ref[i * N + j] = alpha * s + (beta == 0.0f ? 0.0 : beta * double(C[i * N + j]));
          }
        detail::gemm<float>(ta, tb, M, N, K, alpha, A.data(), ta ? M : K, B.data(), tb ? K : N, beta,
                            C.data(), N);
        double worst = 0;
        for (std::int64_t i = 0; i < M * N; ++i) worst = std::max(worst, std::abs(C[i] - ref[i]));
        BOOST_TEST(worst < 1e-5 * std::max<std::int64_t>(K, 1), "M " << M << " N " << N << " K " << K
                                                                    << " ta " << ta << " tb " << tb);
      }
}

BOOST_AUTO_TEST_SUITE_END()
