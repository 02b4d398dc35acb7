// Training does not depend on the thread count: a small CNN (conv, batch norm, ReLU, max pool,
// grouped strided conv, linear) trained for a few SGD steps with 1, 2 and 3 threads ends with
// bit-identical parameters. Sizes are above the parallel thresholds of conv, pooling, ReLU and
// batch norm, so every parallel path runs: conv1's dW (25 taps) sums fixed parts of the batch,
// the other convs' dW split their rows.
#include <boost/test/unit_test.hpp>
#include <cstring>

#include "framework/autograd/ops.h"
#include "framework/nn/nn.h"
#include "framework/optim/sgd.h"
#include "framework/tensor/parallel.h"
#include "framework/tensor/random.h"

using namespace qat;

namespace {
nn::ModulePtr make_net() {
  auto net = std::make_shared<nn::Sequential>();
  net->push_back("conv1", std::make_shared<nn::Conv2d>(1, 16, 5, Conv2dParams{.padding = {2, 2}}));
  net->push_back("bn1", std::make_shared<nn::BatchNorm2d>(16));
  net->push_back("relu1", std::make_shared<nn::ReLU>());
  net->push_back("pool1", std::make_shared<nn::MaxPool2d>(2));
  net->push_back("conv2", std::make_shared<nn::Conv2d>(16, 32, 3, Conv2dParams{.padding = {1, 1}}));
  net->push_back("relu2", std::make_shared<nn::ReLU>());
  net->push_back("conv3",
                 std::make_shared<nn::Conv2d>(
                     32, 32, 3, Conv2dParams{.stride = {2, 2}, .padding = {1, 1}, .groups = 2}));
  net->push_back("relu3", std::make_shared<nn::ReLU>());
  net->push_back("flatten", std::make_shared<nn::Flatten>());
  net->push_back("fc", std::make_shared<nn::Linear>(32 * 5 * 5, 10));
  return net;
}

// the parameters and batch-norm buffers after `steps` SGD steps, as raw bits
std::vector<std::uint32_t> train(int threads, int steps) {
  const int saved = get_num_threads();
  set_num_threads(threads);
  manual_seed(5);
  auto net = make_net();
  optim::SGD opt(net->named_parameters(), {.lr = 0.05, .momentum = 0.9});
  Generator gen(6);
  const std::int64_t N = 40;
  Tensor x = Tensor::normal(Shape{N, 1, 20, 20}, 0, 1, gen);
  std::vector<std::int64_t> labels(N);
  for (std::int64_t i = 0; i < N; ++i) labels[i] = (i * 7) % 10;
  Tensor y = Tensor::from_vector<std::int64_t>(labels, Shape{N});
  for (int s = 0; s < steps; ++s) {
    opt.zero_grad();
    cross_entropy(net->forward(x), y).backward();
    opt.step();
  }
  set_num_threads(saved);
  std::vector<std::uint32_t> bits;
  auto add = [&](const Tensor& t) {
    const std::vector<float> v = t.to_vector<float>();
    const std::size_t at = bits.size();
    bits.resize(at + v.size());
    std::memcpy(bits.data() + at, v.data(), v.size() * sizeof(float));
  };
  for (const auto& [name, p] : net->named_parameters()) add(p);
  for (const auto& [name, b] : net->named_buffers())
    if (b.dtype() == DType::Float32) add(b);
  return bits;
}
}  // namespace

BOOST_AUTO_TEST_SUITE(threads)

BOOST_AUTO_TEST_CASE(cnn_training_bit_identical_across_thread_counts) {
  // on the kernel path that QAT_CPU selects (ctest runs test_nn once per path)
  const std::vector<std::uint32_t> one = train(1, 3);
  BOOST_TEST(!one.empty());
  for (int t : {2, 3}) {
    const std::vector<std::uint32_t> other = train(t, 3);
    BOOST_TEST_INFO("threads " << t);
    BOOST_TEST((other == one));
  }
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(threads_ops)

// Broadcast arithmetic split over threads at element granularity (rows cut anywhere): the
// same bits as one thread, which match the scalar formula; the gradient of a broadcast operand
// (row sums over threads, added in order) too.
BOOST_AUTO_TEST_CASE(broadcast_binary_bit_identical_across_thread_counts) {
  Generator gen(8);
  Tensor a = Tensor::normal(Shape{7, 13, 31, 29}, 0, 1, gen);
  Tensor c = Tensor::uniform(Shape{1, 13, 1, 1}, 0.5, 1.5, gen);
  Tensor w = Tensor::normal(Shape{29}, 0, 1, gen);
  auto run = [&](int threads) {
    const int saved = get_num_threads();
    set_num_threads(threads);
    std::vector<float> out = div(a, c).to_vector<float>();
    Tensor cg = c.detach().requires_grad_();  // its gradient sums rows of H*W (sum_to)
    sum(mul(a, cg)).backward();
    for (const Tensor& t : {add(a, w), mul(c, a), neg(a), cg.grad()}) {
      const auto v = t.to_vector<float>();
      out.insert(out.end(), v.begin(), v.end());
    }
    set_num_threads(saved);
    return out;
  };
  const std::vector<float> one = run(1);
  const auto va = a.to_vector<float>(), vc = c.to_vector<float>(), vw = w.to_vector<float>();
  const std::size_t n = va.size(), plane = 31 * 29;
  bool ok = true;
  for (std::size_t i = 0; i < n; ++i) {
    const float ci = vc[(i / plane) % 13];
    ok = ok && one[i] == va[i] / ci && one[n + i] == va[i] + vw[i % 29] &&
         one[2 * n + i] == ci * va[i] && one[3 * n + i] == -va[i];
  }
  BOOST_TEST(ok);
  for (int t : {2, 3}) {
    BOOST_TEST_INFO("threads " << t);
    const std::vector<float> other = run(t);
    BOOST_TEST(std::memcmp(other.data(), one.data(), one.size() * sizeof(float)) == 0);
  }
}

BOOST_AUTO_TEST_SUITE_END()
