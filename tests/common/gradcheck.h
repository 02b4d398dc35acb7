#pragma once
// Gradient checks by central differences in double precision (tests only).
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "framework/autograd/grad_mode.h"
#include "framework/autograd/ops.h"
#include "framework/tensor/random.h"
#include "framework/tensor/tensor.h"

namespace qat::test {

/// Float64 leaf of `shape` with values uniform in [lo, hi) whose magnitude is at least
/// `min_abs` (keeps samples away from kinks at 0 such as ReLU's).
inline Tensor rand_double(const Shape& shape, std::uint64_t seed, double lo = -1.0, double hi = 1.0,
                          double min_abs = 0.0) {
  Generator gen(seed);
  Tensor t = Tensor::empty(shape, DType::Float64);
  double* p = t.data<double>();
  for (std::int64_t i = 0; i < t.numel(); ++i) {
    double v;
    do v = lo + (hi - lo) * gen.uniform();
    while (std::abs(v) < min_abs);
    p[i] = v;
  }
  t.requires_grad_(true);
  return t;
}

/// Checks d/d(inputs) of L = sum(w * f(inputs)), w a fixed random tensor, against central
/// differences (L(x+eps) - L(x-eps)) / 2eps. Inputs that do not require grad are held fixed.
/// Fails the current Boost test case with the op name, input index and element on mismatch.
inline void check_gradients(const std::string& name,
                            const std::function<Tensor(const std::vector<Tensor>&)>& f,
                            std::vector<Tensor> inputs, double eps = 1e-6, double atol = 1e-7,
                            double rtol = 1e-5) {
  Tensor y = f(inputs);
  BOOST_REQUIRE_MESSAGE(y.dtype() == DType::Float64, name << ": output must be float64");
  Generator gen(1234);
  Tensor w = Tensor::uniform(y.shape(), 0.5, 1.5, gen, DType::Float64);
  auto loss_of = [&](const std::vector<Tensor>& in) {
    NoGradGuard ng;
    Tensor out = f(in);
    double s = 0;
    for (std::int64_t i = 0; i < out.numel(); ++i) s += out.data<double>()[i] * w.data<double>()[i];
    return s;
  };
  for (auto& t : inputs)
    if (t.defined()) t.zero_grad();
  Tensor loss = sum(mul(y, w));
  loss.backward();
  for (std::size_t k = 0; k < inputs.size(); ++k) {
    Tensor& x = inputs[k];
    if (!x.defined() || !x.requires_grad()) continue;
    Tensor analytic = x.grad();
    BOOST_REQUIRE_MESSAGE(analytic.defined(), name << ": input " << k << " received no gradient");
    double* px = x.data<double>();
    double worst = 0;
    for (std::int64_t i = 0; i < x.numel(); ++i) {
      const double saved = px[i];
      px[i] = saved + eps;
      const double lp = loss_of(inputs);
      px[i] = saved - eps;
      const double lm = loss_of(inputs);
      px[i] = saved;
      const double numeric = (lp - lm) / (2 * eps);
      const double a = analytic.data<double>()[i];
      const double err = std::abs(a - numeric);
      worst = std::max(worst, err);
      if (err > atol + rtol * std::abs(numeric)) {
        BOOST_ERROR(name << ": input " << k << " element " << i << ": autograd " << a
                         << " vs finite differences " << numeric);
        return;
      }
    }
    BOOST_TEST_MESSAGE(name << ": input " << k << " max abs error " << worst);
  }
}

}  // namespace qat::test
