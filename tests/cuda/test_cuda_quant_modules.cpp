// The learnable and FP8 quantizer modules on CUDA (device tests: skipped without a GPU): an MLP
// prepared with each preset trains 20 steps on the CPU and on CUDA from the same seed and data.
// The warm-up batch runs the CPU code on the host (detail/on_host.h), the learning steps the
// CUDA ops; losses within 1e-4 relative, parameters (the learned scales included) within 1e-3 of
// their range, and the phase buffers equal.
#include <boost/test/unit_test.hpp>
#include <string>
#include <vector>

#include "cuda_test_util.h"
#include "train_alike.h"

using namespace qat;
using qat::test::has_cuda_device;


BOOST_AUTO_TEST_SUITE(cuda_quant_modules, *boost::unit_test::precondition(has_cuda_device))

BOOST_AUTO_TEST_CASE(learnable_and_fp8_presets_train_alike) {
  // Learning rates at which this MLP's learned scales stay positive for the 20 steps. With SGD
  // and momentum 0.9 its LSQ scales (~1e-3) cross zero within 20 steps at every rate from 0.001
  // to 0.008 tried on the CPU, and are clamped to kScaleEps: a collapsed model (the loss sits at
  // ln 5), whose last-bit differences between devices no longer stay small.
  const std::vector<std::pair<const char*, double>> presets = {
      {"int8_lsq", 0.0005}, {"int4_lsq", 0.0005}, {"int8_pact", 0.005}, {"fp8_e4m3", 0.005}};
  for (const auto& [preset, lr] : presets) {
    BOOST_TEST_CONTEXT(preset) {
      auto h = qat::test::qat_mlp(preset), d = qat::test::qat_mlp(preset);
      qat::test::require_trains_alike(h, d, Shape{16, 23}, 9, 5, lr);
      for (const auto& [name, p] : h->named_parameters())  // still the regime described above
        if (name.ends_with(".scale"))
          for (float v : p.to_vector<float>()) BOOST_TEST(v > 1e-6, name << " = " << v);
      // the phase buffers (warm-up count, learning and enable switches) moved on alike
      const auto bh = h->named_buffers(), bd = d->named_buffers();
      BOOST_REQUIRE_EQUAL(bh.size(), bd.size());
      for (std::size_t i = 0; i < bh.size(); ++i) BOOST_TEST_CONTEXT(bh[i].first) {
          BOOST_TEST((bd[i].second.device() == Device::CUDA));
          const std::string& n = bh[i].first;
          if (n.find("warmup_seen") != std::string::npos || n.find("_enabled") != std::string::npos)
            BOOST_TEST(bh[i].second.item() == bd[i].second.item());
        }
    }
  }
}

BOOST_AUTO_TEST_SUITE_END()
