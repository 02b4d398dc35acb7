#pragma once
#include "common/errors.h"
// Helpers shared by the quantization tests (tests only).
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "framework/tensor/tensor.h"

namespace qat::test {

inline constexpr float kInf = std::numeric_limits<float>::infinity();
inline constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

inline Tensor vec(const std::vector<float>& v) {
  return Tensor::from_vector<float>(v, Shape{std::ssize(v)});
}
inline Tensor vecd(const std::vector<double>& v) {
  return Tensor::from_vector<double>(v, Shape{std::ssize(v)});
}

/// Bit-exact: == per element (NaN matching NaN) and the same sign of zero.
inline void expect_exact(const Tensor& actual, const Tensor& expected, const std::string& what) {
  BOOST_TEST_CONTEXT(what) {
    BOOST_REQUIRE(actual.defined());
    BOOST_REQUIRE(actual.numel() == expected.numel());
    auto a = actual.to(DType::Float64).to_vector<double>();
    auto e = expected.to(DType::Float64).to_vector<double>();
    std::vector<bool> sa, se;
    for (std::size_t i = 0; i < a.size(); ++i) {
      if (std::isnan(a[i]) && std::isnan(e[i])) a[i] = e[i] = 0;
      sa.push_back(std::signbit(a[i]));
      se.push_back(std::signbit(e[i]));
    }
    BOOST_TEST(a == e, boost::test_tools::per_element());
    BOOST_TEST(sa == se, boost::test_tools::per_element());
  }
}

/// L = sum(w * y) in double.
inline double weighted_sum(const Tensor& y, const Tensor& w) {
  const auto a = y.to(DType::Float64).to_vector<double>(), b = w.to(DType::Float64).to_vector<double>();
  double s = 0;
  for (std::size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

}  // namespace qat::test
