#include <boost/test/unit_test.hpp>
#include <cmath>

#include "framework/autograd/ops.h"
#include "framework/nn/nn.h"
#include "framework/tensor/random.h"

using namespace qat;
namespace tt = boost::test_tools;

namespace {
nn::ModulePtr make_cnn() {
  auto features = std::make_shared<nn::Sequential>(std::initializer_list<nn::ModulePtr>{
      std::make_shared<nn::Conv2d>(1, 4, 3, Conv2dParams{.padding = {1, 1}}),
      std::make_shared<nn::BatchNorm2d>(4), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::MaxPool2d>(2)});
  auto net = std::make_shared<nn::Sequential>();
  net->push_back("features", features);
  net->push_back("flatten", std::make_shared<nn::Flatten>());
  net->push_back("fc", std::make_shared<nn::Linear>(4 * 4 * 4, 3));
  return net;
}

std::vector<std::string> names(const NamedTensors& v) {
  std::vector<std::string> out;
  for (const auto& [n, t] : v) out.push_back(n);
  return out;
}
}  // namespace

BOOST_AUTO_TEST_SUITE(nn_modules)

BOOST_AUTO_TEST_CASE(dotted_names_for_parameters_buffers_modules) {
  auto net = make_cnn();
  const std::vector<std::string> params{"features.0.weight", "features.0.bias", "features.1.weight",
                                        "features.1.bias",   "fc.weight",       "fc.bias"};
  BOOST_TEST(names(net->named_parameters()) == params, tt::per_element());
  const std::vector<std::string> buffers{"features.1.running_mean", "features.1.running_var",
                                         "features.1.num_batches_tracked"};
  BOOST_TEST(names(net->named_buffers()) == buffers, tt::per_element());
  std::vector<std::string> mods;
  for (auto& [n, m] : net->named_modules()) mods.push_back(n + ":" + m->type_name());
  const std::vector<std::string> expect{
      ":Sequential",     "features:Sequential",  "features.0:Conv2d", "features.1:BatchNorm2d",
      "features.2:ReLU", "features.3:MaxPool2d", "flatten:Flatten",   "fc:Linear"};
  BOOST_TEST(mods == expect, tt::per_element());
  BOOST_TEST(net->num_parameters() == (4 * 9 + 4) + (4 + 4) + (64 * 3 + 3));
  BOOST_TEST(net->submodule("features.1")->type_name() == "BatchNorm2d");
  BOOST_CHECK_THROW(net->submodule("features.9"), Error);
  BOOST_TEST(names(net->named_state()).size() == params.size() + buffers.size());
}

BOOST_AUTO_TEST_CASE(registration_errors) {
  nn::Linear lin(3, 2);
  BOOST_CHECK_THROW(lin.register_parameter("weight", Tensor::zeros(Shape{1})), Error);
  BOOST_CHECK_THROW(lin.register_buffer("a.b", Tensor::zeros(Shape{1})), Error);
  BOOST_CHECK_THROW(lin.register_parameter("i", Tensor::zeros(Shape{1}, DType::Int32)), Error);
  BOOST_CHECK_THROW(lin.child("x"), Error);
  try {
    lin.parameter("gamma");
    BOOST_FAIL("expected an error");
  } catch (const Error& e) {
    BOOST_TEST(std::string(e.what()) == "Module::parameter: Linear has no parameter 'gamma'");
  }
  BOOST_CHECK_THROW(nn::Linear(0, 3), Error);
  BOOST_CHECK_THROW(nn::Conv2d(3, 4, 3, Conv2dParams{.groups = 2}), Error);
}

BOOST_AUTO_TEST_CASE(train_eval_propagates_and_replace_child) {
  auto net = make_cnn();
  net->eval();
  for (auto& [n, m] : net->named_modules()) BOOST_TEST(!m->is_training());
  net->train();
  auto seq = std::dynamic_pointer_cast<nn::Sequential>(net->child("features"));
  auto old_relu = (*seq)[2];
  net->eval();
  seq->replace_child("2", std::make_shared<nn::Identity>());
  BOOST_TEST((*seq)[2]->type_name() == "Identity");
  BOOST_TEST(!(*seq)[2]->is_training());  // takes the parent's mode
  BOOST_CHECK_THROW(seq->replace_child("7", std::make_shared<nn::Identity>()), Error);
}

BOOST_AUTO_TEST_CASE(default_init_bounds_follow_pytorch) {
  manual_seed(3);
  nn::Linear lin(400, 300);
  const double bound = 1.0 / std::sqrt(400.0);
  double sq = 0, mx = 0;
  for (float v : lin.weight().to_vector<float>()) {
    mx = std::max(mx, std::abs(double(v)));
    sq += double(v) * v;
  }
  BOOST_TEST(mx <= bound);
  BOOST_TEST(mx > 0.99 * bound);
  // U(-b, b) has variance b^2 / 3
  BOOST_TEST(sq / lin.weight().numel() == bound * bound / 3, tt::tolerance(0.02));
  for (float v : lin.bias().to_vector<float>()) BOOST_TEST(std::abs(v) <= bound);
  nn::Conv2d conv(16, 32, 5);
  const double cb = 1.0 / std::sqrt(16.0 * 25.0);
  for (float v : conv.weight().to_vector<float>()) BOOST_TEST(std::abs(v) <= cb);
  for (float v : conv.bias().to_vector<float>()) BOOST_TEST(std::abs(v) <= cb);
  // same seed, same weights
  manual_seed(3);
  nn::Linear again(400, 300);
  BOOST_TEST(again.weight().to_vector<float>() == lin.weight().to_vector<float>(), tt::per_element());
}

BOOST_AUTO_TEST_CASE(forward_backward_and_zero_grad) {
  manual_seed(0);
  auto net = make_cnn();
  Generator gen(1);
  Tensor x = Tensor::uniform(Shape{2, 1, 8, 8}, 0, 1, gen);
  Tensor y = net->forward(x);
  BOOST_TEST(y.shape() == (Shape{2, 3}));
  cross_entropy(y, Tensor::from_vector<std::int64_t>({0, 2}, Shape{2})).backward();
  for (auto& [n, p] : net->named_parameters()) BOOST_TEST(p.grad().defined(), n);
  auto bn = std::dynamic_pointer_cast<nn::BatchNorm2d>(net->submodule("features.1"));
  BOOST_TEST(bn->buffer("num_batches_tracked").item() == 1.0);
  BOOST_TEST(bn->running_mean().to_vector<float>() != std::vector<float>(4, 0.0f));
  net->zero_grad();
  for (auto& [n, p] : net->named_parameters()) BOOST_TEST(!p.grad().defined(), n);
  net->eval();
  Tensor y1 = net->forward(x), y2 = net->forward(x);
  BOOST_TEST(y1.to_vector<float>() == y2.to_vector<float>(), tt::per_element());
  BOOST_TEST(bn->buffer("num_batches_tracked").item() == 1.0);
  BOOST_CHECK_THROW(net->forward(Tensor::zeros(Shape{2, 3, 8, 8})), Error);
}

BOOST_AUTO_TEST_CASE(summary_lists_every_module) {
  auto net = make_cnn();
  const std::string s = net->summary();
  BOOST_TEST(s.find("features.0") != std::string::npos);
  BOOST_TEST(s.find("weight[4, 1, 3, 3]") != std::string::npos);
  BOOST_TEST(s.find("in_features=64, out_features=3") != std::string::npos);
  BOOST_TEST(s.find("total parameters: 243") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(dropout_module_modes) {
  nn::Dropout d(0.5);
  Tensor x = Tensor::ones(Shape{1000});
  auto v = d.forward(x).to_vector<float>();
  int zeros = 0;
  for (float e : v) {
    BOOST_TEST((e == 0.0f || e == 2.0f));
    zeros += e == 0.0f;
  }
  BOOST_TEST(std::abs(zeros - 500) < 80);
  d.eval();
  BOOST_TEST(d.forward(x).to_vector<float>() == x.to_vector<float>(), tt::per_element());
  BOOST_CHECK_THROW(nn::Dropout(1.5), Error);
}

// Sequential hands a child followed by a max pool (through Identity children) to the child's
// forward_max_pooled, unless a hook watches; a child without such a path runs as before.
namespace {
struct Doubler : nn::Module {
  int pooled_calls = 0;
  bool can_pool = true;
  Doubler() : nn::Module("Doubler") {}
  Tensor forward(const Tensor& x) override { return mul(x, Tensor::full(Shape{1}, 2.0f, x.dtype())); }
  Tensor forward_max_pooled(const Tensor& x, const Pool2dParams& p) override {
    if (!can_pool) return Tensor();
    ++pooled_calls;
    return max_pool2d(forward(x), p);
  }
};
}  // namespace

BOOST_AUTO_TEST_CASE(sequential_fuses_a_max_pool_into_the_child_before_it) {
  Generator gen(3);
  const Tensor x = Tensor::uniform(Shape{2, 3, 6, 5}, -1, 1, gen);
  auto d = std::make_shared<Doubler>();
  auto id = std::make_shared<nn::Identity>();
  nn::Sequential seq(
      nn::NamedModules{{"d", d}, {"id", id}, {"pool", std::make_shared<nn::MaxPool2d>(2)}});
  const Tensor want = max_pool2d(d->forward(x), Pool2dParams{});
  Tensor y = seq(x);
  BOOST_TEST(d->pooled_calls == 1);
  BOOST_TEST(y.to_vector<float>() == want.to_vector<float>(), tt::per_element());
  d->can_pool = false;  // no fused path: the three children one by one
  y = seq(x);
  BOOST_TEST(d->pooled_calls == 1);
  BOOST_TEST(y.to_vector<float>() == want.to_vector<float>(), tt::per_element());
  d->can_pool = true;
  int seen = 0;  // a hook on the Identity sees its call: no fusion
  const std::int64_t h =
      id->register_forward_hook([&](nn::Module&, const std::vector<Tensor>&, Tensor&) { ++seen; });
  y = seq(x);
  BOOST_TEST(seen == 1);
  BOOST_TEST(d->pooled_calls == 1);
  BOOST_TEST(y.to_vector<float>() == want.to_vector<float>(), tt::per_element());
  id->remove_hook(h);
  // anything but Identity between them: no fusion
  nn::Sequential other(nn::NamedModules{
      {"d", d}, {"relu", std::make_shared<nn::ReLU>()}, {"pool", std::make_shared<nn::MaxPool2d>(2)}});
  other(x);
  BOOST_TEST(d->pooled_calls == 1);
}

BOOST_AUTO_TEST_SUITE_END()

#include "framework/optim/sgd.h"
#include "framework/tensor/storage.h"

BOOST_AUTO_TEST_SUITE(nn_training)

// In steady state a training step (forward, backward, optimizer) takes every tensor buffer
// from the caching pool: no fresh allocation after the first steps.
BOOST_AUTO_TEST_CASE(training_step_allocates_no_new_buffers) {
  manual_seed(9);
  auto net = make_cnn();
  optim::SGD opt(net->named_parameters(), {.lr = 0.05, .momentum = 0.9});
  Generator gen(10);
  Tensor x = Tensor::uniform(Shape{8, 1, 8, 8}, 0, 1, gen);
  Tensor y = Tensor::from_vector<std::int64_t>({0, 1, 2, 0, 1, 2, 0, 1}, Shape{8});
  double first = 0, last = 0;
  std::uint64_t fresh = 0;
  for (int step = 0; step < 60; ++step) {
    if (step == 3) fresh = CachingAllocator::cpu().stats().fresh_allocations;
    opt.zero_grad();
    Tensor loss = cross_entropy(net->forward(x), y);
    loss.backward();
    opt.step();
    (step == 0 ? first : last) = loss.item();
  }
  BOOST_TEST(CachingAllocator::cpu().stats().fresh_allocations == fresh);
  BOOST_TEST(last < 0.2 * first);
}

// Same seed, one thread: two runs are bit-identical (initialisation, data, dropout, updates).
BOOST_AUTO_TEST_CASE(same_seed_same_bits) {
  auto run = [] {
    manual_seed(21);
    auto net = make_cnn();
    auto drop = std::make_shared<nn::Dropout>(0.3);
    optim::SGD opt(net->named_parameters(), {.lr = 0.05, .momentum = 0.9});
    Generator gen(22);
    Tensor x = Tensor::uniform(Shape{8, 1, 8, 8}, 0, 1, gen);
    Tensor y = Tensor::from_vector<std::int64_t>({0, 1, 2, 0, 1, 2, 0, 1}, Shape{8});
    for (int step = 0; step < 10; ++step) {
      opt.zero_grad();
      cross_entropy(drop->forward(net->forward(x)), y).backward();
      opt.step();
    }
    std::vector<float> all;
    for (auto& [n, p] : net->named_parameters())
      for (float v : p.to_vector<float>()) all.push_back(v);
    return all;
  };
  const auto a = run(), b = run();
  BOOST_TEST(a == b, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_SUITE_END()
