// Module hooks, nn::Child handles and graph capture (nn::trace).
#include <boost/test/unit_test.hpp>

#include "framework/autograd/ops.h"
#include "framework/nn/nn.h"
#include "framework/tensor/random.h"

using namespace qat;

namespace {

// A residual block written the natural way: children as nn::Child members, a float skip add.
class Block : public nn::Module {
 public:
  explicit Block(std::int64_t c) : nn::Module("Block") {}
  Tensor forward(const Tensor& x) override { return relu_(add(x, bn_(conv_(x)))); }

  nn::Child<> conv_ = register_child("conv", std::make_shared<nn::Conv2d>(
                                                 4, 4, 3, Conv2dParams{.padding = {1, 1}}));
  nn::Child<nn::BatchNorm2d> bn_ = register_child<nn::BatchNorm2d>("bn", std::make_shared<nn::BatchNorm2d>(4));
  nn::Child<> relu_ = register_child("relu", std::make_shared<nn::ReLU>());
};

class Net : public nn::Module {
 public:
  Net() : nn::Module("Net") {}
  Tensor forward(const Tensor& x) override {
    Tensor h = relu_(stem_(x));
    h = block_(h);
    return fc_(flatten(pool_(h)));
  }
  nn::Child<> stem_ = register_child("stem", std::make_shared<nn::Conv2d>(1, 4, 3, Conv2dParams{.padding = {1, 1}}));
  nn::Child<> relu_ = register_child("relu", std::make_shared<nn::ReLU>());
  nn::Child<> block_ = register_child("block", std::make_shared<Block>(4));
  nn::Child<> pool_ = register_child("pool", std::make_shared<nn::AdaptiveAvgPool2d>(Pair{1, 1}));
  nn::Child<> fc_ = register_child("fc", std::make_shared<nn::Linear>(4, 3));
};

int find(const nn::Graph& g, const std::string& name) {
  for (std::size_t i = 0; i < g.nodes.size(); ++i)
    if (g.nodes[i].atomic_level && !g.nodes[i].container && g.nodes[i].name == name)
      return static_cast<int>(i);
  return -2;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(graph_capture)

BOOST_AUTO_TEST_CASE(forward_hooks_see_and_replace_outputs) {
  nn::Linear fc(3, 2);
  std::vector<std::string> seen;
  const auto pre = fc.register_forward_pre_hook([&](nn::Module& m, const std::vector<Tensor>& in) {
    seen.push_back("pre " + m.type_name() + " " + in.at(0).shape().str());
  });
  const auto post = fc.register_forward_hook([&](nn::Module&, const std::vector<Tensor>&, Tensor& out) {
    seen.push_back("post");
    out = mul(out, 0.0);
  });
  const Tensor y = fc(Tensor::ones(Shape{5, 3}));
  BOOST_TEST(seen.size() == 2u);
  BOOST_TEST(seen[0] == "pre Linear [5, 3]");
  for (float v : y.to_vector<float>()) BOOST_TEST(v == 0.0f);
  BOOST_TEST(fc.remove_hook(pre));
  BOOST_TEST(fc.remove_hook(post));
  BOOST_TEST(!fc.remove_hook(post));
  seen.clear();
  fc(Tensor::ones(Shape{5, 3}));
  BOOST_TEST(seen.empty());
}

BOOST_AUTO_TEST_CASE(child_handle_follows_replacement) {
  Net net;
  const Tensor x = Tensor::ones(Shape{2, 1, 6, 6});
  net.replace_child("fc", std::make_shared<nn::Identity>());  // fc now returns its input
  BOOST_TEST(net(x).shape() == (Shape{2, 4}));
  // A typed handle names both types once its child changed kind.
  auto block = std::dynamic_pointer_cast<Block>(net.child("block"));
  block->replace_child("bn", std::make_shared<nn::Identity>());
  try {
    block->bn_.get();
    BOOST_FAIL("expected an error");
  } catch (const Error& e) {
    const std::string msg = e.what();
    BOOST_TEST(msg.find("nn::Child::get") != std::string::npos);
    BOOST_TEST(msg.find("'bn'") != std::string::npos);
    BOOST_TEST(msg.find("Identity") != std::string::npos);
  }
}

BOOST_AUTO_TEST_CASE(trace_records_modules_ops_and_data_flow) {
  Net net;
  net.train();
  const auto bn = std::dynamic_pointer_cast<nn::BatchNorm2d>(net.submodule("block.bn"));
  const std::vector<float> mean_before = bn->running_mean().to_vector<float>();
  const nn::Graph g = nn::trace(net, Tensor::ones(Shape{2, 1, 6, 6}));
  BOOST_TEST_MESSAGE(g.str());
  const int stem = find(g, "stem"), relu = find(g, "relu"), conv = find(g, "block.conv"),
            bnode = find(g, "block.bn"), add = find(g, "add"), brelu = find(g, "block.relu"),
            pool = find(g, "pool"), reshape = find(g, "reshape"), fc = find(g, "fc");
  for (int id : {stem, relu, conv, bnode, add, brelu, pool, reshape, fc}) BOOST_TEST(id >= 0);
  BOOST_TEST(g.nodes[stem].inputs == std::vector<int>{0});
  BOOST_TEST(g.nodes[relu].inputs == std::vector<int>{stem});
  // The block container is seen through: its conv reads the stem's relu.
  BOOST_TEST(g.nodes[conv].inputs == std::vector<int>{relu});
  BOOST_TEST((g.nodes[add].inputs == std::vector<int>{relu, bnode}));
  BOOST_TEST(g.scope_of(add) == "(root) > block");
  BOOST_TEST(g.nodes[pool].inputs == std::vector<int>{brelu});
  BOOST_TEST(g.nodes[reshape].inputs == std::vector<int>{pool});
  BOOST_TEST(g.nodes[fc].inputs == std::vector<int>{reshape});
  BOOST_TEST(g.output == fc);
  BOOST_TEST((g.users(relu) == std::vector<int>{conv, add}));
  BOOST_TEST(g.nodes[fc].shape == (Shape{2, 3}));
  // Linear's own ops ran inside an atomic call: recorded, but not at the atomic level.
  BOOST_TEST(find(g, "linear") == -2);
  // Tracing ran in eval mode without touching state, and restored the training flags.
  BOOST_TEST(net.is_training());
  BOOST_TEST(bn->is_training());
  BOOST_TEST(bn->running_mean().to_vector<float>() == mean_before);
}

BOOST_AUTO_TEST_CASE(trace_flags_modules_outside_the_model) {
  // A stale pointer: the forward still calls a module that is no longer in the tree.
  struct Stale : nn::Module {
    Stale() : nn::Module("Stale") { fc = register_module("fc", std::make_shared<nn::Linear>(2, 2)); }
    Tensor forward(const Tensor& x) override { return (*fc)(x); }
    std::shared_ptr<nn::Linear> fc;
  } m;
  m.replace_child("fc", std::make_shared<nn::Identity>());
  const nn::Graph g = nn::trace(m, Tensor::ones(Shape{1, 2}));
  BOOST_TEST(find(g, "<not in model>") >= 0);
  BOOST_TEST(find(g, "fc") == -2);
}

BOOST_AUTO_TEST_CASE(trace_reports_reused_modules_once_per_call) {
  auto relu = std::make_shared<nn::ReLU>();
  nn::Sequential seq{relu, std::make_shared<nn::Linear>(3, 3), relu};
  const nn::Graph g = nn::trace(seq, Tensor::ones(Shape{1, 3}));
  BOOST_TEST(g.calls(relu.get()).size() == 2u);
  BOOST_TEST(g.nodes[g.calls(relu.get())[0]].name == "0");
}

BOOST_AUTO_TEST_SUITE_END()
