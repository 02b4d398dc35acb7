// kl_div_softmax and distillation_loss: gradient checks (float64), hand-computed values, errors,
// and golden vectors from PyTorch 1.13 (tests/golden/gen_distill_golden.py).
#include <boost/test/unit_test.hpp>
#include <cmath>

#include "common/golden.h"
#include "common/gradcheck.h"
#include "framework/autograd/ops.h"

using namespace qat;
using test::check_gradients;
using test::rand_double;
using V = std::vector<Tensor>;
namespace tt = boost::test_tools;

namespace {

// |a - e| <= atol + rtol |e| elementwise.
void expect_close(const Tensor& actual, const Tensor& expected, double rtol, const std::string& what) {
  BOOST_REQUIRE_MESSAGE(actual.defined() && actual.shape() == expected.shape(), what << ": shape");
  const auto a = actual.to(DType::Float64).to_vector<double>();
  const auto e = expected.to(DType::Float64).to_vector<double>();
  for (std::size_t i = 0; i < e.size(); ++i)
    BOOST_REQUIRE_MESSAGE(std::abs(a[i] - e[i]) <= 1e-15 + rtol * std::abs(e[i]),
                          what << ": element " << i << " is " << a[i] << ", expected " << e[i]);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(ops_distill)

BOOST_AUTO_TEST_CASE(grad_kl_div_softmax) {
  for (double temperature : {1.0, 3.0, 0.5}) {
    auto s = rand_double(Shape{4, 6}, 31, -3, 3);
    auto t = rand_double(Shape{4, 6}, 32, -3, 3);
    check_gradients("kl_div_softmax T=" + std::to_string(temperature),
                    [temperature](const V& in) { return kl_div_softmax(in[0], in[1], temperature); },
                    {s, t});
  }
  auto s = rand_double(Shape{3, 5}, 33, -3, 3);
  auto t = rand_double(Shape{3, 5}, 34, -3, 3);
  Tensor labels = Tensor::from_vector<std::int64_t>({4, 0, 2}, Shape{3});
  check_gradients("distillation_loss",
                  [labels](const V& in) { return distillation_loss(in[0], in[1], labels, 0.7, 2.5); },
                  {s, t});
}

BOOST_AUTO_TEST_CASE(kl_div_softmax_values) {
  // Equal logits: KL = 0 and no gradient.
  Tensor s = Tensor::from_vector<double>({1, 2, 3, -1, 0, 4}, Shape{2, 3}).requires_grad_(true);
  BOOST_TEST(kl_div_softmax(s, s.detach(), 2.0).item() == 0.0, tt::tolerance(1e-15));
  // Hand-computed: two classes, T = 1, teacher p = (1/2, 1/2), student q = softmax(0, log 3) =
  // (1/4, 3/4): KL = 1/2 log(2) + 1/2 log(2/3).
  Tensor s2 = Tensor::from_vector<double>({0, std::log(3.0)}, Shape{1, 2}).requires_grad_(true);
  Tensor t2 = Tensor::zeros(Shape{1, 2}, DType::Float64);
  Tensor kl = kl_div_softmax(s2, t2, 1.0);
  BOOST_TEST(kl.item() == 0.5 * std::log(2.0) + 0.5 * std::log(2.0 / 3.0), tt::tolerance(1e-14));
  kl.backward();  // ds = q - p = (-1/4, 1/4)
  const auto g = s2.grad().to_vector<double>();
  BOOST_TEST(g[0] == -0.25, tt::tolerance(1e-14));
  BOOST_TEST(g[1] == 0.25, tt::tolerance(1e-14));
  // Temperature: logits scaled by T give the same KL at temperature T.
  Tensor a = Tensor::from_vector<double>({0.3, -1.2, 2.0, 0.1}, Shape{2, 2});
  Tensor b = Tensor::from_vector<double>({1.3, 0.2, -0.5, 0.4}, Shape{2, 2});
  BOOST_TEST(kl_div_softmax(a * 4.0, b * 4.0, 4.0).item() == kl_div_softmax(a, b, 1.0).item(),
             tt::tolerance(1e-13));
  // Huge logits stay finite (teacher probabilities underflow to 0: 0 log 0 = 0).
  Tensor big = Tensor::from_vector<float>({1000, 0, -1000}, Shape{1, 3});
  BOOST_TEST(std::isfinite(kl_div_softmax(big, -big, 1.0).item()));
  BOOST_TEST(kl_div_softmax(big, big, 1.0).item() == 0.0);
}

BOOST_AUTO_TEST_CASE(kl_div_softmax_errors) {
  Tensor a = Tensor::zeros(Shape{2, 3});
  const auto message = [](auto&& f) {
    try {
      f();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  BOOST_TEST(message([&] { kl_div_softmax(a, a, 0.0); }) ==
             "kl_div_softmax: temperature must be finite and > 0, got 0");
  BOOST_TEST(message([&] { kl_div_softmax(a, a, std::nan("")); }) ==
             "kl_div_softmax: temperature must be finite and > 0, got nan");
  BOOST_TEST(message([&] {
               kl_div_softmax(a, Tensor::zeros(Shape{2, 4}), 1.0);
             }) ==
             "kl_div_softmax: student_logits float32[2, 3] and teacher_logits float32[2, 4] must match");
  BOOST_CHECK_THROW(kl_div_softmax(Tensor::zeros(Shape{6}), Tensor::zeros(Shape{6}), 1.0), Error);
  BOOST_CHECK_THROW(kl_div_softmax(a, Tensor::zeros(Shape{2, 3}, DType::Float64), 1.0), Error);
  const Tensor y = Tensor::from_vector<std::int64_t>({0, 1}, Shape{2});
  BOOST_TEST(message([&] { distillation_loss(a, a, y, 1.5, 1.0); }) ==
             "distillation_loss: weight must be in [0, 1], got 1.5");
}

BOOST_AUTO_TEST_CASE(golden_pytorch) {
  const auto cases = test::load_golden("golden/distill.txt");
  BOOST_REQUIRE_EQUAL(cases.size(), 4u);
  for (const auto& c : cases) {
    const double temperature = c.scalar("temperature"), weight = c.scalar("weight");
    Tensor s = c.tensor("s").clone().requires_grad_(true);
    Tensor t = c.tensor("t").clone().requires_grad_(true);
    Tensor kl = kl_div_softmax(s, t, temperature);
    BOOST_TEST_CONTEXT(c.name) {
      BOOST_TEST(kl.item() == c.scalar("kl"), tt::tolerance(1e-12));
      kl.backward();
      expect_close(s.grad(), c.tensor("grad_s"), 1e-10, c.name + " grad_s");
      expect_close(t.grad(), c.tensor("grad_t"), 1e-10, c.name + " grad_t");
      Tensor s2 = c.tensor("s").clone().requires_grad_(true);
      Tensor kd = distillation_loss(s2, c.tensor("t"), c.tensor("y"), weight, temperature);
      BOOST_TEST(kd.item() == c.scalar("kd"), tt::tolerance(1e-12));
      kd.backward();
      expect_close(s2.grad(), c.tensor("grad_kd_s"), 1e-10, c.name + " grad_kd_s");
      // float32 agrees to float32 precision
      Tensor s32 = c.tensor("s").to(DType::Float32), t32 = c.tensor("t").to(DType::Float32);
      BOOST_TEST(kl_div_softmax(s32, t32, temperature).item() == c.scalar("kl"), tt::tolerance(2e-5));
    }
  }
}

BOOST_AUTO_TEST_SUITE_END()
