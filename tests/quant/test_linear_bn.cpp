// Linear-BatchNorm1d: nn::BatchNorm1d, the QAT LinearBn1d (batch norm folded into the fake-quantized
// weight, PyTorch's LinearBn1d), its fusion (explicit fuse_modules, Sequential, the graph of a
// custom module), convert into QuantizedLinear, and checkpoints of both.
#include <algorithm>
#include <boost/test/unit_test.hpp>
#include <cmath>

#include "common/errors.h"
#include "framework/autograd/grad_mode.h"
#include "framework/autograd/ops.h"
#include "framework/io/checkpoint.h"
#include "framework/io/restore.h"
#include "framework/nn/nn.h"
#include "framework/optim/sgd.h"
#include "framework/tensor/random.h"
#include "modules/quant/quant.h"

using namespace qat;
using namespace qat::quant;
using test::error_of;
namespace tt = boost::test_tools;

namespace {

// quant -> fc1 -> bn1 -> relu1 -> fc2 -> dequant
nn::ModulePtr mlp_bn() {
  return std::make_shared<nn::Sequential>(
      nn::NamedModules{{"quant", std::make_shared<QuantStub>()},
                       {"fc1", std::make_shared<nn::Linear>(16, 32)},
                       {"bn1", std::make_shared<nn::BatchNorm1d>(32)},
                       {"relu1", std::make_shared<nn::ReLU>()},
                       {"fc2", std::make_shared<nn::Linear>(32, 4)},
                       {"dequant", std::make_shared<DeQuantStub>()}});
}

// The same network as a custom module calling its children: fused from the graph.
class MlpBn : public nn::Module {
 public:
  MlpBn()
      : nn::Module("MlpBn"),
        quant_(register_child("quant", std::make_shared<QuantStub>())),
        fc1_(register_child("fc1", std::make_shared<nn::Linear>(16, 32))),
        bn1_(register_child("bn1", std::make_shared<nn::BatchNorm1d>(32))),
        relu1_(register_child("relu1", std::make_shared<nn::ReLU>())),
        fc2_(register_child("fc2", std::make_shared<nn::Linear>(32, 4))),
        dequant_(register_child("dequant", std::make_shared<DeQuantStub>())) {}
  Tensor forward(const Tensor& x) override { return dequant_(fc2_(relu1_(bn1_(fc1_(quant_(x)))))); }

 private:
  nn::Child<> quant_, fc1_, bn1_, relu1_, fc2_, dequant_;
};

void train(nn::Module& model, std::uint64_t seed) {
  Generator gen(seed);
  optim::SGD opt(model.named_parameters(), {.lr = 0.05, .momentum = 0.9});
  model.train();
  for (int step = 0; step < 30; ++step) {
    Tensor x = Tensor::uniform(Shape{32, 16}, 0, 1, gen);
    std::vector<std::int64_t> y(32);
    for (std::size_t i = 0; i < y.size(); ++i)
      y[i] = (x.data<float>()[i * 16] > 0.5f) + 2 * (x.data<float>()[i * 16 + 1] > 0.5f);
    opt.zero_grad();
    cross_entropy(model.forward(x), Tensor::from_vector<std::int64_t>(y, Shape{32})).backward();
    opt.step();
  }
  model.eval();
}

std::vector<float> values(const Tensor& t) { return t.to_vector<float>(); }

}  // namespace

BOOST_AUTO_TEST_SUITE(batch_norm_1d)

BOOST_AUTO_TEST_CASE(module_normalises_per_channel_and_tracks_statistics) {
  nn::BatchNorm1d bn(3, 1e-5, 0.25);
  std::vector<std::string> names;
  for (const auto& [n, t] : bn.named_state()) names.push_back(n);
  const std::vector<std::string> expect{"weight", "bias", "running_mean", "running_var",
                                        "num_batches_tracked"};
  BOOST_TEST(names == expect, tt::per_element());
  Generator gen(1);
  const Tensor x = Tensor::uniform(Shape{8, 3}, -2, 3, gen);
  bn.train();
  const Tensor y = bn.forward(x);
  Tensor rm = Tensor::zeros(Shape{3}), rv = Tensor::ones(Shape{3});
  const Tensor want = batch_norm(x, rm, rv, bn.weight(), bn.bias(), true, 0.25, 1e-5);
  BOOST_TEST(values(y) == values(want), tt::per_element());
  BOOST_TEST(values(bn.running_mean()) == values(rm), tt::per_element());
  BOOST_TEST(values(bn.running_var()) == values(rv), tt::per_element());
  BOOST_TEST(bn.buffer("num_batches_tracked").item() == 1.0);
  // by hand for channel 0: running_mean = 0.25 mean(x[:, 0])
  double mean0 = 0;
  for (int n = 0; n < 8; ++n) mean0 += x.data<float>()[n * 3] / 8.0;
  BOOST_TEST(bn.running_mean().data<float>()[0] == 0.25 * mean0, tt::tolerance(1e-5));
  // eval: the running statistics, nothing moves; (N, C, L) is accepted too
  bn.eval();
  const Tensor e = bn.forward(x);
  BOOST_TEST(values(e) == values(batch_norm(x, rm, rv, bn.weight(), bn.bias(), false, 0.25, 1e-5)),
             tt::per_element());
  BOOST_TEST(bn.buffer("num_batches_tracked").item() == 1.0);
  BOOST_TEST(bn.forward(Tensor::zeros(Shape{2, 3, 5})).shape() == (Shape{2, 3, 5}));
  // frozen statistics in training mode
  bn.train();
  bn.freeze_stats();
  const auto frozen = values(bn.running_mean());
  bn.forward(x);
  BOOST_TEST(values(bn.running_mean()) == frozen, tt::per_element());
}

BOOST_AUTO_TEST_CASE(misuse_is_named) {
  nn::BatchNorm1d bn(3);
  BOOST_TEST(error_of([&] {
               bn.forward(Tensor::zeros(Shape{2, 4}));
             }) == "BatchNorm1d::forward: expected input (N, 3) or (N, 3, L), got [2, 4]");
  BOOST_TEST(error_of([&] {
               bn.forward(Tensor::zeros(Shape{2, 3, 1, 1}));
             }).find("got [2, 3, 1, 1]") != std::string::npos);
  BOOST_TEST(error_of([] { nn::BatchNorm1d(0); }) ==
             "BatchNorm1d: num_features must be positive, got 0");
  // a running variance below zero is refused on load, naming the tensor
  nn::BatchNorm1d other(3);
  io::Checkpoint ck = io::capture(other);
  for (auto& [n, t] : ck.tensors)
    if (n == "running_var") t = Tensor::full(Shape{3}, -1.0, DType::Float32);
  BOOST_TEST(error_of([&] { io::load_into(bn, ck); }).find("running_var") != std::string::npos);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(linear_bn)

// With the weight quantizer off, bn(x W^T f / f + b) is the unfused linear then batch norm; the
// running statistics move the same way; freeze_bn_stats holds them.
BOOST_AUTO_TEST_CASE(folded_forward_is_linear_then_bn) {
  manual_seed(5);
  nn::Linear lin(6, 4);
  auto bn = std::make_shared<nn::BatchNorm1d>(4);
  bn->weight().copy_(Tensor::from_vector<float>({0.5f, 1.5f, -2.0f, 1.0f}, Shape{4}));
  bn->running_var().copy_(Tensor::from_vector<float>({0.5f, 2.0f, 1.0f, 3.0f}, Shape{4}));
  nn::BatchNorm1d ref_bn(4);
  ref_bn.weight().copy_(bn->weight());
  ref_bn.running_var().copy_(bn->running_var());
  QConfigRegistry reg;
  const QConfig& c = reg.get("int8_default");
  auto wq = make_quantizer(*c.weight, lin.weight().shape());
  LinearBn1d fused(lin, bn, wq, nullptr, /*fused_relu=*/true);
  BOOST_TEST(fused.type_name() == "LinearBnReLU1d");
  wq->disable_fake_quant();
  Generator gen(6);
  const Tensor x = Tensor::uniform(Shape{10, 6}, -1, 1, gen);
  const auto y = values(fused.forward(x));
  const auto want = values(relu(ref_bn.forward(linear(x, lin.weight(), lin.bias()))));
  for (std::size_t i = 0; i < y.size(); ++i) BOOST_TEST(y[i] == want[i], tt::tolerance(2e-4f));
  const auto rm = values(bn->running_mean()), rr = values(ref_bn.running_mean());
  for (std::size_t i = 0; i < rm.size(); ++i) BOOST_TEST(rm[i] == rr[i], tt::tolerance(1e-4f));
  fused.freeze_bn_stats();
  fused.train();
  BOOST_TEST(!bn->is_training());
  const auto frozen = values(bn->running_mean());
  fused.forward(x);
  BOOST_TEST(values(bn->running_mean()) == frozen, tt::per_element());
  // gradients reach the weight, bias and the batch norm's gamma / beta
  wq->enable_fake_quant();
  fused.update_bn_stats();
  sum(fused.forward(x)).backward();
  BOOST_TEST(lin.weight().grad().defined());
  BOOST_TEST(bn->weight().grad().defined());
  BOOST_TEST(bn->bias().grad().defined());
  BOOST_TEST(error_of([&] {
               fused.forward(Tensor::zeros(Shape{2, 5}));
             }) == "LinearBnReLU1d: expected input (N, 6), got [2, 5]");
  BOOST_TEST(error_of([&] {
               LinearBn1d(lin, std::make_shared<nn::BatchNorm1d>(5), nullptr, nullptr);
             }).find("needs an affine batch norm over the 4 output channels, got BatchNorm1d of 5") !=
             std::string::npos);
}

BOOST_AUTO_TEST_CASE(fused_explicitly_in_sequential_and_from_the_graph) {
  // explicit
  auto a = mlp_bn();
  const auto done = fuse_modules(*a, {{"fc1", "bn1", "relu1"}});
  BOOST_TEST(done.at(0).type == "LinearBnReLU1d");
  BOOST_TEST(a->child("bn1")->type_name() == "Identity");
  BOOST_TEST(error_of([&] {
               fuse_modules(*mlp_bn(), {{"bn1", "fc1"}});
             })
                 .find("fusable are (Conv2d, BatchNorm2d[, ReLU]), (Conv2d, ReLU), (Linear, "
                       "BatchNorm1d[, ReLU])") != std::string::npos);
  // prepare_qat: by position in a Sequential, and from the graph of a custom module
  QConfigRegistry reg;
  auto s = mlp_bn();
  const PrepareReport rs = prepare_qat(*s, reg);
  BOOST_TEST(s->child("fc1")->type_name() == "LinearBnReLU1d");
  MlpBn g;
  const PrepareReport rg = prepare_qat(g, reg, Tensor::zeros(Shape{2, 16}));
  BOOST_TEST(g.child("fc1")->type_name() == "LinearBnReLU1d");
  BOOST_TEST(g.child("bn1")->type_name() == "Identity");
  BOOST_TEST(g.submodule("fc1.bn")->type_name() == "BatchNorm1d");
  BOOST_TEST(rg.table().find("Linear+BatchNorm1d+ReLU") != std::string::npos, rg.table());
  for (const auto& w : rg.warnings) BOOST_TEST(w.find("bn1") == std::string::npos, w);
  // a type rule for Linear covers the fused layer
  QConfigRegistry typed;
  typed.set_module_type("Linear", "int8_lsq");
  MlpBn t;
  const PrepareReport rt = prepare_qat(t, typed, Tensor::zeros(Shape{2, 16}), {.strict = true});
  const auto& fc1 = dynamic_cast<const LinearBn1d&>(*t.child("fc1"));
  BOOST_TEST(fc1.weight_fake_quant()->type_name() != "FakeQuantize",
             fc1.weight_fake_quant()->type_name());
  // freeze_bn_stats reaches the fused layer's batch norm
  BOOST_TEST(freeze_bn_stats(g) == 1);
  BOOST_TEST(dynamic_cast<const LinearBn1d&>(*g.child("fc1")).bn_frozen());
}

// QAT trains, converts (the batch norm folded into a QuantizedLinear) and agrees with the
// fake-quant model; the QAT and int8 models round-trip through checkpoints.
BOOST_AUTO_TEST_CASE(converts_to_quantized_linear_and_round_trips) {
  manual_seed(7);
  QConfigRegistry reg;
  MlpBn model;
  prepare_qat(model, reg, Tensor::zeros(Shape{2, 16}));
  train(model, 8);
  // the QAT checkpoint loads into a freshly prepared model and gives the same outputs
  MlpBn again;
  prepare_qat(again, reg, Tensor::zeros(Shape{2, 16}));
  io::load_into(again, io::from_bytes(io::to_bytes(io::capture(model))));
  again.eval();
  Generator gen(9);
  const Tensor x = Tensor::uniform(Shape{2000, 16}, 0, 1, gen);
  NoGradGuard ng;
  const Tensor yq = model.forward(x);
  BOOST_TEST(values(again.forward(x)) == values(yq), tt::per_element());
  // convert
  convert(again, Tensor::zeros(Shape{2, 16}));
  BOOST_TEST(again.child("fc1")->type_name() == "QuantizedLinear");
  BOOST_TEST(dynamic_cast<const QuantizedLinear&>(*again.child("fc1")).fused_relu());
  const Tensor y8 = again.forward(x);
  std::int64_t same = 0;
  const Tensor pa = argmax(yq, 1), pb = argmax(y8, 1);
  for (std::int64_t i = 0; i < pa.numel(); ++i)
    same += pa.data<std::int64_t>()[i] == pb.data<std::int64_t>()[i];
  BOOST_TEST(same >= 1990, "agreement " << same << " / 2000");
  // the int8 checkpoint round-trips
  MlpBn int8;
  prepare_qat(int8, reg, Tensor::zeros(Shape{2, 16}));
  convert(int8, Tensor::zeros(Shape{2, 16}), {.require_calibrated = false});
  io::load_into(int8, io::from_bytes(io::to_bytes(io::capture(again))));
  BOOST_TEST(values(int8.forward(x)) == values(y8), tt::per_element());
}

// quant::compare folds the float model's batch norm into fc1's weight, as LinearBn1d does: with
// the qparams observed on the final folded weight, 8-bit weights are well above 30 dB (unfolded,
// the rows' scales would not match).
BOOST_AUTO_TEST_CASE(numeric_report_folds_the_batch_norm) {
  manual_seed(11);
  MlpBn float_model;
  Generator gen(12);
  float_model.train();
  {
    NoGradGuard ng;
    for (int i = 0; i < 5; ++i) float_model.forward(Tensor::uniform(Shape{64, 16}, 0, 1, gen));
  }
  auto& bn = dynamic_cast<nn::BatchNorm1d&>(*float_model.child("bn1"));
  for (float v : values(bn.running_var())) BOOST_TEST(v != 1.0f);  // statistics that matter
  MlpBn qat_model;
  io::load_into(qat_model, io::capture(float_model));
  QConfigRegistry reg;
  prepare_qat(qat_model, reg, Tensor::zeros(Shape{2, 16}));
  const Tensor x = Tensor::uniform(Shape{256, 16}, 0, 1, gen);
  freeze_bn_stats(qat_model);
  qat_model.train();
  {
    NoGradGuard ng;
    qat_model.forward(x);  // observers see the folded weight and the outputs
  }
  qat_model.eval();
  float_model.eval();
  const NumericReport rep = compare(float_model, qat_model, x);
  const auto fc1 = std::find_if(rep.layers.begin(), rep.layers.end(),
                                [](const LayerNumerics& l) { return l.name == "fc1"; });
  BOOST_REQUIRE(fc1 != rep.layers.end());
  BOOST_TEST(fc1->type == "LinearBnReLU1d");
  BOOST_TEST(fc1->float_point == "relu1", rep.table());
  BOOST_TEST(fc1->weight_sqnr_db > 30.0, rep.table());
  BOOST_TEST(fc1->activation_sqnr_db > 20.0, rep.table());
}

BOOST_AUTO_TEST_SUITE_END()
