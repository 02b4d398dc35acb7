// DivergenceGuard: a non-finite input, loss, gradient or parameter, or a state that check_state
// rejects, throws DivergenceError naming the tensor, index, value and step; the finite scan.
#include <atomic>
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <limits>
#include <memory>
#include <string>

#include "common/errors.h"
#include "framework/autograd/ops.h"
#include "framework/nn/nn.h"
#include "framework/nn/state_check.h"
#include "framework/optim/divergence.h"
#include "framework/optim/lr_scheduler.h"
#include "framework/optim/sgd.h"
#include "framework/tensor/finite.h"
#include "framework/tensor/random.h"
#include "framework/tensor/storage.h"

using namespace qat;
using namespace qat::optim;
using test::error_of;

namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

std::shared_ptr<nn::Sequential> net() {
  manual_seed(3);
  return std::make_shared<nn::Sequential>(nn::NamedModules{{"fc", std::make_shared<nn::Linear>(4, 3)},
                                                           {"relu", std::make_shared<nn::ReLU>()},
                                                           {"out", std::make_shared<nn::Linear>(3, 2)}});
}

// One ordinary step under the guard; returns the loss.
double step(nn::Module& model, SGD& opt, DivergenceGuard& guard, const Tensor& x) {
  const Tensor y = Tensor::from_vector<std::int64_t>({0, 1}, Shape{2});
  opt.zero_grad();
  guard.check_input(x);
  Tensor loss = cross_entropy(model.forward(x), y);
  guard.check_loss(loss);
  loss.backward();
  guard.check_gradients();
  opt.step();
  guard.end_step();
  return loss.item();
}

Tensor batch() {
  return Tensor::from_vector<float>({0.1f, -0.2f, 0.3f, 0.4f, -0.5f, 0.6f, 0.7f, -0.8f}, Shape{2, 4});
}

// A module with a check_state that rejects a negative "level" buffer.
class Leveled : public nn::Module {
 public:
  Leveled() : Module("Leveled") { level_ = register_buffer("level", Tensor::ones(Shape{3})); }
  Tensor forward(const Tensor& x) override { return x; }
  void check_state(const StateView& state, std::vector<std::string>& problems) const override {
    nn::check::in_range(problems, state, "level", 0, 1e30, "a level");
  }
  Tensor level_;
};

}  // namespace

BOOST_AUTO_TEST_SUITE(finite_scan)

// Every position of every length up to 3 vector blocks (tails included), float and double.
BOOST_AUTO_TEST_CASE(finds_the_first_nonfinite_value_and_counts_them) {
  for (DType dt : {DType::Float32, DType::Float64})
    for (std::int64_t n : {1, 7, 63, 64, 65, 200}) {
      BOOST_TEST(detail::find_nonfinite(Tensor::zeros(Shape{n}, dt)).count == 0);
      for (std::int64_t at : {std::int64_t{0}, n / 2, n - 1})
        for (double bad : {double(kNaN), double(kInf), -double(kInf)}) {
          Tensor t = Tensor::full(Shape{n}, 3e38, dt);  // huge but finite: x * 0 is still 0
          if (dt == DType::Float32)
            t.data<float>()[at] = static_cast<float>(bad);
          else
            t.data<double>()[at] = bad;
          if (at != n - 1) {
            if (dt == DType::Float32)
              t.data<float>()[n - 1] = kNaN;
            else
              t.data<double>()[n - 1] = kNaN;
          }
          const detail::NonFinite r = detail::find_nonfinite(t);
          BOOST_TEST(r.first == at, n << " " << at);
          BOOST_TEST(r.count == (at == n - 1 ? 1 : 2), n << " " << at);
          BOOST_TEST((std::isnan(bad) ? std::isnan(r.value) : r.value == bad));
        }
    }
  BOOST_TEST(detail::find_nonfinite(Tensor::zeros(Shape{5}, DType::Int64)).count == 0);
  BOOST_TEST(detail::index_text(Shape{2, 3, 4}, 23) == "[1, 2, 3]");
  BOOST_TEST(detail::index_text(Shape{}, 0) == "");
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(divergence_guard)

BOOST_AUTO_TEST_CASE(nan_loss_names_the_step_and_the_last_finite_loss) {
  auto model = net();
  SGD opt(model->named_parameters(), {.lr = 0.1});
  DivergenceGuard guard(*model, opt);
  const double first = step(*model, opt, guard, batch());
  BOOST_TEST(guard.step() == 2);
  try {
    guard.check_loss(Tensor::scalar(kNaN));
    BOOST_FAIL("no error");
  } catch (const DivergenceError& e) {
    BOOST_TEST(e.step() == 2);
    BOOST_TEST((e.kind() == DivergenceError::Kind::Loss));
    BOOST_TEST(e.tensor() == "loss");
    BOOST_TEST(std::string(e.what()) ==
               "divergence at step 2: the loss is nan (the last finite loss was " +
                   nn::check::value_text(first) + " at step 1)");
  }
  // a DivergenceError is a qat::Error
  BOOST_TEST(error_of([&] { guard.check_loss(Tensor::scalar(-kInf)); }).find("the loss is -inf") !=
             std::string::npos);
}

BOOST_AUTO_TEST_CASE(inf_gradient_names_the_parameter_and_index) {
  auto model = net();
  SGD opt(model->named_parameters(), {.lr = 0.1});
  DivergenceGuard guard(*model, opt, {.first_step = 41});
  step(*model, opt, guard, batch());
  opt.zero_grad();
  Tensor loss =
      cross_entropy(model->forward(batch()), Tensor::from_vector<std::int64_t>({1, 0}, Shape{2}));
  guard.check_loss(loss);
  loss.backward();
  BOOST_CHECK_NO_THROW(guard.check_gradients());
  Tensor g = model->submodule("fc")->parameter("weight").grad();
  g.data<float>()[1 * 4 + 2] = kInf;
  g.data<float>()[2 * 4 + 0] = kNaN;
  try {
    guard.check_gradients();
    BOOST_FAIL("no error");
  } catch (const DivergenceError& e) {
    BOOST_TEST(e.step() == 42);
    BOOST_TEST((e.kind() == DivergenceError::Kind::Gradient));
    BOOST_TEST(e.tensor() == "fc.weight");
    BOOST_TEST(
        std::string(e.what()) ==
        "divergence at step 42: gradient of fc.weight[1, 2] = inf (2 of 12 values are not finite)");
  }
  // the optimizer was not stepped: the weights are still finite
  BOOST_TEST(detail::find_nonfinite(model->submodule("fc")->parameter("weight")).count == 0);
}

BOOST_AUTO_TEST_CASE(nan_parameter_after_the_step_names_it_and_the_lr) {
  auto model = net();
  SGD opt(model->named_parameters(), {.lr = 0.1});
  DivergenceGuard guard(*model, opt);
  step(*model, opt, guard, batch());
  model->submodule("out")->parameter("bias").data<float>()[1] = kNaN;
  try {
    guard.end_step();
    BOOST_FAIL("no error");
  } catch (const DivergenceError& e) {
    BOOST_TEST(e.step() == 2);
    BOOST_TEST((e.kind() == DivergenceError::Kind::Parameter));
    BOOST_TEST(std::string(e.what()) ==
               "divergence at step 2: out.bias[1] = nan after the optimizer step (1 of 2 values are not "
               "finite; lr 0.1)");
  }
  BOOST_TEST(guard.step() == 2);  // the failed step is not counted
  // without an optimizer: the model's parameters, no lr
  DivergenceGuard plain(*model);
  BOOST_TEST(error_of([&] { plain.end_step(); }) ==
             "divergence at step 1: out.bias[1] = nan after the optimizer step (1 of 2 values are not "
             "finite)");
}

// A huge learning rate: the first step leaves every weight non-finite (fp32 --lr 1e308).
BOOST_AUTO_TEST_CASE(huge_learning_rate_stops_at_step_1) {
  auto model = net();
  SGD opt(model->named_parameters(), {.lr = 1e308});
  CosineAnnealingLR schedule(opt, 3);  // (1 + cos) / 2 before the product: no overflow to inf
  BOOST_TEST(opt.lr() == 1e308);
  DivergenceGuard guard(*model, opt);
  const std::string e = error_of<DivergenceError>([&] { step(*model, opt, guard, batch()); });
  BOOST_TEST(e.rfind("divergence at step 1: fc.weight[0, 0] = ", 0) == 0, e);
  BOOST_TEST(e.find("after the optimizer step") != std::string::npos, e);
  BOOST_TEST(e.find("lr 1e+308)") != std::string::npos, e);
}

BOOST_AUTO_TEST_CASE(bad_input_names_the_batch_index) {
  auto model = net();
  SGD opt(model->named_parameters(), {.lr = 0.1});
  DivergenceGuard guard(*model, opt);
  Tensor x = batch();
  x.data<float>()[5] = kNaN;
  try {
    step(*model, opt, guard, x);
    BOOST_FAIL("no error");
  } catch (const DivergenceError& e) {
    BOOST_TEST((e.kind() == DivergenceError::Kind::Input));
    BOOST_TEST(std::string(e.what()) ==
               "divergence at step 1: input[1, 1] = nan in the data (1 of 8 values are not finite)");
  }
  BOOST_TEST(error_of([&] { guard.check_input(x, "images"); }).find("images[1, 1] = nan") !=
             std::string::npos);
}

BOOST_AUTO_TEST_CASE(module_state_problems_name_the_module_and_the_note) {
  auto inner = std::make_shared<nn::Sequential>(nn::NamedModules{{"lv", std::make_shared<Leveled>()}});
  auto model = std::make_shared<nn::Sequential>(
      nn::NamedModules{{"fc", std::make_shared<nn::Linear>(4, 4)}, {"block", inner}});
  SGD opt(model->named_parameters(), {.lr = 0.1});
  DivergenceGuard guard(*model, opt);
  guard.end_step();
  std::dynamic_pointer_cast<Leveled>(inner->child("lv"))->level_.data<float>()[2] = -1;
  guard.set_note("the last checkpoint is kept");
  try {
    guard.end_step();
    BOOST_FAIL("no error");
  } catch (const DivergenceError& e) {
    BOOST_TEST((e.kind() == DivergenceError::Kind::State));
    BOOST_TEST(e.tensor() == "block.lv");
    BOOST_TEST(
        std::string(e.what()) ==
        "divergence at step 2: block.lv.level[2] = -1: not a level in [0, 1e+30] (1 of 3 values); "
        "the last checkpoint is kept");
  }
  // check_state off: only finiteness
  DivergenceGuard lax(*model, opt, {.check_state = false});
  BOOST_CHECK_NO_THROW(lax.end_step());
}

// every 3: gradients, parameters and state at steps 3, 6, ...; the loss at every step.
BOOST_AUTO_TEST_CASE(checks_every_n_steps) {
  auto model = net();
  SGD opt(model->named_parameters(), {.lr = 0.1});
  DivergenceGuard guard(*model, opt, {.every = 3});
  Tensor bias = model->submodule("fc")->parameter("bias");
  bias.data<float>()[0] = kNaN;
  BOOST_TEST(!guard.checks_this_step());
  BOOST_CHECK_NO_THROW(guard.end_step());  // step 1: unchecked
  BOOST_CHECK_NO_THROW(guard.end_step());  // step 2
  BOOST_TEST(guard.checks_this_step());
  BOOST_TEST(error_of([&] {
               guard.check_loss(Tensor::scalar(kNaN));
             }).rfind("divergence at step 3: the loss is nan", 0) == 0);
  BOOST_TEST(error_of([&] { guard.end_step(); }) ==
             "divergence at step 3: fc.bias[0] = nan after the optimizer step (1 of 3 values are not "
             "finite; lr 0.1) (checked every 3 steps: it began after step 0)");
  DivergenceGuard loss_only(*model, opt, {.every = 3});
  BOOST_TEST(error_of([&] { loss_only.check_loss(Tensor::scalar(kInf)); }) ==
             "divergence at step 1: the loss is inf");
}

// The innermost live guard is current(); modules report forward problems through it.
BOOST_AUTO_TEST_CASE(current_guard_follows_scopes) {
  auto model = net();
  BOOST_TEST(DivergenceGuard::current() == nullptr);
  {
    DivergenceGuard outer(*model, {.first_step = 7});
    BOOST_TEST(DivergenceGuard::current() == &outer);
    {
      DivergenceGuard inner(*model);
      BOOST_TEST(DivergenceGuard::current() == &inner);
    }
    BOOST_TEST(DivergenceGuard::current() == &outer);
    outer.set_note("kept");
    try {
      DivergenceGuard::current()->fail(DivergenceError::Kind::Forward, "fc", "fc: input[0] = nan");
      BOOST_FAIL("no error");
    } catch (const DivergenceError& e) {
      BOOST_TEST(std::string(e.what()) == "divergence at step 7: fc: input[0] = nan; kept");
      BOOST_TEST((e.kind() == DivergenceError::Kind::Forward));
      BOOST_TEST(e.tensor() == "fc");
    }
  }
  BOOST_TEST(DivergenceGuard::current() == nullptr);
  // out of order: the older one dies first
  auto a = std::make_unique<DivergenceGuard>(*model);
  auto b = std::make_unique<DivergenceGuard>(*model);
  a.reset();
  BOOST_TEST(DivergenceGuard::current() == b.get());
  b.reset();
  BOOST_TEST(DivergenceGuard::current() == nullptr);
}

BOOST_AUTO_TEST_CASE(options_are_checked) {
  auto model = net();
  BOOST_TEST(error_of([&] { DivergenceGuard(*model, {.every = 0}); }) ==
             "DivergenceGuard: every must be >= 1, got 0");
  BOOST_TEST(error_of([&] { DivergenceGuard(*model, {.first_step = 0}); }) ==
             "DivergenceGuard: first_step must be >= 1, got 0");
  DivergenceGuard guard(*model);
  BOOST_TEST(error_of([&] { guard.set_step(-5); }) ==
             "DivergenceGuard::set_step: step must be >= 1, got -5");
  guard.set_step(100);
  BOOST_TEST(guard.step() == 100);
}

// The checks make no tensor (the finite scan reads in place).
BOOST_AUTO_TEST_CASE(checks_allocate_no_tensor) {
  auto model = net();
  SGD opt(model->named_parameters(), {.lr = 0.1, .momentum = 0.9});
  DivergenceGuard guard(*model, opt, {.check_state = false});
  const Tensor x = batch();
  step(*model, opt, guard, x);
  opt.zero_grad();
  Tensor loss = cross_entropy(model->forward(x), Tensor::from_vector<std::int64_t>({0, 1}, Shape{2}));
  loss.backward();
  opt.step();
  const AllocatorStats before = CachingAllocator::cpu().stats();
  guard.check_input(x);
  guard.check_loss(loss);
  guard.check_gradients();
  guard.end_step();
  const AllocatorStats after = CachingAllocator::cpu().stats();
  BOOST_TEST(after.fresh_allocations == before.fresh_allocations);
  BOOST_TEST(after.reused_allocations == before.reused_allocations);
}

BOOST_AUTO_TEST_SUITE_END()
