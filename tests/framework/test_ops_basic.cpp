// Gradient checks (central differences, float64) and hand-computed values for the
// elementwise, pointwise, shape, linear-algebra, reduction and loss ops.
#include <boost/test/unit_test.hpp>

#include "common/gradcheck.h"
#include "framework/autograd/ops.h"

using namespace qat;
using test::check_gradients;
using test::rand_double;
using V = std::vector<Tensor>;
namespace tt = boost::test_tools;

BOOST_AUTO_TEST_SUITE(ops_basic)

BOOST_AUTO_TEST_CASE(broadcast_arithmetic_forward) {
  Tensor a = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, Shape{2, 3});
  Tensor b = Tensor::from_vector<float>({10, 20, 30}, Shape{3});
  Tensor c = Tensor::from_vector<float>({2, 4}, Shape{2, 1});
  BOOST_TEST((a + b).to_vector<float>() == (std::vector<float>{11, 22, 33, 14, 25, 36}),
             tt::per_element());
  BOOST_TEST((a - c).to_vector<float>() == (std::vector<float>{-1, 0, 1, 0, 1, 2}), tt::per_element());
  BOOST_TEST((a * c).to_vector<float>() == (std::vector<float>{2, 4, 6, 16, 20, 24}), tt::per_element());
  BOOST_TEST((a / c).to_vector<float>() == (std::vector<float>{0.5, 1, 1.5, 1, 1.25, 1.5}),
             tt::per_element());
  BOOST_TEST((1.0 - a).to_vector<float>()[5] == -5.0f);
  BOOST_TEST((6.0 / a).to_vector<float>()[1] == 3.0f);
  BOOST_CHECK_THROW(a + Tensor::zeros(Shape{2}), Error);
  BOOST_CHECK_THROW(a + Tensor::zeros(Shape{3}, DType::Float64), Error);
}

BOOST_AUTO_TEST_CASE(grad_broadcast_arithmetic) {
  auto a = rand_double(Shape{3, 4, 5}, 1), b = rand_double(Shape{4, 1}, 2),
       c = rand_double(Shape{5}, 3, 0.5, 2.0);
  check_gradients("add", [](const V& in) { return add(in[0], in[1]); }, {a, b});
  check_gradients("sub", [](const V& in) { return sub(in[0], in[1]); }, {a, b});
  check_gradients("mul", [](const V& in) { return mul(in[0], in[1]); }, {a, b});
  check_gradients("div", [](const V& in) { return div(in[0], in[1]); }, {a, c});
  check_gradients("div_rev", [](const V& in) { return div(in[1], in[0]); }, {c, b});
  check_gradients("neg", [](const V& in) { return neg(in[0]); }, {a});
}

BOOST_AUTO_TEST_CASE(grad_scalar_variants) {
  auto a = rand_double(Shape{2, 3}, 4, 0.5, 2.0);
  check_gradients("add_scalar", [](const V& in) { return in[0] + 2.5; }, {a});
  check_gradients("sub_scalar", [](const V& in) { return in[0] - 2.5; }, {a});
  check_gradients("mul_scalar", [](const V& in) { return in[0] * -1.5; }, {a});
  check_gradients("div_scalar", [](const V& in) { return in[0] / 3.0; }, {a});
  check_gradients("rsub", [](const V& in) { return 1.0 - in[0]; }, {a});
  check_gradients("rdiv", [](const V& in) { return 2.0 / in[0]; }, {a});
  check_gradients("pow", [](const V& in) { return pow(in[0], 2.5); }, {a});
}

BOOST_AUTO_TEST_CASE(grad_pointwise) {
  auto x = rand_double(Shape{4, 6}, 5, -2.0, 2.0, 0.05);  // away from the ReLU kink
  auto pos = rand_double(Shape{4, 6}, 6, 0.2, 3.0);
  check_gradients("relu", [](const V& in) { return relu(in[0]); }, {x});
  check_gradients("sigmoid", [](const V& in) { return sigmoid(in[0]); }, {x});
  check_gradients("tanh", [](const V& in) { return tanh(in[0]); }, {x});
  check_gradients("exp", [](const V& in) { return exp(in[0]); }, {x});
  check_gradients("log", [](const V& in) { return log(in[0]); }, {pos});
  // clamp: keep samples away from the bounds +-0.5
  auto xc = rand_double(Shape{30}, 7, -1.0, 1.0);
  for (std::int64_t i = 0; i < 30; ++i) {
    double& v = xc.data<double>()[i];
    if (std::abs(std::abs(v) - 0.5) < 0.05) v += 0.1;
  }
  check_gradients("clamp", [](const V& in) { return clamp(in[0], -0.5, 0.5); }, {xc});
}

BOOST_AUTO_TEST_CASE(pointwise_values) {
  Tensor x = Tensor::from_vector<float>({-2, -0.5, 0, 0.5, 2}, Shape{5});
  BOOST_TEST(relu(x).to_vector<float>() == (std::vector<float>{0, 0, 0, 0.5, 2}), tt::per_element());
  BOOST_TEST(clamp(x, -1, 1).to_vector<float>() == (std::vector<float>{-1, -0.5, 0, 0.5, 1}),
             tt::per_element());
  BOOST_TEST(sigmoid(x).to_vector<float>()[2] == 0.5f);
  BOOST_CHECK_THROW(clamp(x, 1, -1), Error);
  BOOST_CHECK_THROW(relu(Tensor::zeros(Shape{2}, DType::Int32)), Error);
}

BOOST_AUTO_TEST_CASE(grad_shape_ops) {
  auto x = rand_double(Shape{2, 3, 4}, 8);
  check_gradients("reshape", [](const V& in) { return reshape(in[0], {4, -1}) * 2.0; }, {x});
  check_gradients("flatten", [](const V& in) { return flatten(in[0]) * 2.0; }, {x});
  check_gradients("transpose01", [](const V& in) { return transpose(in[0], 0, 1); }, {x});
  check_gradients("transpose02", [](const V& in) { return transpose(in[0], 0, -1); }, {x});
  BOOST_TEST(flatten(x).shape() == (Shape{2, 12}));
  BOOST_TEST(flatten(x, 0, 1).shape() == (Shape{6, 4}));
  BOOST_CHECK_THROW(reshape(x, {5, -1}), Error);
  BOOST_CHECK_THROW(reshape(x, {-1, -1}), Error);
  Tensor m = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, Shape{2, 3});
  BOOST_TEST(transpose(m, 0, 1).to_vector<float>() == (std::vector<float>{1, 4, 2, 5, 3, 6}),
             tt::per_element());
}

BOOST_AUTO_TEST_CASE(grad_linalg) {
  auto a = rand_double(Shape{3, 4}, 9), b = rand_double(Shape{4, 5}, 10);
  check_gradients("matmul", [](const V& in) { return matmul(in[0], in[1]); }, {a, b});
  auto ba = rand_double(Shape{2, 3, 4}, 11), bb = rand_double(Shape{2, 4, 2}, 12);
  check_gradients("matmul_batched", [](const V& in) { return matmul(in[0], in[1]); }, {ba, bb});
  auto x = rand_double(Shape{5, 4}, 13), w = rand_double(Shape{3, 4}, 14),
       bias = rand_double(Shape{3}, 15);
  check_gradients("linear", [](const V& in) { return linear(in[0], in[1], in[2]); }, {x, w, bias});
  check_gradients("linear_nobias", [](const V& in) { return linear(in[0], in[1]); }, {x, w});
  auto x3 = rand_double(Shape{2, 3, 4}, 16);
  check_gradients("linear_3d", [](const V& in) { return linear(in[0], in[1], in[2]); }, {x3, w, bias});
  Tensor m = Tensor::from_vector<float>({1, 2, 3, 4}, Shape{2, 2});
  BOOST_TEST(matmul(m, m).to_vector<float>() == (std::vector<float>{7, 10, 15, 22}), tt::per_element());
  BOOST_CHECK_THROW(matmul(m, Tensor::zeros(Shape{3, 2})), Error);
  BOOST_CHECK_THROW(linear(Tensor::zeros(Shape{2, 5}), Tensor::zeros(Shape{3, 4})), Error);
}

BOOST_AUTO_TEST_CASE(grad_reductions) {
  auto x = rand_double(Shape{3, 4, 5}, 17);
  check_gradients("sum_all", [](const V& in) { return sum(in[0]); }, {x});
  check_gradients("sum_dim1", [](const V& in) { return sum(in[0], 1); }, {x});
  check_gradients("sum_dim_keep", [](const V& in) { return sum(in[0], -1, true); }, {x});
  check_gradients("mean_all", [](const V& in) { return mean(in[0]); }, {x});
  check_gradients("mean_dim0", [](const V& in) { return mean(in[0], 0); }, {x});
  check_gradients("max_all", [](const V& in) { return max(in[0]); }, {x});
  check_gradients("max_dim1", [](const V& in) { return max(in[0], 1); }, {x});
  check_gradients("max_dim2_keep", [](const V& in) { return max(in[0], 2, true); }, {x});
  Tensor m = Tensor::from_vector<float>({1, 5, 3, 7, 2, 7}, Shape{2, 3});
  BOOST_TEST(sum(m, 0).to_vector<float>() == (std::vector<float>{8, 7, 10}), tt::per_element());
  BOOST_TEST(mean(m, 1).to_vector<float>() == (std::vector<float>{3, 16.0f / 3}), tt::per_element());
  BOOST_TEST(max(m, 1).to_vector<float>() == (std::vector<float>{5, 7}), tt::per_element());
  BOOST_TEST(argmax(m, 1).to_vector<std::int64_t>() == (std::vector<std::int64_t>{1, 0}),
             tt::per_element());
  BOOST_TEST(sum(m, 1, true).shape() == (Shape{2, 1}));
  BOOST_CHECK_THROW(sum(m, 2), Error);
}

BOOST_AUTO_TEST_CASE(grad_losses) {
  auto x = rand_double(Shape{4, 5}, 18, -3, 3);
  check_gradients("log_softmax_last", [](const V& in) { return log_softmax(in[0]); }, {x});
  check_gradients("log_softmax_dim0", [](const V& in) { return log_softmax(in[0], 0); }, {x});
  Tensor labels = Tensor::from_vector<std::int64_t>({0, 4, 2, 2}, Shape{4});
  check_gradients("cross_entropy", [labels](const V& in) { return cross_entropy(in[0], labels); }, {x});
  auto t = rand_double(Shape{4, 5}, 19);
  check_gradients("mse_loss", [](const V& in) { return mse_loss(in[0], in[1]); }, {x, t});
}

BOOST_AUTO_TEST_CASE(cross_entropy_values_and_errors) {
  // uniform logits: loss = log(C)
  Tensor logits = Tensor::zeros(Shape{3, 4});
  Tensor labels = Tensor::from_vector<std::int64_t>({0, 1, 3}, Shape{3});
  BOOST_TEST(cross_entropy(logits, labels).item() == std::log(4.0), tt::tolerance(1e-6));
  // matches log_softmax + gather
  Tensor x = Tensor::from_vector<double>({1, 2, 3, -1, 0, 4}, Shape{2, 3});
  Tensor y = Tensor::from_vector<std::int64_t>({2, 0}, Shape{2});
  auto lp = log_softmax(x).to_vector<double>();
  BOOST_TEST(cross_entropy(x, y).item() == -(lp[2] + lp[3]) / 2, tt::tolerance(1e-12));
  // large logits stay finite
  Tensor big = Tensor::from_vector<float>({1000, 0, -1000}, Shape{1, 3});
  BOOST_TEST(cross_entropy(big, Tensor::from_vector<std::int64_t>({0}, Shape{1})).item() == 0.0);
  try {
    cross_entropy(logits, Tensor::from_vector<std::int64_t>({0, 7, 1}, Shape{3}));
    BOOST_FAIL("expected an error");
  } catch (const Error& e) {
    BOOST_TEST(std::string(e.what()) == "cross_entropy: label 7 at index 1 is out of range [0, 4)");
  }
  BOOST_CHECK_THROW(cross_entropy(logits, Tensor::zeros(Shape{3})), Error);
  BOOST_CHECK_THROW(cross_entropy(logits, Tensor::zeros(Shape{2}, DType::Int64)), Error);
}

BOOST_AUTO_TEST_SUITE_END()
