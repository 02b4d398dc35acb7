// qat::cat, the quantizable functional ops (quant::Add, AddReLU, Mul, Cat), their int8
// versions (bit-exact with the fake-quantized model) and the int8 average pools.
#include <algorithm>
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "common/errors.h"
#include "common/gradcheck.h"
#include "common/isa.h"
#include "framework/autograd/ops.h"
#include "framework/nn/basic.h"
#include "framework/nn/graph.h"
#include "framework/tensor/random.h"
#include "modules/quant/functional.h"
#include "modules/quant/kernels/cpu/int8_ops.h"
#include "modules/quant/observer.h"
#include "modules/quant/quantized_layers.h"
#include "modules/quant/quantizer.h"

namespace qat::test {
namespace {

namespace tt = boost::test_tools;
using namespace qat::quant;
namespace k8 = qat::quant::int8::kernels;

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}
#define EXPECT_ERROR(expr, ...)                                                        \
  do {                                                                                 \
    const std::string msg_ = error_of([&] { (void)(expr); });                          \
    for (const std::string& p_ : std::vector<std::string>{__VA_ARGS__})                \
      BOOST_TEST(contains(msg_, p_), "message '" << msg_ << "' lacks '" << p_ << "'"); \
  } while (0)

// uint8 codes uniform in [lo, hi], carrying `q`
Tensor codes(const Shape& s, QuantInfo q, int lo, int hi, std::uint64_t seed) {
  Generator gen(seed);
  Tensor t = Tensor::empty(s, DType::UInt8);
  for (std::int64_t i = 0; i < t.numel(); ++i)
    t.data<std::uint8_t>()[i] = static_cast<std::uint8_t>(lo + static_cast<int>(gen.below(hi - lo + 1)));
  t.set_quant_info(q);
  return t;
}

Tensor dequant(const Tensor& q) { return Dequantize().forward(q); }

// An output quantizer of `spec` with fixed qparams (scale, zero point in the spec's own range).
std::shared_ptr<FakeQuantize> fixed_fq(const QuantSpec& spec, float scale, std::int32_t zp) {
  auto fq = std::make_shared<FakeQuantize>(spec, std::make_shared<MinMaxObserver>(spec));
  fq->disable_observer();
  fq->scale().fill_(scale);
  fq->zero_point().fill_(zp);
  return fq;
}

// The quantizer's grid as uint8 storage, as convert builds it (signed codes shift by 128).
ActivationQuant storage_of(const QuantSpec& spec, float scale, std::int32_t zp) {
  const std::int32_t off = spec.is_signed ? 128 : 0;
  return {{scale, zp + off},
          static_cast<std::int32_t>(spec.quant_min()) + off,
          static_cast<std::int32_t>(spec.quant_max()) + off};
}

QuantSpec signed_affine() {
  QuantSpec s;
  s.is_signed = true;
  s.symmetric = false;
  return s;
}
QuantSpec signed_narrow() {
  QuantSpec s;
  s.is_signed = true;
  s.narrow_range = true;
  return s;
}

// ---- cat --------------------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(cat_gradcheck) {
  for (int dim : {0, 1, 2, -1, -3}) {
    BOOST_TEST_CONTEXT("dim " << dim) {
      const int d = dim < 0 ? dim + 3 : dim;
      Shape a{2, 3, 4}, b{2, 3, 4}, c{2, 3, 4};
      b[d] = 1;
      c[d] = 5;
      check_gradients("cat", [dim](const std::vector<Tensor>& in) { return cat(in, dim); },
                      {rand_double(a, 1), rand_double(b, 2), rand_double(c, 3)});
    }
  }
  // an input that needs no gradient gets none; the others still do
  Tensor x = rand_double(Shape{2, 2}, 4), fixed = rand_double(Shape{2, 3}, 5);
  fixed.requires_grad_(false);
  check_gradients("cat (one fixed input)", [](const std::vector<Tensor>& in) { return cat(in, 1); },
                  {x, fixed});
}

BOOST_AUTO_TEST_CASE(cat_values) {
  Tensor a = Tensor::from_vector<float>({1, 2, 3, 4}, Shape{2, 2});
  Tensor b = Tensor::from_vector<float>({5, 6}, Shape{2, 1});
  BOOST_TEST(cat({a, b}, 1).to_vector<float>() == (std::vector<float>{1, 2, 5, 3, 4, 6}),
             tt::per_element());
  BOOST_TEST(cat({a, b}, -1).shape() == (Shape{2, 3}));
  Tensor c = Tensor::from_vector<float>({7, 8}, Shape{1, 2});
  BOOST_TEST(cat({a, c}, 0).to_vector<float>() == (std::vector<float>{1, 2, 3, 4, 7, 8}),
             tt::per_element());
  BOOST_TEST(cat({a}, 0).to_vector<float>() == a.to_vector<float>(), tt::per_element());
}

BOOST_AUTO_TEST_CASE(cat_errors) {
  Tensor a = Tensor::zeros(Shape{2, 3}), b = Tensor::zeros(Shape{2, 3, 1}),
         c = Tensor::zeros(Shape{4, 2});
  EXPECT_ERROR(cat({}, 0), "cat", "empty list");
  EXPECT_ERROR(cat({a, b}, 0), "cat", "input 1", "[2, 3, 1]", "rank 3", "[2, 3]");
  EXPECT_ERROR(cat({a, a, c}, 1), "cat", "input 2", "[4, 2]", "[2, 3]", "except along dim 1");
  EXPECT_ERROR(cat({a, a}, 2), "cat");
  EXPECT_ERROR(cat({a, Tensor::zeros(Shape{2, 3}, DType::Float64)}, 0), "cat", "input 1", "float64");
  EXPECT_ERROR(cat({a, Tensor::zeros(Shape{2, 3}, DType::Int32)}, 0), "cat", "input 1",
               "must be float32 or float64, got int32");
}

// ---- float / QAT functional ops -----------------------------------------------------------------

BOOST_AUTO_TEST_CASE(float_ops_compute_their_op) {
  Generator gen(7);
  Tensor a = Tensor::uniform(Shape{3, 4}, -1, 1, gen), b = Tensor::uniform(Shape{3, 4}, -1, 1, gen);
  Tensor row = Tensor::uniform(Shape{4}, -1, 1, gen);
  Add add_op;
  AddReLU add_relu;
  Mul mul_op;
  Cat cat_op(0);
  BOOST_TEST(add_op(a, b).to_vector<float>() == add(a, b).to_vector<float>(), tt::per_element());
  BOOST_TEST(add_op(a, row).to_vector<float>() == add(a, row).to_vector<float>(), tt::per_element());
  BOOST_TEST(add_relu(a, b).to_vector<float>() == relu(add(a, b)).to_vector<float>(), tt::per_element());
  BOOST_TEST(mul_op(a, b).to_vector<float>() == mul(a, b).to_vector<float>(), tt::per_element());
  BOOST_TEST(cat_op({a, b, a}).to_vector<float>() == cat({a, b, a}, 0).to_vector<float>(),
             tt::per_element());
  BOOST_TEST(cat_op(a).to_vector<float>() == a.to_vector<float>(), tt::per_element());  // one input
  BOOST_TEST(add_op.type_name() == "Add");
  BOOST_TEST(add_relu.type_name() == "AddReLU");
  BOOST_TEST(mul_op.type_name() == "Mul");
  BOOST_TEST(cat_op.type_name() == "Cat");
  BOOST_TEST(cat_op.extra_repr() == "dim=0");
  BOOST_TEST(add_op.is_atomic());
  BOOST_TEST(add_op.quantizer() == nullptr);
}

BOOST_AUTO_TEST_CASE(arity_errors) {
  Tensor a = Tensor::zeros(Shape{2});
  Add add_op;
  Mul mul_op;
  Cat cat_op;
  EXPECT_ERROR(add_op(a), "Add", "takes 2 inputs", "op(a, b)");
  EXPECT_ERROR(add_op(std::vector<Tensor>{a, a, a}), "Add", "takes 2 inputs, got 3");
  EXPECT_ERROR(mul_op(std::vector<Tensor>{a}), "Mul", "takes 2 inputs, got 1");
  EXPECT_ERROR(cat_op(std::vector<Tensor>{}), "Cat", "takes at least 1 input, got 0");
}

BOOST_AUTO_TEST_CASE(hooks_see_multi_input_calls) {
  Add add_op;
  std::size_t seen = 0;
  add_op.register_forward_pre_hook([&](nn::Module& m, const std::vector<Tensor>& in) {
    BOOST_TEST(m.type_name() == "Add");
    seen = in.size();
  });
  add_op.register_forward_hook(
      [](nn::Module&, const std::vector<Tensor>&, Tensor& out) { out = mul(out, 2.0); });
  Tensor a = Tensor::full(Shape{2}, 1.0f), b = Tensor::full(Shape{2}, 2.0f);
  BOOST_TEST(add_op(a, b).to_vector<float>() == (std::vector<float>{6, 6}), tt::per_element());
  BOOST_TEST(seen == 2u);
}

BOOST_AUTO_TEST_CASE(set_quantizer_registers_the_child_once) {
  Add add_op;
  const QuantSpec spec = QuantSpec::activation_affine(8);
  auto fq = fixed_fq(spec, 0.1f, 10);
  EXPECT_ERROR(add_op.set_quantizer(nullptr), "set_quantizer", "Add", "null");
  add_op.set_quantizer(fq);
  BOOST_TEST(add_op.quantizer() == fq);
  BOOST_TEST(add_op.child("activation_post_process") == fq);
  EXPECT_ERROR(add_op.set_quantizer(fixed_fq(spec, 0.1f, 10)), "set_quantizer", "Add", "already has");
  // the output goes through the quantizer
  Generator gen(8);
  Tensor a = Tensor::uniform(Shape{50}, -3, 3, gen), b = Tensor::uniform(Shape{50}, -3, 3, gen);
  Tensor want = fq->forward(add(a, b));
  BOOST_TEST(add_op(a, b).to_vector<float>() == want.to_vector<float>(), tt::per_element());
}

// The straight-through estimator: d out / d input = 1 (add) or the other input (mul) where the
// output quantizer did not clamp, 0 where it did; both inputs get their gradient.
BOOST_AUTO_TEST_CASE(ste_gradient_reaches_both_inputs) {
  const QuantSpec spec = QuantSpec::activation_affine(8);
  for (int which = 0; which < 3; ++which) {
    BOOST_TEST_CONTEXT("op " << which) {
      std::shared_ptr<FloatFunctional> op;
      if (which == 0) op = std::make_shared<Add>();
      if (which == 1) op = std::make_shared<AddReLU>();
      if (which == 2) op = std::make_shared<Mul>();
      op->set_quantizer(fixed_fq(spec, 0.02f, 128));  // range [-2.56, 2.54]
      Generator gen(9);
      Tensor a = Tensor::uniform(Shape{200}, -2, 2, gen), b = Tensor::uniform(Shape{200}, -2, 2, gen);
      a.requires_grad_(true);
      b.requires_grad_(true);
      sum((*op)(a, b)).backward();
      BOOST_REQUIRE(a.grad().defined());
      BOOST_REQUIRE(b.grad().defined());
      const auto av = a.to_vector<float>(), bv = b.to_vector<float>();
      const auto ga = a.grad().to_vector<float>(), gb = b.grad().to_vector<float>();
      int passed = 0, blocked = 0;
      for (std::size_t i = 0; i < av.size(); ++i) {
        const float v = which == 2 ? av[i] * bv[i] : av[i] + bv[i];
        const float r = which == 1 ? std::max(v, 0.0f) : v;
        const float q = std::nearbyint(r * (1.0f / 0.02f)) + 128;
        const bool inside = q >= 0 && q <= 255;
        const float relu_grad = which == 1 && v <= 0 ? 0.0f : 1.0f;
        const float want_a = inside ? relu_grad * (which == 2 ? bv[i] : 1.0f) : 0.0f;
        const float want_b = inside ? relu_grad * (which == 2 ? av[i] : 1.0f) : 0.0f;
        BOOST_TEST(ga[i] == want_a);
        BOOST_TEST(gb[i] == want_b);
        (inside ? passed : blocked) += 1;
      }
      BOOST_TEST(passed > 20);
      if (which != 1) BOOST_TEST(blocked > 5);
    }
  }
}

// A skip connection through an Add held as nn::Child<quant::Functional>: one atomic graph node
// with both inputs, and the Child follows its replacement by the int8 version.
BOOST_AUTO_TEST_CASE(graph_capture_and_child_handles) {
  struct Net : nn::Module {
    Net() : nn::Module("Net") {}
    nn::Child<Functional> skip_ = register_child<Functional>("skip", std::make_shared<Add>());
    Tensor forward(const Tensor& x) override { return skip_(x, relu(x)); }
  } net;
  const nn::Graph g = nn::trace(net, Tensor::zeros(Shape{2, 3}));
  const std::vector<int> calls = g.calls(net.child("skip").get());
  BOOST_REQUIRE(calls.size() == 1u);
  const nn::GraphNode& node = g.nodes[calls[0]];
  BOOST_TEST(node.type == "Add");
  BOOST_TEST(node.name == "skip");
  BOOST_TEST(node.inputs.size() == 2u);
  BOOST_TEST(node.inputs[0] == 0);  // the model input
  BOOST_TEST(g.output == calls[0]);
  net.replace_child("skip", std::make_shared<QuantizedAdd>(ActivationQuant{{0.1, 128}, 0, 255}));
  const Tensor q = codes(Shape{2, 3}, {0.1, 128}, 0, 255, 80);
  BOOST_TEST(net.skip_->type_name() == "QuantizedAdd");
  BOOST_TEST(net.skip_(q, q).dtype() == DType::UInt8);
}

// ---- int8 ops vs the fake-quantized model ----------------------------------------------------------

struct Case {
  const char* name;
  QuantSpec spec;
  std::int32_t zp;  // in the spec's own range
};

std::vector<Case> output_cases() {
  return {{"uint8 affine", QuantSpec::activation_affine(8), 37},
          {"int8 affine", signed_affine(), -20},
          {"int8 symmetric narrow", signed_narrow(), 0}};
}

// The QAT model: float op on the dequantized codes, output fake quantizer (scale, zp); the int8
// module from op.quantized(); equal dequantized outputs (bitwise) and equal codes.
// Returns how many outputs were clamped (to check the clamp is exercised).
std::int64_t check_exact(FloatFunctional& op, const std::vector<Tensor>& inputs, const Case& c,
                         float scale) {
  op.eval();
  op.set_quantizer(fixed_fq(c.spec, scale, c.zp));
  std::vector<Tensor> floats;
  for (const Tensor& q : inputs) floats.push_back(dequant(q));
  const Tensor want = op(floats);
  const ActivationQuant aq = storage_of(c.spec, scale, c.zp);
  auto int8_op = std::dynamic_pointer_cast<Functional>(op.quantized(aq));
  BOOST_REQUIRE(int8_op != nullptr);
  BOOST_TEST(int8_op->type_name() == "Quantized" + op.type_name());
  std::int64_t clamped = 0;
  for_each_isa([&](cpu::Isa) {
    const Tensor got = (*int8_op)(inputs);
    BOOST_REQUIRE(got.dtype() == DType::UInt8);
    BOOST_TEST(got.shape() == want.shape());
    BOOST_TEST((got.quant_info() == aq.quant));
    const auto gd = dequant(got).to_vector<float>(), wd = want.to_vector<float>();
    std::int64_t bad = 0, lo = 0, hi = 0;
    const auto* pq = got.data<std::uint8_t>();
    for (std::size_t i = 0; i < gd.size(); ++i) {
      // the code the fake quantizer chose: y = (c - z) s exactly, so y / s rounds to c - z
      const float cz = std::nearbyint(wd[i] / scale);
      const bool same = std::memcmp(&gd[i], &wd[i], sizeof(float)) == 0 &&
                        static_cast<float>(pq[i]) == cz + static_cast<float>(aq.quant.zero_point);
      bad += !same;
      lo += pq[i] == aq.lo;
      hi += pq[i] == aq.hi;
      BOOST_TEST_REQUIRE(bad < 5, "element " << i << ": int8 " << int(pq[i]) << " (" << gd[i]
                                             << "), fake quant " << wd[i]);
    }
    BOOST_TEST(bad == 0);
    clamped = lo + hi;
    BOOST_TEST(lo + hi < std::ssize(gd) * 9 / 10);  // ... and many values are inside
  });
  return clamped;
}

BOOST_AUTO_TEST_CASE(int8_binary_ops_match_fake_quant_exactly) {
  const QuantInfo qa{0.031f, 140}, qb{0.017f, 100}, qs{0.05f, 128};
  const std::vector<std::pair<Shape, Shape>> shapes = {{Shape{3, 5, 7, 9}, Shape{3, 5, 7, 9}},
                                                       {Shape{1003}, Shape{1003}},
                                                       {Shape{3, 5, 7, 9}, Shape{1, 5, 1, 1}},
                                                       {Shape{2, 1, 7, 9}, Shape{9}},
                                                       {Shape{1}, Shape{4, 33}},
                                                       {Shape{5, 1, 3}, Shape{1, 4, 1}}};
  for (const Case& c : output_cases())
    for (int which = 0; which < 3; ++which) {
      std::int64_t clamped = 0;
      for (const auto& [sa, sb] : shapes) {
        BOOST_TEST_CONTEXT(c.name << ", " << sa << " op " << sb << ", op " << which) {
          // input b: codes of a narrow signed grid stored as uint8 (lo 1)
          const Tensor a = codes(sa, qa, 0, 255, 11), b = codes(sb, which == 2 ? qs : qb, 1, 255, 12);
          std::shared_ptr<FloatFunctional> op;
          float scale = 0.045f;  // a + b within about [-7.3, 4.1]
          if (which == 0) op = std::make_shared<Add>();
          if (which == 1) op = std::make_shared<AddReLU>(), scale = 0.02f;
          if (which == 2) op = std::make_shared<Mul>(), scale = 0.1f;  // |a b| up to 27
          clamped += check_exact(*op, {a, b}, c, scale);
        }
      }
      BOOST_TEST(clamped > 0, c.name << ", op " << which << ": the clamp is exercised");
    }
}

BOOST_AUTO_TEST_CASE(int8_cat_matches_fake_quant_exactly) {
  for (const Case& c : output_cases()) {
    BOOST_TEST_CONTEXT(c.name) {
      const float scale = 0.03f;
      const ActivationQuant out = storage_of(c.spec, scale, c.zp);
      // inputs: other scales / zero points, and one already quantized as the output
      const Tensor a = codes(Shape{2, 3, 5, 7}, {0.05f, 120}, 0, 255, 21);
      const Tensor b = codes(Shape{2, 1, 5, 7}, {0.011f, 3}, 0, 255, 22);
      const Tensor d = codes(Shape{2, 4, 5, 7}, out.quant, out.lo, out.hi, 23);
      Cat op(1);
      BOOST_TEST(check_exact(op, {a, b, d}, c, scale) > 0);
      Cat last(-1);
      check_exact(last, {a, codes(Shape{2, 3, 5, 2}, {0.02f, 77}, 0, 255, 24)}, c, scale);
    }
  }
}

// the unclamped-output copy path: a full [0, 255] range and the input's own quantization
BOOST_AUTO_TEST_CASE(int8_cat_copies_an_input_with_the_output_quantization) {
  const ActivationQuant out{{0.07f, 90}, 0, 255};
  const Tensor a = codes(Shape{3, 4, 5}, out.quant, 0, 255, 31),
               b = codes(Shape{3, 2, 5}, {0.01f, 5}, 0, 255, 32);
  QuantizedCat op(out, 1);
  const Tensor y = op(a, b);
  const Tensor ref = Quantize(out).forward(cat({dequant(a), dequant(b)}, 1));
  BOOST_TEST(y.to_vector<std::uint8_t>() == ref.to_vector<std::uint8_t>(), tt::per_element());
  for (std::int64_t i = 0; i < 3; ++i)
    for (std::int64_t j = 0; j < 20; ++j)
      BOOST_TEST(y.data<std::uint8_t>()[i * 30 + j] == a.data<std::uint8_t>()[i * 20 + j]);
}

BOOST_AUTO_TEST_CASE(int8_module_state_and_repr) {
  const ActivationQuant out{{0.5f, 130}, 1, 255};
  QuantizedAdd add_op(out);
  BOOST_TEST(add_op.type_name() == "QuantizedAdd");
  BOOST_TEST((add_op.output_quant() == out.quant));
  BOOST_TEST(add_op.output().lo == 1);
  BOOST_TEST(add_op.buffer("scale").item() == 0.5);
  BOOST_TEST(add_op.buffer("zero_point").to_vector<std::int32_t>() == (std::vector<std::int32_t>{130}));
  BOOST_TEST(add_op.buffer("output_range").to_vector<std::int32_t>() ==
             (std::vector<std::int32_t>{1, 255}));
  BOOST_TEST(contains(add_op.extra_repr(), "scale=0.5, zero_point=130"));
  BOOST_TEST(QuantizedAddReLU(out).type_name() == "QuantizedAddReLU");
  BOOST_TEST(QuantizedMul(out).type_name() == "QuantizedMul");
  QuantizedCat cat_op(out, 2);
  BOOST_TEST(cat_op.dim() == 2);
  BOOST_TEST(contains(cat_op.extra_repr(), "dim=2"));
  EXPECT_ERROR(QuantizedAdd(ActivationQuant{{0.5f, 300}, 0, 255}), "QuantizedAdd", "zero_point 300");
  EXPECT_ERROR(QuantizedMul(ActivationQuant{{-1.0f, 0}, 0, 255}), "QuantizedMul",
               "scale must be positive");
}

BOOST_AUTO_TEST_CASE(int8_input_errors) {
  const ActivationQuant out{{0.1f, 128}, 0, 255};
  QuantizedAdd add_op(out);
  QuantizedCat cat_op(out, 1);
  const Tensor q = codes(Shape{2, 3}, {0.1f, 128}, 0, 255, 41);
  Tensor plain = Tensor::zeros(Shape{2, 3}, DType::UInt8);  // not quantized
  EXPECT_ERROR(add_op(q, Tensor::zeros(Shape{2, 3})), "QuantizedAdd", "input 1", "quantized uint8");
  EXPECT_ERROR(add_op(plain, q), "QuantizedAdd", "input 0", "quantized uint8");
  EXPECT_ERROR(add_op(q, codes(Shape{4}, {0.1f, 128}, 0, 255, 42)), "QuantizedAdd", "[2, 3]", "[4]",
               "broadcast");
  EXPECT_ERROR(add_op(q), "QuantizedAdd", "takes 2 inputs");
  EXPECT_ERROR(cat_op({q, codes(Shape{3, 3}, {0.1f, 128}, 0, 255, 43)}), "QuantizedCat", "input 1",
               "[3, 3]", "[2, 3]");
  EXPECT_ERROR(cat_op({q, q, Tensor::zeros(Shape{2, 3})}), "QuantizedCat", "input 2");
}

// ---- the kernels vs a scalar reference, every CPU path ---------------------------------------------

// reference: the fake-quantized model's float32 operations one element at a time (this file is
// compiled with -ffp-contract=off)
std::uint8_t ref_out(float v, k8::OutQuant o) {
  const float q = std::nearbyint(v * o.inv) + o.zero_point;
  const float c = q > o.lo ? q : o.lo;
  return static_cast<std::uint8_t>(c < o.hi ? c : o.hi);
}
float ref_in(std::uint8_t q, k8::InQuant i) { return (static_cast<float>(q) - i.zero_point) * i.scale; }

// Configurations: scales at random; scales whose sums fall on ties of the rounding (halves);
// the full code range; an output scale so fine that |v inv| passes 2^22 (the kernels' magic-
// number requantization does not hold there: the general one runs); input zero points that are
// not an integer or pass 2^21 (the general dequantization runs).
BOOST_AUTO_TEST_CASE(int8_kernels_match_scalar_reference) {
  const struct {
    k8::InQuant ia, ib;
    k8::OutQuant out;
  } configs[] = {
      {{0.023f, 131}, {0.041f, 7}, {1.0f / 0.037f, 120, 3, 250}},
      {{0.5f, 128}, {0.25f, 3}, {1.0f, 128, 0, 255}},
      {{1.5f, 0}, {0.75f, 255}, {2.0f, 255, 0, 255}},
      {{0.1f, 64}, {0.3f, 200}, {1.0f / 3e-6f, 17, 0, 255}},
      {{0.02f, 2.5f}, {0.25f, 3}, {1.0f / 0.037f, 120, 3, 250}},
      {{0.5f, 128}, {1e-5f, 3000000.0f}, {2.0f, 64, 0, 255}},
  };
  for (const auto& config : configs)  // (not a structured binding: clang 14 cannot capture one)
    for_each_isa([&, &ia = config.ia, &ib = config.ib, &out = config.out](cpu::Isa) {
      for (std::int64_t n : {1, 2, 3, 7, 8, 15, 16, 17, 31, 33, 63, 65, 1001}) {
        const Tensor a = codes(Shape{n}, {}, 0, 255, 50 + n), b = codes(Shape{n}, {}, 0, 255, 60 + n);
        const auto* pa = a.data<std::uint8_t>();
        const auto* pb = b.data<std::uint8_t>();
        std::vector<std::uint8_t> y(n), want(n);
        for (auto op : {k8::BinaryOp::Add, k8::BinaryOp::AddReLU, k8::BinaryOp::Mul})
          for (std::int64_t sa : {0, 1})
            for (std::int64_t sb : {0, 1}) {
              BOOST_TEST_CONTEXT("n " << n << ", op " << int(op) << ", strides " << sa << " " << sb
                                      << ", output inv " << out.inv) {
                k8::binary_u8(op, pa, sa, ia, pb, sb, ib, n, out, y.data());
                for (std::int64_t i = 0; i < n; ++i) {
                  const float xa = ref_in(pa[i * sa], ia), xb = ref_in(pb[i * sb], ib);
                  float v = op == k8::BinaryOp::Mul ? xa * xb : xa + xb;
                  if (op == k8::BinaryOp::AddReLU) v = v > 0 ? v : 0;
                  want[i] = ref_out(v, out);
                }
                BOOST_TEST(y == want, tt::per_element());
              }
            }
        k8::requantize_u8(pa, n, ia, out, y.data());
        for (std::int64_t i = 0; i < n; ++i) want[i] = ref_out(ref_in(pa[i], ia), out);
        BOOST_TEST(y == want, tt::per_element());
      }
    });
}

// quantize_u8 (the int8 model's input) on every path against its formula, one element at a
// time: ties of the rounding, signed zeros, NaN, infinities, huge values, values near 2^22 / inv
// (where the kernel's magic-number rounding ends), odd lengths; and a zero point that is not an
// integer (the kernel's general loop).
BOOST_AUTO_TEST_CASE(int8_quantize_matches_formula) {
  const struct {
    float inv, zp, lo, hi;
  } configs[] = {{1.0f / 0.05f, 128, 0, 255},
                 {2.0f, 3, 5, 250},
                 {1.0f, 300, 0, 255},
                 {1e-3f, -7, 0, 255},
                 {0.5f, 2.5f, 0, 255}};
  std::vector<float> x;
  std::mt19937 gen(3);
  std::uniform_real_distribution<float> u(-300, 300);
  for (int i = 0; i < 700; ++i) x.push_back(u(gen));
  for (int k = -300; k <= 300; ++k) x.push_back(k + 0.5f), x.push_back(0.25f * k);
  const float inf = std::numeric_limits<float>::infinity(),
              nan = std::numeric_limits<float>::quiet_NaN();
  for (float v : {0.0f, -0.0f, -1e-30f, 1e-30f, nan, -nan, inf, -inf, 1e30f, -1e30f, 3e38f, -3e38f})
    x.push_back(v);
  for (const auto& c : configs) {
    for (float e : {4194304.0f, 2097152.0f, 8388608.0f, 16777216.0f})
      for (float d : {-1.5f, -0.5f, 0.0f, 0.5f, 1.5f})
        x.push_back((e + d) / c.inv), x.push_back(-(e + d) / c.inv);
  }
  for (const auto& c : configs)
    for_each_isa([&](cpu::Isa) {
      for (std::size_t n : {x.size(), std::size_t{1}, std::size_t{7}, std::size_t{33}}) {
        std::vector<std::uint8_t> q(n);
        k8::quantize_u8(x.data(), static_cast<std::int64_t>(n), c.inv, c.zp, c.lo, c.hi, q.data());
        int bad = 0;
        for (std::size_t i = 0; i < n; ++i) {
          const float v = std::nearbyint(x[i] * c.inv) + c.zp;
          const float k = v > c.lo ? v : c.lo;
          bad += q[i] != static_cast<std::uint8_t>(static_cast<std::int32_t>(k < c.hi ? k : c.hi));
        }
        BOOST_TEST(bad == 0,
                   "inv " << c.inv << " zp " << c.zp << " n " << n << ": " << bad << " codes differ");
      }
    });
}

// Every pair of codes once (65536 elements): v = x_a + x_b on a grid of quarters, times inv = 2
// on halves, so that every second element falls on a tie of the rounding; each output code,
// and clamping at both ends.
BOOST_AUTO_TEST_CASE(int8_add_every_code_pair) {
  std::vector<std::uint8_t> a(65536), b(65536), y(65536);
  for (int i = 0; i < 65536; ++i)
    a[i] = static_cast<std::uint8_t>(i >> 8), b[i] = static_cast<std::uint8_t>(i);
  const k8::InQuant ia{0.5f, 128}, ib{0.25f, 3};
  const k8::OutQuant out{2.0f, 64, 0, 255};
  for_each_isa([&](cpu::Isa) {
    for (auto op : {k8::BinaryOp::Add, k8::BinaryOp::Mul}) {
      k8::binary_u8(op, a.data(), 1, ia, b.data(), 1, ib, 65536, out, y.data());
      int bad = 0;
      for (int i = 0; i < 65536; ++i) {
        const float xa = ref_in(a[i], ia), xb = ref_in(b[i], ib);
        bad += y[i] != ref_out(op == k8::BinaryOp::Mul ? xa * xb : xa + xb, out);
      }
      BOOST_TEST(bad == 0, "op " << int(op) << ": " << bad << " codes differ");
    }
  });
}

// ---- int8 average pools ------------------------------------------------------------------------

// straightforward reference: z + round_half_even(sum (q - z) / count), in double
Tensor ref_avg_pool(
    const Tensor& x, std::int64_t Ho, std::int64_t Wo,
    const std::function<void(std::int64_t, std::int64_t, std::int64_t[4], std::int64_t&)>& window) {
  const std::int64_t P = x.size(0) * x.size(1), H = x.size(2), W = x.size(3);
  const std::int32_t z = x.quant_info().zero_point;
  Tensor y = Tensor::empty(Shape{x.size(0), x.size(1), Ho, Wo}, DType::UInt8);
  for (std::int64_t p = 0; p < P; ++p)
    for (std::int64_t oh = 0; oh < Ho; ++oh)
      for (std::int64_t ow = 0; ow < Wo; ++ow) {
        std::int64_t box[4], count;  // h0, h1, w0, w1 clipped; count
        window(oh, ow, box, count);
        double s = 0;
        for (std::int64_t h = box[0]; h < box[1]; ++h)
          for (std::int64_t w = box[2]; w < box[3]; ++w)
            s += x.data<std::uint8_t>()[(p * H + h) * W + w] - z;
        y.data<std::uint8_t>()[(p * Ho + oh) * Wo + ow] =
            static_cast<std::uint8_t>(z + std::nearbyint(s / count));
      }
  return y;
}

// got: the int8 pool; integer: the integer-average reference; float_out: the float pool of the
// dequantized input. The int8 pool is the float pool requantized to the input's grid exactly (what
// the QAT model's QuantPool computes); the integer average differs by one code at most, at ties.
void check_pool(const Tensor& x, const Tensor& got, const Tensor& integer, const Tensor& float_out) {
  BOOST_TEST(got.shape() == integer.shape());
  BOOST_TEST((got.quant_info() == x.quant_info()));
  const Tensor fq = Quantize(ActivationQuant{x.quant_info(), 0, 255}).forward(float_out);
  BOOST_TEST(got.to_vector<std::uint8_t>() == fq.to_vector<std::uint8_t>(), tt::per_element());
  const auto g = got.to_vector<std::uint8_t>(), w = integer.to_vector<std::uint8_t>();
  int max_diff = 0, differ = 0;
  for (std::size_t i = 0; i < g.size(); ++i) {
    max_diff = std::max(max_diff, std::abs(int(g[i]) - int(w[i])));
    differ += g[i] != w[i];
  }
  BOOST_TEST(max_diff <= 1);
  BOOST_TEST(differ * 10 < std::ssize(g));  // off by one only at ties
}

BOOST_AUTO_TEST_CASE(int8_avg_pool) {
  const Tensor x = codes(Shape{2, 3, 7, 9}, {0.05, 97}, 0, 255, 70);
  const std::vector<Pool2dParams> params = {
      {.kernel = {2, 2}},
      {.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1}},
      {.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1}, .count_include_pad = false},
      {.kernel = {3, 2}, .stride = {1, 2}, .padding = {1, 0}},
      {.kernel = {7, 9}}};
  for (const Pool2dParams& p : params) {
    BOOST_TEST_CONTEXT("kernel " << p.kernel[0] << "x" << p.kernel[1] << " pad " << p.padding[0]
                                 << " include_pad " << p.count_include_pad) {
      const Pair s = p.stride == Pair{0, 0} ? p.kernel : p.stride;
      const std::int64_t Ho = (7 + 2 * p.padding[0] - p.kernel[0]) / s[0] + 1,
                         Wo = (9 + 2 * p.padding[1] - p.kernel[1]) / s[1] + 1;
      const Tensor want = ref_avg_pool(
          x, Ho, Wo, [&](std::int64_t oh, std::int64_t ow, std::int64_t b[4], std::int64_t& n) {
            const std::int64_t h0 = oh * s[0] - p.padding[0], w0 = ow * s[1] - p.padding[1];
            const std::int64_t h1 = std::min(h0 + p.kernel[0], 7 + p.padding[0]),
                               w1 = std::min(w0 + p.kernel[1], 9 + p.padding[1]);
            b[0] = std::max<std::int64_t>(h0, 0), b[1] = std::min<std::int64_t>(h1, 7);
            b[2] = std::max<std::int64_t>(w0, 0), b[3] = std::min<std::int64_t>(w1, 9);
            n = p.count_include_pad ? (h1 - h0) * (w1 - w0) : (b[1] - b[0]) * (b[3] - b[2]);
          });
      QuantizedAvgPool2d pool(p);
      check_pool(x, pool(x), want, avg_pool2d(dequant(x), p));
    }
  }
  EXPECT_ERROR(QuantizedAvgPool2d(Pool2dParams{.kernel = {2, 2}})(Tensor::zeros(Shape{1, 1, 4, 4})),
               "QuantizedAvgPool2d", "quantized uint8 (N, C, H, W)");
  EXPECT_ERROR(QuantizedAvgPool2d(Pool2dParams{.kernel = {2, 2}, .padding = {2, 0}}),
               "QuantizedAvgPool2d", "padding");
  EXPECT_ERROR(
      QuantizedAvgPool2d(Pool2dParams{.kernel = {5, 5}})(codes(Shape{1, 1, 3, 3}, {}, 0, 255, 1)),
      "QuantizedAvgPool2d", "larger than the padded input");
}

BOOST_AUTO_TEST_CASE(int8_adaptive_avg_pool) {
  const Tensor x = codes(Shape{2, 3, 7, 9}, {0.02, 5}, 0, 255, 71);
  for (Pair o : {Pair{1, 1}, Pair{3, 4}, Pair{5, 5}, Pair{7, 9}, Pair{2, 13}}) {
    BOOST_TEST_CONTEXT("output " << o[0] << "x" << o[1]) {
      const Tensor want = ref_avg_pool(
          x, o[0], o[1], [&](std::int64_t oh, std::int64_t ow, std::int64_t b[4], std::int64_t& n) {
            b[0] = oh * 7 / o[0], b[1] = ((oh + 1) * 7 + o[0] - 1) / o[0];
            b[2] = ow * 9 / o[1], b[3] = ((ow + 1) * 9 + o[1] - 1) / o[1];
            n = (b[1] - b[0]) * (b[3] - b[2]);
          });
      QuantizedAdaptiveAvgPool2d pool(o);
      BOOST_TEST((pool.output_size() == o));
      check_pool(x, pool(x), want, adaptive_avg_pool2d(dequant(x), o));
    }
  }
  BOOST_TEST((nn::AdaptiveAvgPool2d(Pair{3, 4}).output_size() == Pair{3, 4}));
  EXPECT_ERROR(QuantizedAdaptiveAvgPool2d(Pair{0, 2}), "QuantizedAdaptiveAvgPool2d", "output_size");
}

}  // namespace
}  // namespace qat::test
