#pragma once
// Helpers of the CUDA tests: the device precondition and CPU / CUDA comparisons.
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "framework/tensor/cuda.h"
#include "framework/tensor/random.h"
#include "framework/tensor/tensor.h"

namespace qat::test {

/// Whether this process has a file whose path contains `name` mapped (/proc/self/maps).
inline bool maps_library(const std::string& name) {
  std::ifstream maps("/proc/self/maps");
  for (std::string line; std::getline(maps, line);)
    if (line.find(name) != std::string::npos) return true;
  return false;
}
/// maps_library("libcublas") when main began (main_cuda.cpp).
extern bool g_cublas_mapped_at_start;

/// Precondition of the tests that need a GPU: skipped with the reason otherwise.
inline boost::test_tools::assertion_result has_cuda_device(boost::unit_test::test_unit_id) {
  boost::test_tools::assertion_result r(cuda::is_available());
  if (!r) r.message() << "skipped: no CUDA device (" << cuda::unavailable_reason() << ")";
  return r;
}

/// Bit patterns equal (the sign of zero included), except that a NaN matches any NaN: the GPU's
/// float arithmetic returns the canonical NaN (PTX: 0x7fffffff) where the CPU's keeps its
/// input's sign and payload (-x of a NaN on x86 flips its sign bit), so NaN bits are not portable.
inline void require_bits_equal(const Tensor& cpu, const Tensor& gpu) {
  BOOST_REQUIRE(cpu.shape() == gpu.shape());
  const std::vector<float> a = cpu.to_vector<float>(), b = gpu.to_vector<float>();
  for (std::size_t i = 0; i < a.size(); ++i)
    if (std::isnan(a[i]) ? !std::isnan(b[i]) : std::memcmp(&a[i], &b[i], sizeof(float)) != 0)
      BOOST_FAIL("element " << i << ": cpu " << a[i] << ", cuda " << b[i]);
}

/// |cpu - gpu| <= tol (max(1, |cpu|)) elementwise.
inline void require_close(const Tensor& cpu, const Tensor& gpu, double tol) {
  BOOST_REQUIRE(cpu.shape() == gpu.shape());
  const std::vector<float> a = cpu.to_vector<float>(), b = gpu.to_vector<float>();
  for (std::size_t i = 0; i < a.size(); ++i)
    if (!(std::abs(a[i] - b[i]) <= tol * std::max(1.0f, std::abs(a[i]))))
      BOOST_FAIL("element " << i << ": cpu " << a[i] << ", cuda " << b[i] << " (tol " << tol << ")");
}

/// ||cpu - gpu|| / ||cpu|| <= tol (2-norms, in double): for sums of many terms that cancel, whose
/// rounding error scales with the terms, not with the (small) result of one element.
inline void require_close_norm(const Tensor& cpu, const Tensor& gpu, double tol) {
  BOOST_REQUIRE(cpu.shape() == gpu.shape());
  const std::vector<float> a = cpu.to_vector<float>(), b = gpu.to_vector<float>();
  double diff = 0, ref = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    diff += (static_cast<double>(a[i]) - b[i]) * (static_cast<double>(a[i]) - b[i]);
    ref += static_cast<double>(a[i]) * a[i];
  }
  BOOST_TEST(std::sqrt(diff) <= tol * std::sqrt(ref),
             "relative error " << std::sqrt(diff / ref) << " > " << tol);
}

/// A detached copy that requires grad.
inline Tensor leaf(const Tensor& t) {
  Tensor l = t.detach();
  l.requires_grad_();
  return l;
}

/// Uniform in [lo, hi) of shape s.
inline Tensor rnd(const Shape& s, std::uint64_t seed, double lo = -2, double hi = 2) {
  Generator gen(seed);
  return Tensor::uniform(s, lo, hi, gen);
}

/// How compare() checks gradients: elementwise (require_close) or by norm (require_close_norm).
enum class GradCheck { Elementwise, Norm };

/// f on a CPU copy and a CUDA copy of the inputs: outputs and every input's gradient compared
/// (bit-exact when tol is 0, else within tol), the backward seeded with the same random
/// gradient. Inputs with requires_grad false in `frozen` (by index) get no gradient.
inline void compare(const std::vector<Tensor>& inputs,
                    const std::function<Tensor(const std::vector<Tensor>&)>& f, double tol,
                    double grad_tol = -1, const std::vector<bool>& frozen = {},
                    GradCheck grad_check = GradCheck::Elementwise) {
  if (grad_tol < 0) grad_tol = tol;
  std::vector<Tensor> hc, dc;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const bool fz = i < frozen.size() && frozen[i];
    hc.push_back(fz ? inputs[i] : leaf(inputs[i]));
    dc.push_back(fz ? inputs[i].to(Device::CUDA) : leaf(inputs[i].to(Device::CUDA)));
  }
  const Tensor yh = f(hc), yd = f(dc);
  BOOST_REQUIRE((yd.device() == Device::CUDA));
  tol == 0 ? require_bits_equal(yh, yd) : require_close(yh, yd, tol);
  Generator gen(11);
  const Tensor g = Tensor::uniform(yh.shape(), -1, 1, gen);
  yh.backward(g);
  yd.backward(g.to(Device::CUDA));
  for (std::size_t i = 0; i < hc.size(); ++i) {
    if (!hc[i].requires_grad()) continue;
    BOOST_TEST_CONTEXT("gradient of input " << i) {
      BOOST_REQUIRE(dc[i].grad().defined());
      BOOST_TEST((dc[i].grad().device() == Device::CUDA));
      if (grad_tol == 0)
        require_bits_equal(hc[i].grad(), dc[i].grad());
      else if (grad_check == GradCheck::Norm)
        require_close_norm(hc[i].grad(), dc[i].grad(), grad_tol);
      else
        require_close(hc[i].grad(), dc[i].grad(), grad_tol);
    }
  }
}

}  // namespace qat::test
