// Exported models in every format the presets cover (int8_fbgemm's 7-bit activations through a
// Clip before each QuantizeLinear), run in ONNX Runtime and compared with the fake-quant model
// they came from: within one output quantization step (integer grids; two for the residual
// network under ORT's integer kernels) or one FP8 rounding (FP8), with float or int8 weight
// initializers, with ORT's graph optimizations off (Q/DQ computed as written) and on (its
// integer kernels).
#include <boost/test/unit_test.hpp>
#include <filesystem>
#include <iostream>

#include "modules/onnx/export.h"
#include "onnx/onnx_test_util.h"
#include "onnx/ort_precondition.h"
#include "onnx/ort_runner.h"

using namespace qat;
using namespace qat::quant;
using namespace qat::test::onnx_models;

namespace {

struct Case {
  std::string config;
  int model;  // 0: SmallResNet, 1: SmallMLP (rows of 128 / 64 for blocks of 32), 2: SmallMLPBn
  int opset;
};

// Largest |a - b| relative to FP8 E4M3's rounding at b: 2^-4 |b| is half a step (3 mantissa
// bits); values below the smallest normal use its absolute step.
double max_fp8_roundings(const Tensor& a, const Tensor& b, double scale) {
  double m = 0;
  for (std::int64_t i = 0; i < a.numel(); ++i) {
    const double x = a.data<float>()[i], y = b.data<float>()[i];
    const double half_step = std::max(std::abs(y) / 16.0, std::ldexp(scale, -10));
    m = std::max(m, std::abs(x - y) / (2 * half_step));
  }
  return m;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(onnx_runtime)

BOOST_AUTO_TEST_CASE(every_format_runs_like_fake_quant, *boost::unit_test::precondition(test::OrtAvailable())) {
  const auto dir = std::filesystem::temp_directory_path() / ("qat_onnx_ort_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const Tensor x = batch(64, 77);
  for (const Case& c : {Case{"int8_default", 0, 13}, Case{"int8_fbgemm", 0, 13}, Case{"int8_lsq", 0, 13},
                        Case{"int8_pact", 0, 13},
                        Case{"int4_lsq", 0, 21}, Case{"fp8_e4m3", 0, 19},
                        Case{"int4_weight_block32", 1, 21}, Case{"int8_default", 2, 13}}) {
    nn::ModulePtr m = c.model == 1   ? nn::ModulePtr(trained<SmallMLP>(c.config))
                      : c.model == 2 ? nn::ModulePtr(trained<SmallMLPBn>(c.config))
                                     : trained_resnet(c.config);
    if (c.model == 2) BOOST_TEST(m->child("fc1")->type_name() == "LinearBnReLU1d");
    const Tensor fq = eval(*m, x);
    const double step = output_step(*m, example());
    for (bool int8_weights : {false, true}) {
      const std::string path = (dir / (c.config + (int8_weights ? "_q.onnx" : ".onnx"))).string();
      const OnnxExportReport r = export_onnx(*m, example(), path, {.int8_weights = int8_weights});
      BOOST_TEST(r.opset == c.opset);
      // ORT 1.30's QDQ fusion takes FP8 Q/DQ pairs for int8 ones and fails to load the model:
      // FP8 files run with graph optimizations off (what FP8 runtimes read are the Q/DQ pairs).
      const bool fp8 = c.config.rfind("fp8", 0) == 0;
      for (const std::string level : {"disabled", "all"}) {
        if (fp8 && level == "all") continue;
        BOOST_TEST_CONTEXT(c.config << (c.model == 2 ? " (Linear-BN)" : "")
                                    << (int8_weights ? ", int8 weights" : "") << ", optimization "
                                    << level) {
          const Tensor y = test::ort_run(path, x, level);
          // weight-only configs have a float output: float rounding apart, the same numbers
          const double err = fp8 ? max_fp8_roundings(y, fq, step)
                             : step > 0 ? max_steps(y, fq, step)
                                        : max_steps(y, fq, 1e-5 * max_steps(fq, Tensor::zeros(fq.shape()), 1.0));
          std::cout << "test_onnx_ort: " << c.config << (c.model == 2 ? " (Linear-BN)" : "")
                    << (int8_weights ? " (int8 weights)" : "") << ", " << level << ": max difference "
                    << err
                    << (fp8        ? " FP8 roundings"
                        : step > 0 ? " output steps"
                                   : " x 1e-5 of the largest output")
                    << std::endl;
          // ORT's integer kernels (optimization all) requantize each layer in fixed point: an
          // intermediate code one off moves later outputs, and the residual network's skips
          // carry it on (as test_onnx_fmnist measures on the trained one). int8_lsq here: 69 of
          // 192 outputs one step off, one two.
          const double bound = level == "all" && c.model == 0 && !fp8 ? 2.0 : 1.0;
          BOOST_TEST(err <= bound + 1e-3);
        }
      }
    }
  }
  std::filesystem::remove_all(dir);
}

// 7-bit activations (int8_fbgemm: [0, 127] in uint8 codes) on inputs far outside the ranges
// the model observed: the Clip before each QuantizeLinear saturates at 127 as the fake quantizer
// does (QuantizeLinear alone would saturate at 255).
BOOST_AUTO_TEST_CASE(seven_bit_activations_saturate_like_fake_quant,
                     *boost::unit_test::precondition(test::OrtAvailable())) {
  const auto path =
      std::filesystem::temp_directory_path() / ("qat_7bit_" + std::to_string(::getpid()) + ".onnx");
  nn::ModulePtr m = trained_resnet("int8_fbgemm");
  Generator gen(91);
  const Tensor x = Tensor::uniform(Shape{64, 2, 8, 8}, -3, 4, gen);
  const Tensor fq = eval(*m, x);
  const double step = output_step(*m, example());
  const OnnxExportReport r = export_onnx(*m, example(), path.string());
  bool noted = false;
  for (const std::string& n : r.notes)
    noted = noted || n.find("behind a Clip to its 7-bit range") != std::string::npos;
  BOOST_TEST(noted);
  for (const std::string level : {"disabled", "all"}) {
    const double err = max_steps(test::ort_run(path.string(), x, level), fq, step);
    std::cout << "test_onnx_ort: int8_fbgemm, inputs in [-3, 4], " << level << ": max difference "
              << err << " output steps" << std::endl;
    BOOST_TEST(err <= 1.0 + 1e-3, level);
  }
  std::filesystem::remove(path);
}

BOOST_AUTO_TEST_SUITE_END()
