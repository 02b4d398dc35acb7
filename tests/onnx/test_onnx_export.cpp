// ONNX export: the file's structure (checked by libonnx's checker), the numbers (run in ONNX
// Runtime and compared with our fake-quant and int8 models), and every refusal.
#include <onnx/checker.h>
#include <onnx/onnx_pb.h>

#include <boost/test/unit_test.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>

#include "framework/autograd/grad_mode.h"
#include "framework/io/restore.h"
#include "framework/optim/sgd.h"
#include "modules/onnx/export.h"
#include "onnx/onnx_test_util.h"
#include "quant/graph_models.h"
#include "quant/quant_test_util.h"

using namespace qat;
using namespace qat::quant;
using qat::test::error_of;
using qat::test::SmallResNet;
using qat::test::train_on_noise;

namespace {

using namespace qat::test::onnx_models;

onnx::ModelProto parse(const std::string& bytes) {
  onnx::ModelProto m;
  BOOST_REQUIRE(m.ParseFromString(bytes));
  return m;
}

std::map<std::string, int> op_counts(const onnx::ModelProto& m) {
  std::map<std::string, int> n;
  for (const auto& node : m.graph().node()) ++n[node.op_type()];
  return n;
}

const onnx::NodeProto* find_node(const onnx::ModelProto& m, const std::string& name) {
  for (const auto& node : m.graph().node())
    if (node.name() == name) return &node;
  return nullptr;
}

std::int64_t int_attr(const onnx::NodeProto& n, const std::string& name, std::int64_t otherwise = -999) {
  for (const auto& a : n.attribute())
    if (a.name() == name) return a.i();
  return otherwise;
}

std::filesystem::path temp_dir() {
  auto dir = std::filesystem::temp_directory_path() / ("qat_onnx_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  return dir;
}



// y = 2 x, a leaf module of the user's own.
class Doubler : public nn::Module {
 public:
  Doubler() : nn::Module("Doubler") {}
  Tensor forward(const Tensor& x) override { return x * 2.0; }
};

// The residual model, then `post` (or `* 2` in the forward when null).
class Scaled : public nn::Module {
 public:
  explicit Scaled(nn::ModulePtr post) : nn::Module("Scaled") {
    if (post) post_ = register_child("post", std::move(post));
    has_post_ = post_.name() == "post";
  }
  Tensor forward(const Tensor& x) override { return has_post_ ? post_(net_(x)) : net_(x) * 2.0; }
  nn::Child<> net_ = register_child("net", std::make_shared<SmallResNet>());
  nn::Child<> post_;
  bool has_post_ = false;
};


}  // namespace

BOOST_AUTO_TEST_SUITE(onnx_export)

BOOST_AUTO_TEST_CASE(residual_model_is_valid_qdq_opset13) {
  auto m = trained_resnet("int8_default");
  const auto before = io::capture(*m);
  OnnxExportReport r;
  const std::string bytes = to_onnx(*m, example(), {}, &r);
  BOOST_TEST_MESSAGE(r.table());
  const onnx::ModelProto model = parse(bytes);
  BOOST_CHECK_NO_THROW(onnx::checker::check_model(model));
  BOOST_TEST(r.opset == 13);
  BOOST_TEST(model.opset_import(0).version() == 13);
  BOOST_TEST(model.ir_version() == 7);
  BOOST_TEST(r.bytes == static_cast<std::int64_t>(bytes.size()));
  const auto ops = op_counts(model);
  BOOST_TEST(ops.at("Conv") == 3);  // stem, block.conv1, block.conv2 (batch norms folded)
  BOOST_TEST(ops.count("BatchNormalization") == 0);
  BOOST_TEST(ops.at("Gemm") == 1);
  BOOST_TEST(ops.at("Add") == 1);
  BOOST_TEST(ops.at("AveragePool") == 1);  // adaptive 4x4 of 8x8 -> 2x2
  BOOST_TEST(ops.at("QuantizeLinear") == ops.at("DequantizeLinear"));
  // weight Q/DQ per output channel
  const onnx::NodeProto* wq = find_node(model, "stem.weight/QuantizeLinear");
  BOOST_REQUIRE(wq != nullptr);
  BOOST_TEST(int_attr(*wq, "axis") == 0);
  // the model is not changed by the export (nothing observed, no training flag moved)
  BOOST_TEST(io::to_bytes(io::capture(*m)) == io::to_bytes(before));
  // input and output have the symbolic batch dimension
  BOOST_TEST(model.graph().input(0).type().tensor_type().shape().dim(0).dim_param() == "N");
  BOOST_TEST(model.graph().output(0).type().tensor_type().shape().dim(1).dim_value() == 3);
  // names and a fixed batch on request
  const onnx::ModelProto fixed =
      parse(to_onnx(*m, example(), {.dynamic_batch = false, .input_name = "x", .output_name = "y"}));
  BOOST_TEST(fixed.graph().input(0).name() == "x");
  BOOST_TEST(fixed.graph().output(0).name() == "y");
  BOOST_TEST(fixed.graph().input(0).type().tensor_type().shape().dim(0).dim_value() == 1);
  BOOST_TEST(error_of([&] { to_onnx(*m, example(), {.input_name = "v", .output_name = "v"}); }) ==
             "export_onnx: options.input_name and options.output_name must be distinct and non-empty, got 'v' "
             "and 'v'");
}

BOOST_AUTO_TEST_CASE(opset_follows_the_specs) {
  struct Case {
    std::string config;
    int opset;
    bool mlp;
  };
  for (const Case& c : {Case{"int8_lsq", 13, false}, Case{"int8_pact", 13, false}, Case{"fp8_e4m3", 19, false},
                        Case{"int4_lsq", 21, false}, Case{"int4_weight_block32", 21, true}}) {
    BOOST_TEST_CONTEXT(c.config) {
      nn::ModulePtr m = c.mlp ? nn::ModulePtr(trained<SmallMLP>(c.config)) : trained_resnet(c.config);
      OnnxExportReport r;
      const onnx::ModelProto model = parse(to_onnx(*m, example(), {}, &r));
      BOOST_TEST(r.opset == c.opset);
      BOOST_TEST(model.opset_import(0).version() == c.opset);
      if (c.opset == 13) BOOST_CHECK_NO_THROW(onnx::checker::check_model(model));
      if (c.opset > 13) {
        const std::string msg = error_of([&] { to_onnx(*m, example(), {.opset = 13}); });
        BOOST_TEST(msg.find("export_onnx: options.opset 13 cannot express '") == 0, msg);
        BOOST_TEST(msg.find("it needs opset " + std::to_string(c.opset)) != std::string::npos, msg);
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(int8_weights_are_smaller_and_dequantize_only) {
  auto m = trained_resnet("int8_default");
  OnnxExportReport full, small;
  const onnx::ModelProto a = parse(to_onnx(*m, example(), {}, &full));
  const onnx::ModelProto b = parse(to_onnx(*m, example(), {.int8_weights = true}, &small));
  BOOST_CHECK_NO_THROW(onnx::checker::check_model(b));
  BOOST_TEST(small.bytes < full.bytes);
  // one QuantizeLinear fewer per weight (stem, conv1, conv2, fc)
  BOOST_TEST(op_counts(a).at("QuantizeLinear") - op_counts(b).at("QuantizeLinear") == 4);
  bool int8_init = false;
  for (const auto& t : b.graph().initializer())
    if (t.name() == "stem.weight_quantized") int8_init = t.data_type() == onnx::TensorProto_DataType_INT8;
  BOOST_TEST(int8_init);
}

// A float head (config "skip") applied twice after the quantized region.
class TwiceHead : public nn::Module {
 public:
  TwiceHead() : nn::Module("TwiceHead") {}
  Tensor forward(const Tensor& x) override { return head_(head_(dequant_(fc_(flatten_(quant_(x)))))); }
  nn::Child<> quant_ = register_child("quant", std::make_shared<QuantStub>());
  nn::Child<> flatten_ = register_child("flatten", std::make_shared<nn::Flatten>());
  nn::Child<> fc_ = register_child("fc", std::make_shared<nn::Linear>(128, 4));
  nn::Child<> dequant_ = register_child("dequant", std::make_shared<DeQuantStub>());
  nn::Child<> head_ = register_child("head", std::make_shared<nn::Linear>(4, 4));
};

BOOST_AUTO_TEST_CASE(float_parts_and_reused_modules) {
  manual_seed(8);
  TwiceHead m;
  QConfigRegistry reg;
  reg.set_module_name("head", "skip");
  prepare_qat(m, reg, example());
  train_on_noise(m, 2, 9);
  OnnxExportReport r;
  const onnx::ModelProto model = parse(to_onnx(m, example(), {}, &r));
  BOOST_TEST_MESSAGE(r.table());
  BOOST_CHECK_NO_THROW(onnx::checker::check_model(model));
  BOOST_TEST(op_counts(model).at("Gemm") == 3);  // fc, head twice
  int head_weights = 0;
  for (const auto& t : model.graph().initializer()) head_weights += t.name().rfind("head.weight", 0) == 0;
  BOOST_TEST(head_weights == 1);  // written once, read by both calls
  BOOST_TEST(op_counts(model).at("QuantizeLinear") == 4);  // input, flatten (same grid), fc weight, fc output
}

BOOST_AUTO_TEST_CASE(refusals_name_the_problem_and_leave_no_file) {
  const auto dir = temp_dir();
  const std::string path = (dir / "model.onnx").string();
  SmallResNet plain;
  BOOST_TEST(error_of([&] { export_onnx(plain, example(), path); }) ==
             "export_onnx: the model has no quantizers: prepare_qat it (then train or calibrate) before exporting");
  // prepared, never trained: the observers saw nothing
  SmallResNet fresh;
  QConfigRegistry reg;
  prepare_qat(fresh, reg, example());
  BOOST_TEST(error_of([&] { export_onnx(fresh, example(), path); }) ==
             "export_onnx: quantizer 'quant.activation_post_process' never observed data: train or calibrate "
             "(quant::calibrate) the model before exporting");
  BOOST_TEST(!std::filesystem::exists(path));
  // converted already
  auto m = trained_resnet("int8_default");
  SmallResNet int8_model;
  prepare_qat(int8_model, reg, example());
  io::load_into(int8_model, io::capture(*m));
  convert(int8_model, example());
  BOOST_TEST(error_of([&] { export_onnx(int8_model, example(), path); }).find(
                 "export_onnx: the model is converted already ('quant' is a Quantize)") == 0);
  // a module with no ONNX form, an op whose attributes the trace does not record
  Scaled scaled(std::make_shared<Doubler>());
  prepare_qat(scaled, reg, example());
  train_on_noise(scaled, 1, 3);
  BOOST_TEST(error_of([&] { export_onnx(scaled, example(), path); })
                 .find("export_onnx: 'post' (Doubler) has no ONNX form; supported: QAT layers") == 0);
  Scaled scaled_op(nullptr);
  prepare_qat(scaled_op, reg, example());
  train_on_noise(scaled_op, 1, 3);
  BOOST_TEST(error_of([&] { export_onnx(scaled_op, example(), path); })
                 .find("export_onnx: op 'mul_scalar' in (root) has no ONNX form") == 0);
  BOOST_TEST(!std::filesystem::exists(path));
  // microscaled (MX, NVFP4) and dynamic quantizers have no exact ONNX form
  for (const char* preset : {"mxfp4", "nvfp4"}) {
    auto mx = trained_resnet(preset);
    BOOST_TEST(error_of([&] {
                 export_onnx(*mx, example(), path);
               }).find("export_onnx: 'quant.activation_post_process' (fp4_e2m1 per-block(") == 0);
    BOOST_TEST(error_of([&] { export_onnx(*mx, example(), path); }).find("has no exact ONNX form") !=
               std::string::npos);
  }
  QConfigRegistry dyn_reg;
  dyn_reg.register_config(QConfig{"dyn", QuantizerConfig{.spec = QuantSpec::weight_per_channel(8)},
                                  dyn_reg.get("int8_dyn_act_int4_weight").activation});
  SmallResNet dyn;
  dyn_reg.set_global("dyn");
  prepare_qat(dyn, dyn_reg, example());
  train_on_noise(dyn, 1, 3);
  BOOST_TEST(error_of([&] {
               export_onnx(dyn, example(), path);
             }).find("dynamic: its qparams come from each batch") != std::string::npos);
  BOOST_TEST(!std::filesystem::exists(path));
  // an unwritable path: the error names it, nothing is left behind
  const std::string bad = (dir / "missing_dir" / "m.onnx").string();
  const std::string msg = error_of([&] { export_onnx(*m, example(), bad); });
  BOOST_TEST(msg.find("export_onnx: cannot write '" + bad + "'") == 0, msg);
  // an existing file survives a failed export
  { std::ofstream(path) << "previous"; }
  BOOST_CHECK_THROW(export_onnx(fresh, example(), path), Error);
  std::ifstream in(path);
  std::string content((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  BOOST_TEST(content == "previous");
  BOOST_TEST(std::distance(std::filesystem::directory_iterator(dir), std::filesystem::directory_iterator()) == 1);
  std::filesystem::remove_all(dir);
}

BOOST_AUTO_TEST_SUITE_END()
