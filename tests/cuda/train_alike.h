#pragma once
// Device tests: one model trained on the CPU and its copy on CUDA, 20 SGD steps from the same
// seed and data; losses within 1e-4 relative at every step, parameters within 1e-3 of their range
// (of their magnitude for one value) at the end (float32 GEMMs and sums in another order move a
// fake-quantized value by a step now and then, which these bounds absorb).
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "cuda_test_util.h"
#include "framework/autograd/ops.h"
#include "framework/nn/nn.h"
#include "framework/optim/sgd.h"
#include "framework/tensor/random.h"
#include "modules/quant/prepare.h"
#include "modules/quant/qconfig.h"
#include "modules/quant/stubs.h"

namespace qat::test {

/// A small MLP (23 -> 31 -> 5 between QuantStub / DeQuantStub) prepared for QAT with `preset`.
inline nn::ModulePtr qat_mlp(const std::string& preset = "int8_default") {
  manual_seed(4);
  using namespace nn;
  auto net = std::make_shared<Sequential>();
  net->push_back("quant", std::make_shared<quant::QuantStub>());
  net->push_back("fc1", std::make_shared<Linear>(23, 31));
  net->push_back("relu", std::make_shared<ReLU>());
  net->push_back("fc2", std::make_shared<Linear>(31, 5));
  net->push_back("dequant", std::make_shared<quant::DeQuantStub>());
  quant::QConfigRegistry registry;
  registry.set_global(preset);
  quant::prepare_qat(*net, registry);
  return net;
}

/// `h` on the CPU, `d` an identical model (moved to CUDA here); inputs of `input` shape in [-1, 1]
/// from `seed`, labels below `classes`; SGD with momentum 0.9 at `lr`.
inline void require_trains_alike(const nn::ModulePtr& h, const nn::ModulePtr& d, const Shape& input,
                                 std::uint64_t seed, std::uint64_t classes = 5, double lr = 0.02) {
  d->to(Device::CUDA);
  h->train(), d->train();
  optim::SGD oh(h->named_parameters(), {.lr = lr, .momentum = 0.9});
  optim::SGD od(d->named_parameters(), {.lr = lr, .momentum = 0.9});
  Generator gen(seed);
  for (int step = 0; step < 20; ++step) {
    const Tensor x = rnd(input, seed * 100 + step, -1, 1);
    std::vector<std::int64_t> y(input[0]);
    for (auto& v : y) v = static_cast<std::int64_t>(gen.below(classes));
    const Tensor labels = Tensor::from_vector(y, Shape{input[0]});
    oh.zero_grad(), od.zero_grad();
    const Tensor lh = cross_entropy((*h)(x), labels);
    const Tensor ld = cross_entropy((*d)(x.to(Device::CUDA)), labels.to(Device::CUDA));
    BOOST_TEST_CONTEXT("step " << step) {
      BOOST_TEST(std::abs(lh.item() - ld.item()) <= 1e-4 * std::max(1.0, std::abs(lh.item())));
    }
    lh.backward();
    ld.backward();
    oh.step(), od.step();
  }
  const NamedTensors ph = h->named_parameters(), pd = d->named_parameters();
  BOOST_REQUIRE_EQUAL(ph.size(), pd.size());
  for (std::size_t i = 0; i < ph.size(); ++i) BOOST_TEST_CONTEXT(ph[i].first) {
      BOOST_TEST((pd[i].second.device() == Device::CUDA));
      const std::vector<float> a = ph[i].second.to_vector<float>(), b = pd[i].second.to_vector<float>();
      // 1e-3 of the range, or of the magnitude where there is no range (one value: a scale)
      float lo = std::numeric_limits<float>::infinity(), hi = -lo, mag = 0;
      for (float v : a) lo = std::min(lo, v), hi = std::max(hi, v), mag = std::max(mag, std::abs(v));
      const double tol = 1e-3 * std::max({1e-6f, hi - lo, mag});
      for (std::size_t k = 0; k < a.size(); ++k)
        if (!(std::abs(a[k] - b[k]) <= tol))
          BOOST_FAIL("element " << k << ": cpu " << a[k] << ", cuda " << b[k] << " (tol " << tol << ")");
    }
}

}  // namespace qat::test
