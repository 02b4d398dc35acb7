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
  for (const char* preset : {"int8_lsq", "int4_lsq", "int8_pact", "fp8_e4m3"}) {
    BOOST_TEST_CONTEXT(preset) {
      auto h = qat::test::qat_mlp(preset), d = qat::test::qat_mlp(preset);
      qat::test::require_trains_alike(h, d, Shape{16, 23}, 9);
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
