#include <boost/test/unit_test.hpp>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>

#include "common/errors.h"
#include "common/golden.h"
#include "framework/autograd/ops.h"
#include "framework/optim/adam.h"
#include "framework/optim/lr_scheduler.h"
#include "framework/optim/sgd.h"
#include "framework/tensor/storage.h"
#include "framework/tensor/tensor.h"

using namespace qat;
using test::error_of;
using namespace qat::optim;

namespace {

constexpr int kSteps = 5;

double scalar_or(const test::GoldenCase& c, const std::string& key, double fallback) {
  return c.has(key) ? c.scalar(key) : fallback;
}

/// The optimizer a golden case describes, over `params`.
std::unique_ptr<Optimizer> make_optimizer(const test::GoldenCase& c, NamedTensors params) {
  const std::string& n = c.name;
  if (n.rfind("sgd", 0) == 0) {
    SGD::Options o;
    o.lr = c.scalar("lr");
    o.momentum = scalar_or(c, "momentum", 0);
    o.dampening = scalar_or(c, "dampening", 0);
    o.weight_decay = scalar_or(c, "weight_decay", 0);
    o.nesterov = scalar_or(c, "nesterov", 0) != 0;
    return std::make_unique<SGD>(std::move(params), o);
  }
  if (n.rfind("adamw", 0) == 0) {
    AdamW::Options o;
    o.lr = c.scalar("lr");
    o.betas = {scalar_or(c, "beta1", 0.9), scalar_or(c, "beta2", 0.999)};
    o.eps = scalar_or(c, "eps", 1e-8);
    o.weight_decay = scalar_or(c, "weight_decay", 1e-2);
    o.amsgrad = scalar_or(c, "amsgrad", 0) != 0;
    return std::make_unique<AdamW>(std::move(params), o);
  }
  Adam::Options o;
  o.lr = c.scalar("lr");
  o.betas = {scalar_or(c, "beta1", 0.9), scalar_or(c, "beta2", 0.999)};
  o.eps = scalar_or(c, "eps", 1e-8);
  o.weight_decay = scalar_or(c, "weight_decay", 0);
  o.amsgrad = scalar_or(c, "amsgrad", 0) != 0;
  return std::make_unique<Adam>(std::move(params), o);
}

NamedTensors start_params(const test::GoldenCase& c) {
  NamedTensors params;
  for (int j = 0; j < 2; ++j) {
    Tensor p = c.tensor("start" + std::to_string(j)).clone();
    p.requires_grad_();
    params.emplace_back("p" + std::to_string(j), p);
  }
  return params;
}

/// Sets the gradients of golden step k (a parameter without one is left undefined) and steps.
void golden_step(const test::GoldenCase& c, Optimizer& opt, int k) {
  opt.zero_grad();
  for (std::size_t j = 0; j < opt.params().size(); ++j) {
    const std::string key = "grad" + std::to_string(k) + "_" + std::to_string(j);
    Tensor p = opt.params()[j].second;  // a handle: set_grad reaches the parameter
    if (c.has(key)) p.set_grad(c.tensor(key).clone());
  }
  opt.step();
}

bool bit_equal(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() &&
         std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0;
}

const std::vector<test::GoldenCase>& golden() {
  static const auto cases = test::load_golden("golden/optim.txt");
  return cases;
}

const test::GoldenCase& golden_case(const std::string& name) {
  for (const auto& c : golden())
    if (c.name == name) return c;
  throw std::runtime_error("no golden case " + name);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(optim)

BOOST_AUTO_TEST_CASE(updates_match_pytorch) {
  int checked = 0;
  for (const auto& c : golden()) {
    if (!c.has("start0")) continue;
    BOOST_TEST_CONTEXT("case " << c.name) {
      auto opt = make_optimizer(c, start_params(c));
      double worst = 0;
      for (int k = 0; k < kSteps; ++k) {
        golden_step(c, *opt, k);
        for (std::size_t j = 0; j < 2; ++j) {
          const auto got = opt->params()[j].second.to_vector<float>();
          const auto want =
              c.tensor("after" + std::to_string(k) + "_" + std::to_string(j)).to_vector<float>();
          for (std::size_t i = 0; i < got.size(); ++i) {
            const double err =
                std::abs(double(got[i]) - want[i]) / std::max(1e-3, std::abs(double(want[i])));
            worst = std::max(worst, err);
            BOOST_TEST(err <= 1e-6, "step " << k << " p" << j << "[" << i << "]: " << got[i]
                                            << " vs PyTorch " << want[i]);
          }
        }
      }
      BOOST_TEST_MESSAGE(c.name << ": worst relative error " << worst);
      ++checked;
    }
  }
  BOOST_TEST(checked == 10);
}

BOOST_AUTO_TEST_CASE(skipped_parameter_keeps_its_own_step_count) {
  const auto& c = golden_case("adam");
  auto opt = make_optimizer(c, start_params(c));
  for (int k = 0; k < kSteps; ++k) golden_step(c, *opt, k);
  for (const auto& [name, t] : opt->state()) {
    if (name == "p0.step") BOOST_TEST(t.item() == 5);
    if (name == "p1.step") BOOST_TEST(t.item() == 4);  // no gradient at step 2
  }
}

BOOST_AUTO_TEST_CASE(schedules_match_pytorch) {
  for (const char* name : {"step_lr", "cosine_lr", "linear_lr"}) {
    BOOST_TEST_CONTEXT("case " << name) {
      const auto& c = golden_case(name);
      Tensor p = Tensor::zeros(Shape{1});
      p.requires_grad_();
      SGD opt({{"p", p}}, {.lr = c.scalar("base_lr")});
      std::unique_ptr<LRScheduler> sched;
      if (c.name == "step_lr")
        sched = std::make_unique<StepLR>(opt, std::int64_t(c.scalar("step_size")), c.scalar("gamma"));
      else if (c.name == "cosine_lr")
        sched = std::make_unique<CosineAnnealingLR>(opt, std::int64_t(c.scalar("T_max")),
                                                    c.scalar("eta_min"));
      else
        sched = std::make_unique<LinearLR>(opt, c.scalar("start_factor"), c.scalar("end_factor"),
                                           std::int64_t(c.scalar("total_iters")));
      const auto want = c.tensor("lr").to_vector<double>();
      for (std::size_t e = 0; e < want.size(); ++e) {
        if (e > 0) sched->step();
        BOOST_TEST(sched->epoch() == std::int64_t(e));
        BOOST_TEST(std::abs(opt.lr() - want[e]) <= 1e-12 * want[e] + 1e-18,
                   "epoch " << e << ": " << opt.lr() << " vs PyTorch " << want[e]);
      }
      // resuming jumps straight to an epoch
      sched->set_epoch(3);
      BOOST_TEST(std::abs(opt.lr() - want[3]) <= 1e-12 * want[3]);
    }
  }
}

BOOST_AUTO_TEST_CASE(state_round_trip_resumes_bit_exactly) {
  for (const char* name :
       {"sgd_nesterov", "sgd_dampening", "adam_weight_decay", "adam_amsgrad", "adamw_amsgrad"}) {
    BOOST_TEST_CONTEXT("case " << name) {
      const auto& c = golden_case(name);
      auto full = make_optimizer(c, start_params(c));
      for (int k = 0; k < kSteps; ++k) golden_step(c, *full, k);

      auto first = make_optimizer(c, start_params(c));
      for (int k = 0; k < 3; ++k) golden_step(c, *first, k);
      const NamedTensors saved = first->state();
      NamedTensors params;
      for (const auto& [pname, p] : first->params()) {
        Tensor copy = p.clone();
        copy.requires_grad_();
        params.emplace_back(pname, copy);
      }
      auto resumed = make_optimizer(c, params);
      resumed->load_state(saved);
      first.reset();  // the restored state must not alias the old optimizer's
      for (int k = 3; k < kSteps; ++k) golden_step(c, *resumed, k);

      for (std::size_t j = 0; j < 2; ++j)
        BOOST_TEST(bit_equal(resumed->params()[j].second, full->params()[j].second));
      const NamedTensors a = resumed->state(), b = full->state();
      BOOST_TEST_REQUIRE(a.size() == b.size());
      for (std::size_t i = 0; i < a.size(); ++i) {
        BOOST_TEST(a[i].first == b[i].first);
        BOOST_TEST(bit_equal(a[i].second, b[i].second), a[i].first);
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(state_names_kind_and_hyperparameters) {
  const auto& c = golden_case("adam_amsgrad");
  auto adam = make_optimizer(c, start_params(c));
  BOOST_TEST(adam->state().empty());  // created on the first update
  golden_step(c, *adam, 0);
  std::vector<std::string> names;
  for (const auto& [n, t] : adam->state()) names.push_back(n);
  const std::vector<std::string> expect{"p0.step", "p0.exp_avg", "p0.exp_avg_sq", "p0.max_exp_avg_sq",
                                        "p1.step", "p1.exp_avg", "p1.exp_avg_sq", "p1.max_exp_avg_sq"};
  BOOST_TEST(names == expect, boost::test_tools::per_element());
  BOOST_TEST(adam->kind() == "adam");
  const auto h = adam->hyperparameters();
  BOOST_TEST(h.at("lr") == 1e-2);
  BOOST_TEST(h.at("beta2") == 0.999);
  BOOST_TEST(h.at("amsgrad") == 1.0);

  const auto& cs = golden_case("sgd_momentum");
  auto sgd = make_optimizer(cs, start_params(cs));
  golden_step(cs, *sgd, 0);
  BOOST_TEST(sgd->kind() == "sgd");
  BOOST_TEST(sgd->state().size() == 2u);
  BOOST_TEST(sgd->state()[1].first == "p1.momentum_buffer");
  BOOST_TEST(sgd->hyperparameters().at("momentum") == 0.9);
  BOOST_TEST(make_optimizer(golden_case("adamw"), start_params(cs))->kind() == "adamw");
  // plain SGD keeps no state
  auto plain = make_optimizer(golden_case("sgd_plain"), start_params(cs));
  golden_step(golden_case("sgd_plain"), *plain, 0);
  BOOST_TEST(plain->state().empty());
}

BOOST_AUTO_TEST_CASE(load_state_rejects_bad_entries_and_changes_nothing) {
  const auto& c = golden_case("adam");
  auto opt = make_optimizer(c, start_params(c));
  golden_step(c, *opt, 0);
  const NamedTensors good = opt->state();
  auto with = [&](auto edit) {
    NamedTensors s = good;
    edit(s);
    return error_of([&] { opt->load_state(s); });
  };
  BOOST_TEST(
      with([](NamedTensors& s) { s[1].first = "fc9.weight.exp_avg"; }) ==
      "Optimizer::load_state: entry 'fc9.weight.exp_avg' names no parameter of this adam optimizer");
  BOOST_TEST(
      with([](NamedTensors& s) { s[1].first = "p0.momentum_buffer"; }) ==
      "Optimizer::load_state: entry 'p0.momentum_buffer': adam keeps no state slot 'momentum_buffer'");
  BOOST_TEST(with([](NamedTensors& s) {
               s[1].second = Tensor::zeros(Shape{4, 3});
             }) == "Optimizer::load_state: entry 'p0.exp_avg' is float32[4, 3], expected float32[3, 4]");
  BOOST_TEST(with([](NamedTensors& s) {
               s[2].second = Tensor::zeros(Shape{3, 4}, DType::Float64);
             }) ==
             "Optimizer::load_state: entry 'p0.exp_avg_sq' is float64[3, 4], expected float32[3, 4]");
  BOOST_TEST(with([](NamedTensors& s) { s[0].second = Tensor::scalar(1.0); }) ==
             "Optimizer::load_state: entry 'p0.step' is float32[], expected int64[]");
  BOOST_TEST(with([](NamedTensors& s) { s[0].second = Tensor::scalar(-2, DType::Int64); }) ==
             "Optimizer::load_state: entry 'p0.step' must be >= 0, got -2");
  BOOST_TEST(with([](NamedTensors& s) { s.erase(s.begin() + 4); }) ==
             "Optimizer::load_state: entry 'p1.exp_avg' is missing (a parameter needs all of its state "
             "slots or none)");
  BOOST_TEST(with([](NamedTensors& s) { s.push_back(s[0]); }) ==
             "Optimizer::load_state: entry 'p0.step' appears twice");
  BOOST_TEST(with([](NamedTensors& s) { s[5].first = "noname"; }) ==
             "Optimizer::load_state: entry 'noname' names no parameter of this adam optimizer");
  // nothing changed: the state is still the one saved
  const NamedTensors now = opt->state();
  BOOST_TEST_REQUIRE(now.size() == good.size());
  for (std::size_t i = 0; i < now.size(); ++i) BOOST_TEST(bit_equal(now[i].second, good[i].second));
  // all or nothing per parameter: an empty state resets every parameter
  opt->load_state({});
  BOOST_TEST(opt->state().empty());
  NamedTensors only_p1(good.begin() + 3, good.end());
  opt->load_state(only_p1);
  BOOST_TEST(opt->state().size() == 3u);
}

BOOST_AUTO_TEST_CASE(constructor_errors_name_function_argument_and_value) {
  Tensor p = Tensor::zeros(Shape{2});
  p.requires_grad_();
  const NamedTensors ps{{"w", p}};
  BOOST_TEST(error_of([&] { SGD(ps, {.lr = -0.1}); }) == "SGD: lr must be >= 0, got -0.1");
  BOOST_TEST(error_of([&] { SGD(ps, {.lr = 0.1, .momentum = -1}); }) ==
             "SGD: momentum must be >= 0, got -1");
  BOOST_TEST(error_of([&] { SGD(ps, {.lr = 0.1, .weight_decay = -1e-4}); }) ==
             "SGD: weight_decay must be >= 0, got -0.0001");
  BOOST_TEST(error_of([&] { SGD(ps, {.lr = 0.1, .nesterov = true}); }) ==
             "SGD: nesterov requires momentum > 0 and dampening == 0, got momentum 0 and dampening 0");
  BOOST_TEST(
      error_of([&] { SGD(ps, {.lr = 0.1, .momentum = 0.9, .dampening = 0.1, .nesterov = true}); }) ==
      "SGD: nesterov requires momentum > 0 and dampening == 0, got momentum 0.9 and dampening 0.1");
  BOOST_TEST(error_of([&] {
               Adam(ps, {.betas = {1.0, 0.999}});
             }) == "Adam: betas[0] must be in [0, 1), got 1");
  BOOST_TEST(error_of([&] {
               Adam(ps, {.betas = {0.9, -0.5}});
             }) == "Adam: betas[1] must be in [0, 1), got -0.5");
  BOOST_TEST(error_of([&] { Adam(ps, {.eps = 0}); }) == "Adam: eps must be > 0, got 0");
  BOOST_TEST(error_of([&] { AdamW(ps, {.lr = -1}); }) == "AdamW: lr must be >= 0, got -1");
  BOOST_TEST(error_of([&] { AdamW(ps, {.weight_decay = -1}); }) ==
             "AdamW: weight_decay must be >= 0, got -1");

  Tensor leaf = Tensor::zeros(Shape{2}, DType::Float64);
  leaf.requires_grad_(true);
  Tensor derived = leaf * 2.0;
  BOOST_TEST(error_of([&] {
               SGD({{"derived", derived}}, {});
             }) == "SGD: parameter 'derived' must be a leaf tensor (not produced by an op)");
  Tensor frozen = Tensor::zeros(Shape{2});  // accepted; skipped while it has no gradient
  SGD frozen_ok({{"frozen", frozen}}, {.lr = 0.1});
  frozen_ok.step();
  BOOST_TEST(frozen.to_vector<float>() == std::vector<float>(2, 0.0f), boost::test_tools::per_element());
  BOOST_TEST(error_of([&] {
               SGD({{"idx", Tensor::zeros(Shape{2}, DType::Int64)}}, {});
             }) == "SGD: parameter 'idx' must be a float32 or float64 tensor, got int64 on cpu");
  BOOST_TEST(error_of([&] {
               SGD({{"u", Tensor()}}, {});
             }) == "SGD: parameter 'u' is an undefined tensor");
  BOOST_TEST(error_of([&] {
               SGD({{"w", p}, {"w", p}}, {});
             }) == "SGD: parameter name 'w' appears twice");

  SGD ok(ps, {.lr = 0.1});
  BOOST_TEST(error_of([&] { ok.set_lr(-3); }) == "Optimizer::set_lr: lr must be >= 0, got -3");
  BOOST_TEST(error_of([&] { StepLR(ok, 0); }) == "StepLR: step_size must be >= 1, got 0");
  BOOST_TEST(error_of([&] { StepLR(ok, 2, -0.5); }) == "StepLR: gamma must be >= 0, got -0.5");
  BOOST_TEST(error_of([&] { CosineAnnealingLR(ok, 0); }) ==
             "CosineAnnealingLR: T_max must be >= 1, got 0");
  BOOST_TEST(error_of([&] { CosineAnnealingLR(ok, 5, -1); }) ==
             "CosineAnnealingLR: eta_min must be >= 0, got -1");
  BOOST_TEST(error_of([&] { LinearLR(ok, 1.5); }) ==
             "LinearLR: start_factor must be in [0, 1], got 1.5");
  BOOST_TEST(error_of([&] { LinearLR(ok, 0.5, 1.0, 0); }) ==
             "LinearLR: total_iters must be >= 1, got 0");
  StepLR sched(ok, 2);
  BOOST_TEST(error_of([&] { sched.set_epoch(-1); }) ==
             "LRScheduler::set_epoch: epoch must be >= 0, got -1");
}

BOOST_AUTO_TEST_CASE(steps_after_the_first_allocate_nothing) {
  for (const char* name : {"sgd_nesterov", "adam_amsgrad", "adamw"}) {
    BOOST_TEST_CONTEXT("case " << name) {
      const auto& c = golden_case(name);
      auto opt = make_optimizer(c, start_params(c));
      golden_step(c, *opt, 0);  // creates the state
      const auto before = CachingAllocator::cpu().stats();
      for (int i = 0; i < 3; ++i) opt->step();  // same gradients: fused in place, no temporaries
      const auto after = CachingAllocator::cpu().stats();
      BOOST_TEST(after.fresh_allocations == before.fresh_allocations);
      BOOST_TEST(after.reused_allocations == before.reused_allocations);
    }
  }
}

BOOST_AUTO_TEST_CASE(zero_grad_step_and_float64) {
  Tensor w = Tensor::from_vector<double>({1.0, -2.0, 0.5}, Shape{3});
  w.requires_grad_();
  SGD opt({{"w", w}}, {.lr = 0.25});
  opt.step();  // no gradient yet: nothing happens
  BOOST_TEST(w.to_vector<double>() == (std::vector<double>{1.0, -2.0, 0.5}),
             boost::test_tools::per_element());
  w.set_grad(Tensor::from_vector<double>({4.0, 1.0, -2.0}, Shape{3}));
  opt.step();  // p -= 0.25 * g, exact in binary
  BOOST_TEST(w.to_vector<double>() == (std::vector<double>{0.0, -2.25, 1.0}),
             boost::test_tools::per_element());
  opt.zero_grad();
  BOOST_TEST(!w.grad().defined());
  opt.set_lr(0.5);
  BOOST_TEST(opt.lr() == 0.5);
  BOOST_TEST(opt.hyperparameters().at("lr") == 0.5);
}

BOOST_AUTO_TEST_SUITE_END()
