// Microscaling (OCP MX, NVFP4) and dynamic quantization: golden vectors from the numpy reference
// of the OCP spec (tests/golden/gen_mx_golden.py) on every kernel path, the element tables, the
// kernels against a scalar reference on odd sizes, the straight-through gradient in float64,
// specs' text round trip and errors, and the quantizer modules (presets, checkpoints, hostile
// state, convert and their refusals).
#include <algorithm>
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "common/errors.h"
#include "common/golden.h"
#include "common/isa.h"
#include "framework/autograd/grad_mode.h"
#include "framework/autograd/ops.h"
#include "framework/io/checkpoint.h"
#include "framework/io/restore.h"
#include "framework/nn/nn.h"
#include "framework/optim/sgd.h"
#include "framework/tensor/random.h"
#include "modules/quant/kernels/cpu/kernels.h"
#include "modules/quant/quant.h"
#include "quant/graph_models.h"
#include "quant/quant_test_util.h"

using namespace qat;
using namespace qat::quant;
using namespace qat::test;
namespace k = qat::quant::kernels;
namespace tt = boost::test_tools;
using F = std::vector<float>;
using U8 = std::vector<std::uint8_t>;

BOOST_AUTO_TEST_SUITE(mx)

namespace {

QuantSpec golden_spec(const GoldenCase& c) {
  const auto block = static_cast<std::int64_t>(c.scalar("block"));
  const int axis = static_cast<int>(c.scalar("axis"));
  if (c.scalar("nvfp4") != 0) return QuantSpec::nvfp4(block, axis);
  return QuantSpec::mx(static_cast<Format>(static_cast<int>(c.scalar("format"))), block, axis);
}

/// The float32 reference of kernels.h mx_fake_quant / nvfp4_fake_quant, element by element.
void reference_row(const float* x, float* y, std::uint8_t* m, std::int64_t n, std::int64_t block,
                   Format f, bool nv, float pts) {
  const ElementFormat e = element_format(nv ? Format::FP4_E2M1 : f);
  for (std::int64_t b0 = 0; b0 < n; b0 += block) {
    const std::int64_t len = std::min(block, n - b0);
    float amax = 0;
    bool bad = false;
    for (std::int64_t i = b0; i < b0 + len; ++i) {
      bad = bad || !std::isfinite(x[i]);
      if (std::isfinite(x[i])) amax = std::max(amax, std::fabs(x[i]));
    }
    const int shared = k::mx_shared_exponent(amax, e.emax);
    const float s = nv ? k::nvfp4_block_scale(amax, pts) : std::ldexp(1.0f, shared);
    for (std::int64_t i = b0; i < b0 + len; ++i) {
      const float v = nv ? x[i] / s : x[i] * std::ldexp(1.0f, -shared);
      m[i] = !bad && std::fabs(v) <= static_cast<float>(e.max);
      y[i] = bad ? kNaN : round_to_element(v, nv ? Format::FP4_E2M1 : f) * s;
    }
  }
}

void expect_bits(const F& a, const F& b, const char* what) {
  BOOST_REQUIRE(a.size() == b.size());
  std::size_t bad = 0, first = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const bool same = (std::isnan(a[i]) && std::isnan(b[i])) || std::memcmp(&a[i], &b[i], 4) == 0;
    if (!same && bad++ == 0) first = i;
  }
  BOOST_TEST(bad == 0u, what << ": " << bad << " differ, first at " << first << ": "
                             << (bad ? a[first] : 0) << " vs " << (bad ? b[first] : 0));
}

const Format kFormats[] = {Format::FP8_E4M3, Format::FP8_E5M2, Format::FP6_E3M2,
                           Format::FP6_E2M3, Format::FP4_E2M1, Format::Int};

}  // namespace

BOOST_AUTO_TEST_CASE(golden_ocp_mx_and_nvfp4_on_every_path) {
  const auto cases = load_golden("golden/mx.txt");
  int checked = 0;
  for (const GoldenCase& c : cases) {
    if (c.name.rfind("table_", 0) == 0) continue;
    const QuantSpec spec = golden_spec(c);
    for_each_isa([&](cpu::Isa) {
      BOOST_TEST_CONTEXT(c.name << " " << spec.str()) {
        Tensor x = c.tensor("x").clone().requires_grad_();
        Tensor y = fake_quantize_mx(x, spec);
        expect_exact(y, c.tensor("y"), c.name);
        sum(y).backward();
        expect_exact(x.grad(), c.tensor("mask").to(DType::Float32), c.name + " mask");
      }
    });
    ++checked;
  }
  BOOST_TEST(checked == 6 * 11 + 12);
}

// Every value of each element table (built from the encodings by the generator and checked
// there against the spec's numbers) is exact; the midpoint of neighbours goes to the even code.
BOOST_AUTO_TEST_CASE(element_tables) {
  for (const GoldenCase& c : load_golden("golden/mx.txt")) {
    if (c.name.rfind("table_", 0) != 0) continue;
    const auto f = static_cast<Format>(static_cast<int>(c.scalar("format")));
    const auto v = c.tensor("values").to_vector<float>();
    const auto code = c.tensor("codes").to_vector<std::int32_t>();
    BOOST_TEST_CONTEXT(c.name) {
      BOOST_TEST(v.back() == element_format(f).max);
      for (std::size_t i = 0; i < v.size(); ++i) {
        BOOST_TEST(round_to_element(v[i], f) == v[i]);
        BOOST_TEST(round_to_element(-v[i], f) == -v[i]);
        if (i + 1 == v.size()) continue;
        const float mid = (v[i] + v[i + 1]) / 2;
        BOOST_TEST(round_to_element(mid, f) == (code[i] % 2 == 0 ? v[i] : v[i + 1]), "mid " << mid);
        BOOST_TEST(round_to_element(std::nextafter(mid, 0.0f), f) == v[i]);
        BOOST_TEST(round_to_element(std::nextafter(mid, kInf), f) == v[i + 1]);
      }
      BOOST_TEST(round_to_element(v.back() * 1.5f, f) == v.back());  // saturation
      BOOST_TEST(round_to_element(-kInf, f) == -v.back());
      BOOST_TEST(std::isnan(round_to_element(kNaN, f)));
    }
  }
  // E2M1 by hand (OCP MX v1.0 table: 0, 0.5, 1, 1.5, 2, 3, 4, 6)
  BOOST_TEST(round_to_element(2.5f, Format::FP4_E2M1) == 2.0f);
  BOOST_TEST(round_to_element(3.5f, Format::FP4_E2M1) == 4.0f);
  BOOST_TEST(round_to_element(5.0f, Format::FP4_E2M1) == 4.0f);
  BOOST_TEST(round_to_element(0.25f, Format::FP4_E2M1) == 0.0f);
  BOOST_TEST(round_to_element(1.0f / 128, Format::Int) == 0.0f);       // MXINT8: a tie -> code 0
  BOOST_TEST(round_to_element(3.0f / 128, Format::Int) == 2.0f / 64);  // tie 1.5 -> code 2
  BOOST_TEST(round_to_element(2.5f, Format::Int) == 127.0f / 64);      // symmetric saturation
}

BOOST_AUTO_TEST_CASE(kernels_match_reference_on_every_path) {
  std::mt19937 gen(5);
  for (std::int64_t n : {1, 3, 15, 16, 17, 31, 32, 33, 64, 100, 128, 256, 1007, 1024, 2053})
    for (std::int64_t block : {64, 32, 16, 7})  // 64 and 32: 4 vectors to a mask store (AVX-512, AVX2)
      for (int fi = 0; fi < 7; ++fi) {
        const bool nv = fi == 6;
        const Format f = nv ? Format::FP4_E2M1 : kFormats[fi];
        F x(n);
        std::normal_distribution<float> nd(0, 1);
        for (std::int64_t i = 0; i < n; ++i)
          x[i] = nd(gen) * std::ldexp(1.0f, static_cast<int>(gen() % 40) - 20);
        if (n > 5) x[n / 2] = 0.0f, x[n / 3] = -0.0f, x[1] = std::ldexp(1.0f, -140);
        if (n > 40) x[n - 2] = kNaN, x[40] = kInf;
        if (n > 50) x[50] = 3e38f;
        const float pts = nv ? 0.37f : 0.0f;
        F yref(n);
        U8 mref(n);
        reference_row(x.data(), yref.data(), mref.data(), n, block, f, nv, pts);
        for_each_isa([&](cpu::Isa) {
          BOOST_TEST_CONTEXT("format " << fi << " n " << n << " block " << block) {
            // 64 sentinels past the row: nothing may be written there
            constexpr std::int64_t kPad = 64;
            F y(n + kPad, 7.0f);
            U8 m(n + kPad, 7);
            const ElementFormat e = element_format(f);
            if (nv)
              k::nvfp4_fake_quant(x.data(), y.data(), m.data(), n, block, pts);
            else
              k::mx_fake_quant(x.data(), y.data(), m.data(), n, block, e.mantissa_bits, e.min_exponent,
                               static_cast<float>(e.max), e.emax);
            BOOST_TEST(std::count(y.begin() + n, y.end(), 7.0f) == kPad);
            BOOST_TEST(std::count(m.begin() + n, m.end(), 7) == kPad);
            y.resize(n);
            m.resize(n);
            expect_bits(y, yref, "y");
            BOOST_TEST(m == mref, tt::per_element());
          }
        });
      }
}

// STE in float64 (the scalar path), an analytic gradient check: the gradient of sum(w * y) is w
// where |x / X| <= max and 0 where saturated. MX scales are powers of two, so the float64 path
// equals the float32 one on float inputs; NVFP4 divides by a float32 block scale, so the two
// paths agree to float32 rounding of y (1e-6 relative) away from ties.
BOOST_AUTO_TEST_CASE(straight_through_gradient_float64) {
  Generator gen(3);
  for (const QuantSpec& spec :
       {QuantSpec::mx(Format::FP4_E2M1), QuantSpec::mx(Format::FP8_E4M3),
        QuantSpec::mx(Format::FP6_E3M2), QuantSpec::mx(Format::Int), QuantSpec::nvfp4()}) {
    BOOST_TEST_CONTEXT(spec.str()) {
      Tensor xf = Tensor::normal(Shape{3, 70}, 0, 2, gen);
      for (int r = 0; r < 3; ++r) xf.data<float>()[r * 70 + 5] = 7.7f;  // saturates E2M1 (4 < 7.7/X ...)
      Tensor xd = xf.to(DType::Float64).requires_grad_();
      const float pts = nvfp4_per_tensor_scale(xf);
      Tensor yd = fake_quantize_mx(xd, spec, pts);
      Tensor yf = fake_quantize_mx(xf, spec, pts);
      const bool nv = spec.scale_format == ScaleFormat::E4M3;
      if (!nv) expect_exact(yd.to(DType::Float32), yf, "float64 path == float32 path");
      for (std::int64_t i = 0; nv && i < 210; ++i)
        BOOST_TEST(yd.data<double>()[i] == yf.data<float>()[i], tt::tolerance(1e-6));
      const Tensor w = Tensor::uniform(Shape{3, 70}, -1, 1, gen, DType::Float64);
      sum(mul(yd, w)).backward();
      Tensor xg = xf.clone().requires_grad_();
      sum(fake_quantize_mx(xg, spec, pts)).backward();
      const auto mask = xg.grad().to_vector<float>();
      std::int64_t zeros = 0;
      for (std::int64_t i = 0; i < 210; ++i) {
        BOOST_TEST(xd.grad().data<double>()[i] == (mask[i] != 0 ? w.data<double>()[i] : 0.0));
        zeros += mask[i] == 0;
      }
      if (spec.format == Format::FP4_E2M1) BOOST_TEST(zeros >= 1);  // some saturated
    }
  }
}

BOOST_AUTO_TEST_CASE(specs_round_trip_and_errors) {
  const QuantSpec dyn{
      .bits = 8, .symmetric = false, .granularity = Granularity::PerChannel, .dynamic = true};
  for (const QuantSpec& s : {QuantSpec::mx(Format::FP8_E4M3), QuantSpec::mx(Format::FP8_E5M2, 32, -1),
                             QuantSpec::mx(Format::FP6_E3M2), QuantSpec::mx(Format::FP6_E2M3),
                             QuantSpec::mx(Format::FP4_E2M1), QuantSpec::mx(Format::Int),
                             QuantSpec::nvfp4(), dyn, QuantSpec{.dynamic = true}}) {
    BOOST_TEST(QuantSpec::parse(s.str()) == s, s.str());
  }
  BOOST_TEST(QuantSpec::mx(Format::FP4_E2M1).str() == "fp4_e2m1 per-block(32, axis 1) e8m0 scales");
  BOOST_TEST(QuantSpec::mx(Format::Int).str() ==
             "int8 symmetric narrow per-block(32, axis 1) e8m0 scales");
  BOOST_TEST(QuantSpec::nvfp4().str() == "fp4_e2m1 per-block(16, axis 1) e4m3 scales");
  BOOST_TEST(dyn.str() == "int8 affine per-channel(axis 0) dynamic");
  auto parse_error = [](const std::string& t) { return error_of([&] { QuantSpec::parse(t); }); };
  BOOST_TEST(parse_error("fp4_e2m1 per-tensor") ==
             "QuantSpec::parse: 'fp4_e2m1 per-tensor': QuantSpec: fp4_e2m1 needs per-block E8M0 (MX) or "
             "E4M3 (NVFP4) scales");
  BOOST_TEST(parse_error("fp6_e3m2 per-block(32, axis 1) e4m3 scales") ==
             "QuantSpec::parse: 'fp6_e3m2 per-block(32, axis 1) e4m3 scales': QuantSpec: E4M3 block "
             "scales (NVFP4) go with fp4_e2m1 elements, got fp6_e3m2");
  BOOST_TEST(parse_error("int8 symmetric per-block(32, axis 1) e8m0 scales") ==
             "QuantSpec::parse: 'int8 symmetric per-block(32, axis 1) e8m0 scales': QuantSpec: MXINT8 "
             "(integer elements with E8M0 scales) is int8 symmetric narrow, got int8");
  BOOST_TEST(parse_error("fp4_e2m1 per-block(32, axis 1) e8m0 scales dynamic")
                 .find("dynamic applies to integer specs") != std::string::npos);
  BOOST_TEST(parse_error("fp4_e2m1 per-block(32, axis 1) double-quant 8-bit scales e8m0 scales")
                 .find("double quantization") != std::string::npos);
  BOOST_TEST(
      parse_error("fp4_e2m1 per-block(32, axis 1)  e8m0 scales").find("is not a quantization spec") !=
      std::string::npos);
  BOOST_TEST(parse_error("int8 affine per-tensor e8m0 scales").find("is not a quantization spec") !=
             std::string::npos);
  // fake_quantize_mx's own checks name the function and the value
  BOOST_TEST(
      error_of([] {
        fake_quantize_mx(vec({1, 2}), QuantSpec{});
      }) ==
      "fake_quantize_mx: spec int8 symmetric per-tensor has no E8M0 (MX) or E4M3 (NVFP4) block scales");
  BOOST_TEST(error_of([] {
               fake_quantize_mx(vec({1, 2}), QuantSpec::nvfp4(16, 0), -1.0f);
             }) ==
             "fake_quantize_mx: per_tensor_scale must be 0 (from x) or a positive normal float, got -1");
  BOOST_TEST(error_of([] {
               fake_quantize_mx(vec({1, 2}), QuantSpec::mx(Format::FP4_E2M1, 32, 1));
             }).find("axis 1 is out of range for shape [2]") != std::string::npos);
  BOOST_TEST(error_of([] {
               fake_quantize_fp8(vec({1}), vec({1}), QuantSpec::mx(Format::FP8_E4M3, 32, 0));
             }).find("use fake_quantize_mx") != std::string::npos);
}

// ---- dynamic quantization --------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(dynamic_per_row_qparams_by_hand) {
  // rows [0, 2.55] and [-1.28, 1.27]: int8 affine -> scales 0.01 / 0.01, zero points -128 / 0
  const QuantSpec spec{
      .bits = 8, .symmetric = false, .granularity = Granularity::PerChannel, .dynamic = true};
  Tensor x = Tensor::from_vector<float>({0, 1, 2.55f, 0.5f, -1.28f, 1.27f, 0.004f, 0.006f}, Shape{2, 4});
  const QParams q = dynamic_qparams(x, spec);
  BOOST_TEST(q.scale.shape() == Shape{2});
  BOOST_TEST(q.scale.data<float>()[0] == 2.55f / 255, tt::tolerance(1e-6f));
  BOOST_TEST(q.zero_point.to_vector<std::int32_t>() == (std::vector<std::int32_t>{-128, 0}),
             tt::per_element());
  DynamicFakeQuantize dq(spec);
  dq.train();
  Tensor xr = x.clone().requires_grad_();
  Tensor y = dq.forward(xr);
  expect_exact(y, fake_quantize(x, q, spec), "dynamic forward = fake_quantize with the batch's qparams");
  sum(y).backward();
  BOOST_TEST(xr.grad().to_vector<float>() == F(8, 1.0f), tt::per_element());  // STE, nothing clipped
  // the next batch has its own range, no running statistics
  Tensor x2 = mul(x, Tensor::full(Shape{1}, 10.0));
  dq.forward(x2);
  BOOST_TEST(dq.qparams().scale.data<float>()[0] == 25.5f / 255, tt::tolerance(1e-6f));
  BOOST_TEST(dq.named_buffers().size() == 2u);  // the switches only
}

// ---- modules: presets, training, checkpoints, hostile values, convert ------------------------

namespace {
nn::ModulePtr mlp() {
  return std::make_shared<nn::Sequential>(
      nn::NamedModules{{"quant", std::make_shared<QuantStub>()},
                       {"fc1", std::make_shared<nn::Linear>(64, 40)},
                       {"relu1", std::make_shared<nn::ReLU>()},
                       {"fc2", std::make_shared<nn::Linear>(40, 4)},
                       {"dequant", std::make_shared<DeQuantStub>()}});
}
void train(nn::Module& model, std::uint64_t seed) {
  test::train_on_noise(model, 10, seed, Shape{16, 64}, 4, -1);
}
}  // namespace

BOOST_AUTO_TEST_CASE(presets_checkpoints_and_convert_refusals) {
  for (const char* preset : {"mxfp8", "mxfp6", "mxfp4", "mxint8", "nvfp4", "int8_dyn_act_int4_weight"}) {
    BOOST_TEST_CONTEXT(preset) {
      QConfigRegistry reg;
      reg.set_global(preset);
      reg.set_module_name("fc2", "int8_default");  // per layer through rules
      manual_seed(21);
      nn::ModulePtr model = mlp();
      const PrepareReport report = prepare_qat(*model, reg);
      auto* fc1 = dynamic_cast<QuantLinear*>(model->child("fc1").get());
      BOOST_REQUIRE(fc1 != nullptr);
      const bool dyn = std::string(preset) == "int8_dyn_act_int4_weight";
      BOOST_TEST(fc1->activation_fake_quant()->type_name() ==
                 (dyn ? "DynamicFakeQuantize" : "MXFakeQuantize"));
      train(*model, 22);
      // checkpoint round trip with metadata: identical outputs
      io::Checkpoint ckpt = io::capture(*model);
      ckpt.metadata = checkpoint_metadata(*model, report);
      nn::ModulePtr copy = mlp();
      prepare_qat(*copy, reg);
      io::load_into(*copy, io::from_bytes(io::to_bytes(ckpt)));
      copy->eval();
      Generator gen(23);
      const Tensor x = Tensor::uniform(Shape{8, 64}, -1, 1, gen);
      NoGradGuard ng;
      BOOST_TEST(copy->forward(x).to_vector<float>() == model->forward(x).to_vector<float>(),
                 tt::per_element());
      if (dyn) {  // converts to DynamicQuantizedLinear layers (test_dynamic_int8.cpp)
        const Tensor want = model->forward(x);
        convert(*model);
        BOOST_TEST(model->child("fc1")->type_name() == "DynamicQuantizedLinear");
        const auto a = model->forward(x).to_vector<float>(), b = want.to_vector<float>();
        for (std::size_t i = 0; i < a.size(); ++i) BOOST_TEST(std::fabs(a[i] - b[i]) < 0.05f);
        continue;
      }
      // convert refuses, naming the layer
      const std::string e = error_of([&] { convert(*model); });
      BOOST_TEST(e.find("layer 'quant'") != std::string::npos, e);
      BOOST_TEST(e.find("E8M0 / E4M3 block scales") != std::string::npos, e);
    }
  }
}

BOOST_AUTO_TEST_CASE(nvfp4_state_and_hostile_values) {
  QConfigRegistry reg;
  reg.set_global("nvfp4");
  nn::ModulePtr model = mlp();
  const PrepareReport report = prepare_qat(*model, reg);
  train(*model, 31);
  auto* fc1 = dynamic_cast<QuantLinear*>(model->child("fc1").get());
  auto* aq = dynamic_cast<MXFakeQuantize*>(fc1->activation_fake_quant().get());
  BOOST_REQUIRE(aq != nullptr);
  const float pts = aq->per_tensor_scale().item();
  BOOST_TEST(pts > 0.0f);
  // frozen: the recorded per-tensor scale is used, not the batch's
  aq->freeze_qparams();
  Generator gen(32);
  const Tensor x = Tensor::uniform(Shape{4, 40}, -100, 100, gen);
  aq->train();
  expect_exact(aq->forward(x), fake_quantize_mx(x, aq->spec(), pts), "frozen per-tensor scale");
  BOOST_TEST(aq->per_tensor_scale().item() == pts);
  // hostile per-tensor scales are refused at load, naming the tensor
  for (float bad : {-1.0f, kNaN, 1e-45f, 1e31f}) {
    io::Checkpoint ckpt = io::capture(*model);
    ckpt.metadata = checkpoint_metadata(*model, report);
    for (auto& [name, t] : ckpt.tensors)
      if (name == "fc1.activation_post_process.per_tensor_scale") t.data<float>()[0] = bad;
    nn::ModulePtr copy = mlp();
    prepare_qat(*copy, reg);
    const std::string e = error_of([&] { io::load_into(*copy, ckpt); });
    BOOST_TEST(e.find("fc1.activation_post_process.per_tensor_scale[0]") != std::string::npos, e);
    BOOST_TEST(e.find("not an NVFP4 per-tensor scale") != std::string::npos, e);
  }
  // metadata naming another format is refused
  io::Checkpoint ckpt = io::capture(*model);
  ckpt.metadata = checkpoint_metadata(*model, report);
  ckpt.metadata["quant.fc1.activation_post_process"] =
      "MXFakeQuantize fp4_e2m1 per-block(32, axis 1) e8m0 scales";
  nn::ModulePtr copy = mlp();
  prepare_qat(*copy, reg);
  BOOST_TEST(error_of([&] {
               io::load_into(*copy, ckpt);
             }).find("the model's quantizer is MXFakeQuantize") != std::string::npos);
  // training on NaN input is refused naming the quantizer
  model->train();
  Tensor xn = Tensor::uniform(Shape{2, 64}, -1, 1, gen);
  xn.data<float>()[3] = kNaN;
  BOOST_TEST(error_of([&] {
               model->forward(xn);
             }).find("MXFakeQuantize 'quant.activation_post_process'") != std::string::npos);
}

BOOST_AUTO_TEST_SUITE_END()
