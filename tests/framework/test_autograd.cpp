#include <boost/test/unit_test.hpp>
#include <cmath>
#include <memory>

#include "framework/autograd/engine.h"
#include "framework/autograd/grad_mode.h"
#include "framework/autograd/node.h"
#include "framework/autograd/ops.h"

using namespace qat;

namespace {
Tensor leaf(std::vector<double> v) {
  Tensor t = Tensor::from_vector<double>(v, Shape{static_cast<std::int64_t>(v.size())});
  t.requires_grad_(true);
  return t;
}
}  // namespace

BOOST_AUTO_TEST_SUITE(autograd)

BOOST_AUTO_TEST_CASE(hand_computed_gradients) {
  // L = sum(a*b + a) -> dL/da = b + 1, dL/db = a
  Tensor a = leaf({1, 2, 3}), b = leaf({4, 5, 6});
  sum(a * b + a).backward();
  BOOST_TEST(a.grad().to_vector<double>() == (std::vector<double>{5, 6, 7}),
             boost::test_tools::per_element());
  BOOST_TEST(b.grad().to_vector<double>() == (std::vector<double>{1, 2, 3}),
             boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(same_input_twice_and_accumulation) {
  Tensor x = leaf({3});
  (x * x).backward();  // d(x^2) = 2x = 6
  BOOST_TEST(x.grad().item() == 6.0);
  (x * 2.0).backward();  // accumulates: 6 + 2
  BOOST_TEST(x.grad().item() == 8.0);
  x.zero_grad();
  BOOST_TEST(!x.grad().defined());
}

BOOST_AUTO_TEST_CASE(shared_grad_buffers_are_not_aliased) {
  // add passes the same gradient to both inputs; in-place accumulation into one leaf's grad
  // must not change the other's.
  Tensor a = leaf({1, 1}), b = leaf({1, 1});
  sum(a + b).backward();
  sum(a * 3.0).backward();
  BOOST_TEST(a.grad().to_vector<double>() == (std::vector<double>{4, 4}),
             boost::test_tools::per_element());
  BOOST_TEST(b.grad().to_vector<double>() == (std::vector<double>{1, 1}),
             boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(graph_is_freed_unless_retained) {
  Tensor x = leaf({2});
  Tensor y = exp(x * 3.0);
  std::weak_ptr<Node> mul_node = y.grad_fn()->inputs[0].grad_fn();
  BOOST_TEST(!mul_node.expired());
  y.backward(Tensor(), /*retain_graph=*/true);
  BOOST_TEST(!mul_node.expired());
  y.backward();  // second pass allowed, graph freed afterwards
  BOOST_TEST(mul_node.expired());
  BOOST_TEST(x.grad().item() == 2 * 3 * std::exp(6.0), boost::test_tools::tolerance(1e-12));
  try {
    y.backward();
    BOOST_FAIL("expected an error on a third backward");
  } catch (const Error& e) {
    BOOST_TEST(std::string(e.what()).find("second time") != std::string::npos);
  }
}

BOOST_AUTO_TEST_CASE(no_grad_guard_and_detach) {
  Tensor x = leaf({1, 2});
  {
    NoGradGuard guard;
    BOOST_TEST(!GradMode::is_enabled());
    Tensor y = x * 2.0;
    BOOST_TEST(!y.requires_grad());
    BOOST_TEST(y.is_leaf());
  }
  BOOST_TEST(GradMode::is_enabled());
  Tensor d = (x * 2.0).detach();
  BOOST_TEST(!d.requires_grad());
  BOOST_TEST((x * 2.0).requires_grad());
  Tensor c = Tensor::ones(Shape{2}, DType::Float64);
  BOOST_TEST(!(c * c).requires_grad());  // nothing to record
  BOOST_CHECK_THROW((c * c).backward(), Error);
  BOOST_CHECK_THROW((x * 2.0).backward(), Error);  // non-scalar without grad_output
  (x * 2.0).backward(Tensor::ones(Shape{2}, DType::Float64));
  BOOST_TEST(x.grad().to_vector<double>()[1] == 2.0);
}

BOOST_AUTO_TEST_CASE(deep_graph_does_not_recurse) {
  // 200k chained ops: a recursive walk (or recursive destruction) would overflow the stack.
  Tensor x = leaf({1.0});
  Tensor y = x;
  for (int i = 0; i < 200000; ++i) y = y + 1e-6;
  y.backward();
  BOOST_TEST(x.grad().item() == 1.0);
}

BOOST_AUTO_TEST_CASE(deep_graph_dropped_without_backward) {
  Tensor x = leaf({1.0});
  {
    Tensor y = x;
    for (int i = 0; i < 200000; ++i) y = y * 1.0;
  }  // destroying the chain must not overflow the stack
  BOOST_TEST(!x.grad().defined());
}

BOOST_AUTO_TEST_CASE(requires_grad_rules) {
  Tensor i = Tensor::zeros(Shape{2}, DType::Int32);
  BOOST_CHECK_THROW(i.requires_grad_(true), Error);
  Tensor x = leaf({1});
  Tensor y = x * 2.0;
  BOOST_CHECK_THROW(y.requires_grad_(false), Error);
  BOOST_CHECK_THROW(x.set_grad(Tensor::zeros(Shape{3}, DType::Float64)), Error);
}

// What data-parallel training hooks into: a leaf is reported once per pass, after its last
// gradient contribution (a leaf read twice only after both), and the pass's end after all leaves.
BOOST_AUTO_TEST_CASE(grad_ready_observer_sees_complete_leaf_gradients) {
  struct Recorder : qat::autograd::GradReadyObserver {
    std::vector<std::pair<const TensorImpl*, float>> ready;  // leaf, its grad[0] when reported
    int ends = 0;
    void leaf_ready(const TensorImpl* leaf) override {
      ready.emplace_back(leaf, leaf->grad ? Tensor(leaf->grad).data<float>()[0] : NAN);
    }
    void backward_end() override { ++ends; }
  } rec;
  qat::autograd::add_grad_ready_observer(&rec);
  Tensor a = Tensor::full(Shape{1}, 2.0).requires_grad_();
  Tensor b = Tensor::full(Shape{1}, 3.0).requires_grad_();
  Tensor unused = Tensor::full(Shape{1}, 1.0).requires_grad_();
  // y = a*b + a*a: a is read by two nodes, dy/da = b + 2a = 7, dy/db = a = 2
  Tensor y = sum(add(mul(a, b), mul(a, a)));
  y.backward();
  qat::autograd::remove_grad_ready_observer(&rec);
  BOOST_TEST(rec.ends == 1);
  BOOST_TEST(rec.ready.size() == 2u);
  for (const auto& [leaf, g] : rec.ready) {
    if (leaf == a.impl_ptr().get()) BOOST_TEST(g == 7.0f);
    else BOOST_TEST((leaf == b.impl_ptr().get() && g == 2.0f));
  }
  Tensor z = sum(mul(a, b));  // no observer now: nothing reported
  z.backward();
  BOOST_TEST(rec.ends == 1);
  BOOST_TEST(!unused.grad().defined());
}

BOOST_AUTO_TEST_SUITE_END()
