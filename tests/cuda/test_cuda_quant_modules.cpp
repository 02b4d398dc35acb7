// The learnable and FP8 quantizer modules on CUDA (device tests: skipped without a GPU): an MLP
// prepared with each preset trains 20 steps on the CPU and on CUDA from the same seed and data.
// The warm-up batch runs the CPU code on the host (detail/on_host.h), the learning steps the
// CUDA ops; losses within 1e-4 relative, parameters (the learned scales included) within 1e-3 of
// their range, and the phase buffers equal.
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <limits>
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

using namespace qat;
using qat::test::has_cuda_device;
using qat::test::rnd;

namespace {

nn::ModulePtr mlp_with(const std::string& preset) {
  manual_seed(5);
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

void require_within_range(const std::string& name, const Tensor& cpu, const Tensor& gpu) {
  BOOST_TEST_CONTEXT(name) {
    const std::vector<float> a = cpu.to_vector<float>(), b = gpu.to_vector<float>();
    BOOST_REQUIRE_EQUAL(a.size(), b.size());
    float lo = std::numeric_limits<float>::infinity(), hi = -lo;
    for (float v : a) lo = std::min(lo, v), hi = std::max(hi, v);
    const double tol = 1e-3 * std::max(1e-6f, hi - lo);
    for (std::size_t k = 0; k < a.size(); ++k)
      if (!(std::abs(a[k] - b[k]) <= tol))
        BOOST_FAIL("element " << k << ": cpu " << a[k] << ", cuda " << b[k] << " (tol " << tol << ")");
  }
}

}  // namespace

BOOST_AUTO_TEST_SUITE(cuda_quant_modules, *boost::unit_test::precondition(has_cuda_device))

BOOST_AUTO_TEST_CASE(learnable_and_fp8_presets_train_alike) {
  for (const char* preset : {"int8_lsq", "int4_lsq", "int8_pact", "fp8_e4m3"}) {
    BOOST_TEST_CONTEXT(preset) {
      auto h = mlp_with(preset), d = mlp_with(preset);
      d->to(Device::CUDA);
      h->train(), d->train();
      optim::SGD oh(h->named_parameters(), {.lr = 0.02, .momentum = 0.9});
      optim::SGD od(d->named_parameters(), {.lr = 0.02, .momentum = 0.9});
      Generator gen(43);
      for (int step = 0; step < 20; ++step) {
        const Tensor x = rnd(Shape{16, 23}, 900 + step, -1, 1);
        std::vector<std::int64_t> y(16);
        for (auto& v : y) v = static_cast<std::int64_t>(gen.below(5));
        const Tensor labels = Tensor::from_vector(y, Shape{16});
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
      // every parameter and buffer stayed on the device, and agrees with the CPU run
      const auto ph = h->named_parameters(), pd = d->named_parameters();
      BOOST_REQUIRE_EQUAL(ph.size(), pd.size());
      for (std::size_t i = 0; i < ph.size(); ++i) {
        BOOST_TEST((pd[i].second.device() == Device::CUDA), pd[i].first);
        require_within_range(ph[i].first, ph[i].second, pd[i].second);
      }
      const auto bh = h->named_buffers(), bd = d->named_buffers();
      BOOST_REQUIRE_EQUAL(bh.size(), bd.size());
      for (std::size_t i = 0; i < bh.size(); ++i) BOOST_TEST_CONTEXT(bh[i].first) {
          BOOST_TEST((bd[i].second.device() == Device::CUDA));
          const std::string& n = bh[i].first;
          if (n.find("warmup_seen") != std::string::npos ||
              n.find("learning_enabled") != std::string::npos ||
              n.find("_enabled") != std::string::npos)
            BOOST_TEST(bh[i].second.item() == bd[i].second.item());
        }
    }
  }
}

BOOST_AUTO_TEST_SUITE_END()
