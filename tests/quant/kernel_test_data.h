#pragma once
// Test data for the quantization kernels (test_quant_kernels.cpp, test_fq_bits.cpp): odd sizes,
// inputs with ties, edges and non-finite values, and bitwise comparison.
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "quant/quant_test_util.h"

namespace qat::test {

using F = std::vector<float>;
using U8 = std::vector<std::uint8_t>;

inline const std::int64_t kSizes[] = {1, 3, 15, 16, 17, 31, 33, 64, 1007};

/// n values: uniform in [-range, range], with ties ((j + 0.5) * scale), edges (qmin|qmax * scale
/// and just beyond), NaN, +-inf, +-0 and 0.49999997 * scale sprinkled in.
inline F data(std::int64_t n, float scale, std::int64_t qmin, std::int64_t qmax, std::uint32_t seed,
              bool specials = true) {
  std::mt19937 gen(seed);
  const float range = static_cast<float>(qmax - qmin) * scale * 0.6f;
  std::uniform_real_distribution<float> u(-range, range);
  std::uniform_int_distribution<int> pick(0, 11),
      tie(static_cast<int>(qmin) - 3, static_cast<int>(qmax) + 3);
  F x(n);
  for (auto& v : x) {
    switch (specials ? pick(gen) : 0) {
      case 1:
        v = (static_cast<float>(tie(gen)) + 0.5f) * scale;
        break;
      case 2:
        v = static_cast<float>(pick(gen) % 2 ? qmin : qmax) * scale;
        break;
      case 3:
        v = std::nextafter(static_cast<float>(pick(gen) % 2 ? qmin : qmax) * scale,
                           pick(gen) % 2 ? kInf : -kInf);
        break;
      case 4:
        v = pick(gen) % 2 ? 0.49999997f * scale : -0.0f;
        break;
      case 5:
        v = pick(gen) % 3 == 0 ? kNaN : pick(gen) % 2 ? kInf : -kInf;
        break;
      default:
        v = u(gen);
    }
  }
  return x;
}

inline bool same_bits(const F& a, const F& b) {
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

/// Bitwise, NaN matching any NaN.
inline void expect_bits(const F& actual, const F& expected, const char* what) {
  BOOST_TEST_CONTEXT(what) {
    BOOST_REQUIRE(actual.size() == expected.size());
    for (std::size_t i = 0; i < actual.size(); ++i) {
      if (std::isnan(actual[i]) && std::isnan(expected[i])) continue;
      std::uint32_t a, e;
      std::memcpy(&a, &actual[i], 4);
      std::memcpy(&e, &expected[i], 4);
      BOOST_TEST_CONTEXT("index " << i << " actual " << actual[i] << " expected " << expected[i]) {
        BOOST_TEST(a == e);
      }
    }
  }
}

}  // namespace qat::test
