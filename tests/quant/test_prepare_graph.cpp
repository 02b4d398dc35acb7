// prepare_qat from the captured graph: fusion anywhere, functional ops, warnings and errors.
#include <boost/test/unit_test.hpp>

#include "quant/graph_models.h"
#include "quant/quant_test_util.h"

using namespace qat;
using namespace qat::quant;
using qat::test::error_of;
using qat::test::SmallResNet;

namespace {
const Tensor example() { return Tensor::zeros(Shape{2, 2, 8, 8}); }

bool has(const std::vector<std::string>& v, const std::string& needle) {
  for (const auto& s : v)
    if (s.find(needle) != std::string::npos) return true;
  return false;
}
}  // namespace

BOOST_AUTO_TEST_SUITE(prepare_from_graph)

BOOST_AUTO_TEST_CASE(residual_model_fuses_everywhere_and_quantizes_the_skip) {
  SmallResNet net;
  QConfigRegistry reg;
  const PrepareReport r = prepare_qat(net, reg, example());
  BOOST_TEST_MESSAGE(r.table());
  BOOST_TEST(net.submodule("stem")->type_name() == "ConvBnReLU2d");
  BOOST_TEST(net.submodule("bn")->type_name() == "Identity");
  BOOST_TEST(net.submodule("relu")->type_name() == "Identity");
  BOOST_TEST(net.submodule("block.conv1")->type_name() == "ConvBnReLU2d");
  BOOST_TEST(net.submodule("block.conv2")->type_name() == "ConvBn2d");
  BOOST_TEST(net.submodule("block.bn2")->type_name() == "Identity");
  BOOST_TEST(net.submodule("fc")->type_name() == "QuantLinear");
  auto skip = std::dynamic_pointer_cast<FloatFunctional>(net.submodule("block.skip"));
  BOOST_REQUIRE(skip);
  BOOST_TEST(skip->quantizer() != nullptr);
  BOOST_TEST(r.warnings.empty(), r.table());
  // the report: every layer with its config and rule, the fused modules named
  auto stem = std::find_if(r.layers.begin(), r.layers.end(), [](auto& l) { return l.name == "stem"; });
  BOOST_REQUIRE(stem != r.layers.end());
  BOOST_TEST(stem->from_type == "Conv2d+BatchNorm2d+ReLU");
  BOOST_TEST((stem->absorbed == std::vector<std::string>{"bn", "relu"}));
  BOOST_TEST(r.table().find("block.skip") != std::string::npos);
  // the prepared model trains: gradients reach the weights through the fused layers
  net.train();
  Tensor loss = sum(net(Tensor::ones(Shape{2, 2, 8, 8})));
  loss.backward();
  BOOST_TEST(net.submodule("block.conv1")->parameter("weight").grad().defined());
}

BOOST_AUTO_TEST_CASE(without_example_input_unfused_siblings_are_reported) {
  SmallResNet net;
  QConfigRegistry reg;
  const PrepareReport r = prepare_qat(net, reg);
  BOOST_TEST(net.submodule("stem")->type_name() == "QuantConv2d");
  BOOST_TEST(net.submodule("bn")->type_name() == "BatchNorm2d");
  BOOST_TEST(has(r.warnings, "'bn' (BatchNorm2d) after 'stem' in SmallResNet is not fused"), r.table());
  BOOST_TEST(has(r.warnings, "'block.bn1' (BatchNorm2d) after 'block.conv1'"));
}

BOOST_AUTO_TEST_CASE(float_work_between_quantized_layers_is_flagged) {
  SmallResNet net(/*quantized_add=*/false);
  QConfigRegistry reg;
  const PrepareReport r = prepare_qat(net, reg, example());
  BOOST_TEST(has(r.warnings, "float op 'add' in (root) > block runs on the quantized output of 'stem' and "
                             "'block.conv2': use quant::Add"),
             r.table());
  // BN after a conv whose output is also read elsewhere cannot be fused
  struct Branchy : nn::Module {
    Branchy() : nn::Module("Branchy") {}
    Tensor forward(const Tensor& x) override {
      const Tensor c = conv_(quant_(x));
      return dequant_(skip_(c, bn_(c)));
    }
    nn::Child<> quant_ = register_child("quant", std::make_shared<QuantStub>());
    nn::Child<> conv_ = register_child("conv", std::make_shared<nn::Conv2d>(2, 2, 1));
    nn::Child<> bn_ = register_child("bn", std::make_shared<nn::BatchNorm2d>(2));
    nn::Child<Functional> skip_ = register_child<Functional>("skip", std::make_shared<Add>());
    nn::Child<> dequant_ = register_child("dequant", std::make_shared<DeQuantStub>());
  } b;
  const PrepareReport rb = prepare_qat(b, reg, Tensor::zeros(Shape{1, 2, 3, 3}));
  BOOST_TEST(b.submodule("bn")->type_name() == "BatchNorm2d");
  BOOST_TEST(has(rb.warnings, "float module 'bn' (BatchNorm2d) runs on the quantized output of 'conv': it "
                              "was not fused"),
             rb.table());
}

BOOST_AUTO_TEST_CASE(stale_member_pointers_are_an_error_and_the_model_is_unchanged) {
  struct Stale : nn::Module {
    Stale() : nn::Module("Stale") {
      quant = register_module("quant", std::make_shared<QuantStub>());
      fc = register_module("fc", std::make_shared<nn::Linear>(4, 2));
    }
    Tensor forward(const Tensor& x) override { return (*fc)((*quant)(x)); }
    std::shared_ptr<QuantStub> quant;
    std::shared_ptr<nn::Linear> fc;
  } m;
  QConfigRegistry reg;
  const std::string msg = error_of([&] { prepare_qat(m, reg, Tensor::zeros(Shape{1, 4})); });
  BOOST_TEST(msg.find("prepare_qat: the forward (in (root)) still calls the replaced module 'quant' "
                      "(QuantStub) through a pointer kept before prepare_qat") == 0,
             msg);
  BOOST_TEST(m.child("fc")->type_name() == "Linear");
  BOOST_TEST(m.child("quant").get() == m.quant.get());
  // without an example input it cannot be proven: the report names the references
  const PrepareReport r = prepare_qat(m, reg);
  BOOST_TEST(has(r.warnings, "'fc' (Linear) was replaced, but 1 other reference(s) to the old module remain"),
             r.table());
}

BOOST_AUTO_TEST_CASE(a_quantized_layer_called_on_two_inputs_is_refused) {
  struct Twice : nn::Module {
    Twice() : nn::Module("Twice") {}
    Tensor forward(const Tensor& x) override {
      const Tensor q = quant_(x);
      return fc_(relu(fc_(q)));
    }
    nn::Child<> quant_ = register_child("quant", std::make_shared<QuantStub>());
    nn::Child<> fc_ = register_child("fc", std::make_shared<nn::Linear>(3, 3));
  } m;
  QConfigRegistry reg;
  BOOST_TEST(error_of([&] { prepare_qat(m, reg, Tensor::zeros(Shape{1, 3})); }) ==
             "prepare_qat: 'fc' (QuantLinear) is called 2 times on different inputs: a quantized layer "
             "has one input range; use one module per call");
  BOOST_TEST(m.child("fc")->type_name() == "Linear");
}

BOOST_AUTO_TEST_CASE(unmatched_rules_warn_or_fail_in_strict_mode) {
  SmallResNet net;
  QConfigRegistry reg;
  reg.set_module_name("fc1", "int8_lsq");      // a typo: the layer is "fc"
  reg.set_module_glob("blok.*", "int8_lsq");   // a typo
  reg.set_module_type("Linear", "int8_default");  // matches
  const std::string msg =
      error_of([&] { prepare_qat(net, reg, example(), PrepareOptions{.strict = true}); });
  BOOST_TEST(msg ==
             "prepare_qat: registry rules that match no quantizable module: name fc1, glob blok.* "
             "(check the names, globs and types against the model's summary())");
  BOOST_TEST(net.submodule("stem")->type_name() == "Conv2d");  // unchanged, fusion undone too
  BOOST_TEST(net.submodule("bn")->type_name() == "BatchNorm2d");
  const PrepareReport r = prepare_qat(net, reg, example());
  BOOST_TEST((r.unmatched_rules == std::vector<std::string>{"name fc1", "glob blok.*"}));
  BOOST_TEST(r.table().find("warning: registry rules that match no quantizable module") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(reused_relu_is_not_fused) {
  auto relu = std::make_shared<nn::ReLU>();
  nn::Sequential seq(nn::NamedModules{{"quant", std::make_shared<QuantStub>()},
                                      {"fc1", std::make_shared<nn::Linear>(3, 3)},
                                      {"act1", relu},
                                      {"fc2", std::make_shared<nn::Linear>(3, 3)},
                                      {"act2", relu},
                                      {"dequant", std::make_shared<DeQuantStub>()}});
  QConfigRegistry reg;
  const PrepareReport r = prepare_qat(seq, reg, Tensor::zeros(Shape{1, 3}));
  BOOST_TEST(seq.child("fc1")->type_name() == "QuantLinear");
  BOOST_TEST(seq.child("act1")->type_name() == "ReLU");
  BOOST_TEST(has(r.warnings, "'act1' (ReLU) after 'fc1' is reused elsewhere: not fused"), r.table());
}

BOOST_AUTO_TEST_CASE(explicit_fuse_modules) {
  SmallResNet net;
  BOOST_TEST(error_of([&] { fuse_modules(net, {{"stem", "nope"}}); }) ==
             "fuse_modules: group {stem, nope}: no module 'nope' in SmallResNet");
  BOOST_TEST(error_of([&] {
               fuse_modules(net, {{"stem", "fc"}});
             }) ==
             "fuse_modules: group {stem, fc} has types (Conv2d, Linear); fusable are (Conv2d, "
             "BatchNorm2d[, ReLU]), (Conv2d, ReLU), (Linear, BatchNorm1d[, ReLU]), (Linear, ReLU)");
  BOOST_TEST(error_of([&] { fuse_modules(net, {{"stem", "bn"}, {"bn", "relu"}}); }) ==
             "fuse_modules: module 'bn' appears in two groups ({bn, relu})");
  BOOST_TEST(net.child("stem")->type_name() == "Conv2d");
  const auto fused = fuse_modules(net, {{"stem", "bn", "relu"}, {"block.conv1", "block.bn1"}});
  BOOST_TEST(fused.size() == 2u);
  BOOST_TEST(net.child("stem")->type_name() == "ConvBnReLU2d");
  BOOST_TEST(net.submodule("block.conv1")->type_name() == "ConvBn2d");
  BOOST_TEST(net.submodule("block.relu1")->type_name() == "ReLU");
  // fused in float: it runs; prepare_qat then gives it quantizers
  net(Tensor::ones(Shape{1, 2, 8, 8}));
  QConfigRegistry reg;
  const PrepareReport r = prepare_qat(net, reg, example());
  auto stem = std::dynamic_pointer_cast<QatLayer>(net.child("stem"));
  BOOST_REQUIRE(stem);
  BOOST_TEST(stem->has_quantizers());
  // the explicit group stays as the user fused it (conv1 + bn1; relu1 remains a ReLU)
  BOOST_TEST(net.submodule("block.conv1")->type_name() == "ConvBn2d");
  BOOST_TEST(net.submodule("block.relu1")->type_name() == "ReLU");
  BOOST_TEST(r.warnings.empty(), r.table());
}

BOOST_AUTO_TEST_SUITE_END()
