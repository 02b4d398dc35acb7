// Regression tests for crafted checkpoints (issue 12): every file in tests/io/hostile/ (written
// once by make_hostile.cpp, committed as bytes) passes the header and CRC checks, and loading it
// must either fail with an error naming the file, the tensor or metadata key and the value,
// leaving the model bit-for-bit unchanged, or, for the values the library documents as safe,
// load and run.
#define BOOST_TEST_MODULE qat_hostile
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <filesystem>
#include <limits>

#include "common/errors.h"
#include "framework/autograd/grad_mode.h"
#include "io/hostile_cases.h"

using namespace qat;
using namespace qat::test::hostile;

namespace {

std::string path_of(const Case& c) { return std::string(QAT_TEST_DATA_DIR) + "/io/hostile/" + c.file; }

std::vector<std::vector<std::uint8_t>> state_bytes(nn::Module& m) {
  std::vector<std::vector<std::uint8_t>> out;
  for (const auto& [name, t] : m.named_state()) {
    const auto* p = static_cast<const std::uint8_t*>(t.raw_data());
    out.emplace_back(p, p + t.nbytes());
  }
  return out;
}

}  // namespace

BOOST_AUTO_TEST_CASE(every_crafted_checkpoint_is_refused_or_documented_safe) {
  int refused = 0, accepted = 0;
  for (const Case& c : cases()) {
    BOOST_TEST_CONTEXT(c.file) {
      const std::string path = path_of(c);
      BOOST_REQUIRE(std::filesystem::exists(path));
      const io::Checkpoint ckpt = io::load(path);  // structurally valid: header, CRC, archive
      nn::ModulePtr m = model(c.kind);
      const auto before = state_bytes(*m);
      if (c.expect.empty()) {
        BOOST_CHECK_NO_THROW(io::load_into(*m, ckpt));
        NoGradGuard ng;
        m->eval();
        const Tensor y = (*m)(Tensor::ones(Shape{2, 1, 4, 4}));
        for (float v : y.to_vector<float>()) BOOST_TEST(std::isfinite(v));
        ++accepted;
        continue;
      }
      std::string what;
      try {
        io::load_into(*m, ckpt);
      } catch (const io::CheckpointError& e) {
        what = e.what();
      }
      BOOST_TEST(what.find("checkpoint '" + path + "'") == 0u, what);
      BOOST_TEST(what.find("nothing was loaded") != std::string::npos, what);
      for (const std::string& s : c.expect)
        BOOST_TEST(what.find(s) != std::string::npos, s << " in: " << what);
      BOOST_TEST((state_bytes(*m) == before), "the model changed");
      // nothing raw from the file reaches the message
      for (char ch : what) BOOST_TEST((ch == '\n' || static_cast<unsigned char>(ch) >= 0x20), what);
      ++refused;
      // non-strict loads check values too
      BOOST_CHECK_THROW(io::load_into(*m, ckpt, {.strict = false}), io::CheckpointError);
    }
  }
  BOOST_TEST_MESSAGE("refused " << refused << ", accepted " << accepted);
}

BOOST_AUTO_TEST_CASE(allow_non_finite_loads_nan_parameters_on_request) {
  const std::vector<Case> all = cases();
  const Case* nan_weight = nullptr;
  for (const Case& c : all)
    if (c.file == "qat_weight_nan.qat") nan_weight = &c;
  BOOST_REQUIRE(nan_weight != nullptr);
  nn::ModulePtr m = model(nan_weight->kind);
  io::load_into(*m, path_of(*nan_weight), {.allow_non_finite = true});
  BOOST_TEST(std::isnan(m->submodule("fc")->parameter("weight").to_vector<float>()[7]));
}

BOOST_AUTO_TEST_CASE(spec_text_parses_strictly) {
  using quant::QuantSpec;
  for (const QuantSpec& s :
       {QuantSpec::weight_per_channel(8, 0), QuantSpec::activation_affine(8),
        QuantSpec::weight_per_block(4, 32, -1, 8), QuantSpec::fp8(quant::Format::FP8_E5M2),
        QuantSpec{.bits = 8, .narrow_range = true}})
    BOOST_TEST((QuantSpec::parse(s.str()) == s), s.str());
  for (const char* bad :
       {"int40 symmetric per-tensor", "int8 symmetric per-tensor ", "int8  symmetric per-tensor",
        "uint8 symmetric narrow per-tensor", "int8 symmetric per-channel(axis 99)",
        "int8 symmetric per-block(0, axis 0)", "fp8_e4m3 per-block(32, axis 0)", ""})
    BOOST_CHECK_THROW(QuantSpec::parse(bad), Error);
}

// The same values reached by training instead of a file (a diverged run, lr 1e6): convert
// refuses them naming the layer, so no NaN reaches a float -> int cast and no int8 bias
// overflows the accumulator.
BOOST_AUTO_TEST_CASE(convert_refuses_what_a_diverged_model_holds) {
  const io::Checkpoint good = trained(Kind::Qat);
  auto converted_with = [&](const std::string& tensor, std::int64_t i, float v) {
    nn::ModulePtr m = model(Kind::Qat);
    io::load_into(*m, good);
    for (const auto& [name, t] : m->named_parameters())
      if (name == tensor) t.data<float>()[i] = v;
    return test::error_of([&] { quant::convert(*m, example()); });
  };
  const std::string nan_weight = converted_with("fc.weight", 7, std::nanf(""));
  BOOST_TEST(nan_weight.find("convert: layer 'fc': weight[0, 7] = nan is not finite") == 0u, nan_weight);
  const std::string folded = converted_with("conv.bn.weight", 1, std::numeric_limits<float>::infinity());
  BOOST_TEST(folded.find("convert: layer 'conv': weight[1, 0, 0, 0] (folded with batch norm) = ") == 0u,
             folded);
  const std::string big_bias = converted_with("fc.bias", 0, 1e30f);
  BOOST_TEST(big_bias.find("convert: layer 'fc': bias[0] = 1e+30 is ") == 0u, big_bias);
  BOOST_TEST(big_bias.find("beyond the int32 room") != std::string::npos, big_bias);
}
