#pragma once
// Helpers of the CUDA tests: the device precondition and CPU / CUDA comparisons.
#include <boost/test/unit_test.hpp>
#include <cstring>
#include <vector>

#include "framework/tensor/cuda.h"
#include "framework/tensor/random.h"
#include "framework/tensor/tensor.h"

namespace qat::test {

/// Precondition of the tests that need a GPU: skipped with the reason otherwise.
inline boost::test_tools::assertion_result has_cuda_device(boost::unit_test::test_unit_id) {
  boost::test_tools::assertion_result r(cuda::is_available());
  if (!r) r.message() << "skipped: no CUDA device (" << cuda::unavailable_reason() << ")";
  return r;
}

/// Bit patterns equal (NaN payloads and the sign of zero included).
inline void require_bits_equal(const Tensor& cpu, const Tensor& gpu) {
  BOOST_REQUIRE(cpu.shape() == gpu.shape());
  const std::vector<float> a = cpu.to_vector<float>(), b = gpu.to_vector<float>();
  for (std::size_t i = 0; i < a.size(); ++i)
    if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0)
      BOOST_FAIL("element " << i << ": cpu " << a[i] << ", cuda " << b[i]);
}

/// |cpu - gpu| <= tol (max(1, |cpu|)) elementwise.
inline void require_close(const Tensor& cpu, const Tensor& gpu, double tol) {
  BOOST_REQUIRE(cpu.shape() == gpu.shape());
  const std::vector<float> a = cpu.to_vector<float>(), b = gpu.to_vector<float>();
  for (std::size_t i = 0; i < a.size(); ++i)
    if (!(std::abs(a[i] - b[i]) <= tol * std::max(1.0f, std::abs(a[i]))))
      BOOST_FAIL("element " << i << ": cpu " << a[i] << ", cuda " << b[i]);
}

}  // namespace qat::test
