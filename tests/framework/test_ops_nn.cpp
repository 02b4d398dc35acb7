// Convolution, pooling, batch norm and dropout: gradient checks (central differences, float64),
// hand-computed values, error messages, and golden vectors from PyTorch 1.13
// (tests/golden/gen_framework_golden.py), compared in float64 and in float32.
#include <algorithm>
#include <bit>
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <functional>
#include <numeric>
#include <string>

#include "common/golden.h"
#include "common/gradcheck.h"
#include "common/isa.h"
#include "framework/autograd/ops.h"
#include "framework/kernels/cpu/winograd.h"
#include "framework/nn/basic.h"
#include "framework/nn/sequential.h"
#include "framework/tensor/cpu.h"
#include "framework/tensor/parallel.h"
#include "framework/tensor/random.h"

using namespace qat;
using test::check_gradients;
using test::rand_double;
using V = std::vector<Tensor>;
namespace tt = boost::test_tools;

namespace {

const std::vector<test::GoldenCase>& golden() {
  static const auto cases = test::load_golden("golden/framework_ops.txt");
  return cases;
}

std::int64_t as_int(const test::GoldenCase& c, const std::string& key) {
  return static_cast<std::int64_t>(c.scalar(key));
}

Pair pair_of(const test::GoldenCase& c, const std::string& key) {
  return {as_int(c, key + "_h"), as_int(c, key + "_w")};
}

// |actual - expected| <= rtol * max(|expected|, max|expected|) elementwise (expected is float64).
void expect_close(const Tensor& actual, const Tensor& expected, double rtol, const std::string& what) {
  BOOST_REQUIRE_MESSAGE(actual.defined(), what << ": no tensor");
  BOOST_REQUIRE_MESSAGE(actual.shape() == expected.shape(),
                        what << ": shape " << actual.shape() << " vs expected " << expected.shape());
  const auto a = actual.to(DType::Float64).to_vector<double>();
  const auto e = expected.to_vector<double>();
  double scale = 0;
  for (double v : e) scale = std::max(scale, std::abs(v));
  for (std::size_t i = 0; i < e.size(); ++i) {
    if (std::abs(a[i] - e[i]) > rtol * std::max(std::abs(e[i]), scale)) {
      BOOST_ERROR(what << ": element " << i << " is " << a[i] << ", expected " << e[i]);
      return;
    }
  }
}

Tensor leaf(const test::GoldenCase& c, const std::string& key, DType dt) {
  return c.tensor(key).to(dt).requires_grad_();
}

// Backpropagates sum(out * gout) and compares out and the gradients of `inputs` with the case.
void check_golden(const test::GoldenCase& c, const Tensor& out,
                  const std::vector<std::pair<std::string, Tensor>>& inputs, double rtol) {
  const std::string tag = c.name + (out.dtype() == DType::Float32 ? " (float32)" : " (float64)");
  expect_close(out, c.tensor("out"), rtol, tag + " out");
  sum(mul(out, c.tensor("gout").to(out.dtype()))).backward();
  for (const auto& [key, t] : inputs)
    if (t.defined()) expect_close(t.grad(), c.tensor("grad_" + key), rtol, tag + " grad_" + key);
}

template <class F>
void expect_error(F f, const std::string& message) {
  try {
    f();
    BOOST_ERROR("expected qat::Error: " << message);
  } catch (const Error& e) {
    BOOST_TEST(std::string(e.what()) == message);
  }
}

// A float64 leaf holding a shuffled arithmetic sequence: distinct values 0.037 apart, so the
// argmax of a pooling window does not flip under finite-difference steps.
Tensor distinct_values(const Shape& shape, std::uint64_t seed) {
  std::vector<double> v(static_cast<std::size_t>(shape.numel()));
  std::iota(v.begin(), v.end(), 0.0);
  Generator gen(seed);
  for (std::size_t i = v.size(); i > 1; --i) std::swap(v[i - 1], v[gen.below(i)]);
  for (double& x : v) x = x * 0.037 - 1.0;
  return Tensor::from_vector<double>(v, shape).requires_grad_();
}

Conv2dParams conv_params(Pair stride, Pair padding, Pair dilation, std::int64_t groups) {
  return Conv2dParams{stride, padding, dilation, groups};
}

std::function<Tensor(const V&)> conv_of(const Conv2dParams& p) {
  return [p](const V& in) { return conv2d(in[0], in[1], in[2], p); };
}

// A convolution test case: shapes of x and the weight, the parameters, with or without bias.
struct ConvCase {
  const char* name;
  Shape x, w;
  Conv2dParams p;
  bool bias;
};

Pool2dParams pool_params(Pair kernel, Pair stride, Pair padding, bool count_include_pad = true) {
  return Pool2dParams{kernel, stride, padding, count_include_pad};
}

}  // namespace

BOOST_AUTO_TEST_SUITE(ops_nn)

// ---- conv2d ------------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(grad_conv2d) {
  const ConvCase configs[] = {
      {"conv_basic", {2, 3, 6, 5}, {4, 3, 3, 3}, conv_params({1, 1}, {1, 1}, {1, 1}, 1), true},
      {"conv_stride2_pad_rect",
       {2, 3, 7, 8},
       {4, 3, 3, 2},
       conv_params({2, 2}, {1, 2}, {1, 1}, 1),
       true},
      {"conv_dilation2_groups2",
       {2, 4, 7, 7},
       {6, 2, 3, 3},
       conv_params({1, 1}, {2, 2}, {2, 2}, 2),
       false},
      {"conv_mixed_groups3", {1, 6, 7, 9}, {3, 2, 2, 3}, conv_params({2, 1}, {0, 1}, {1, 2}, 3), true},
      {"conv_1x1", {2, 4, 3, 3}, {5, 4, 1, 1}, conv_params({1, 1}, {0, 0}, {1, 1}, 1), true},
      // 32 output channels per group: the forward with the channels as GEMM columns
      {"conv_32_channels", {2, 2, 4, 5}, {32, 2, 3, 3}, conv_params({1, 1}, {1, 1}, {1, 1}, 1), true},
      {"conv_32_per_group_strided",
       {1, 4, 5, 5},
       {64, 2, 2, 3},
       conv_params({2, 1}, {1, 1}, {1, 1}, 2),
       false},
  };
  std::uint64_t seed = 100;
  for (const ConvCase& c : configs) {
    auto x = rand_double(c.x, seed++), w = rand_double(c.w, seed++);
    auto b = c.bias ? rand_double(Shape{c.w[0]}, seed++) : Tensor();
    check_gradients(c.name, conv_of(c.p), {x, w, b});
  }
  // weight-only (the first layer of a CNN) and input-only gradients
  auto x = rand_double(Shape{2, 1, 6, 6}, seed++), w = rand_double(Shape{3, 1, 3, 3}, seed++);
  auto b = rand_double(Shape{3}, seed++);
  x.requires_grad_(false);
  const Conv2dParams p = conv_params({1, 1}, {1, 1}, {1, 1}, 1);
  check_gradients("conv_weight_only", conv_of(p), {x, w, b});
  BOOST_TEST(!x.grad().defined());
  x.requires_grad_(true);
  w.requires_grad_(false);
  b.requires_grad_(false);
  check_gradients("conv_input_only", conv_of(p), {x, w, b});
}

BOOST_AUTO_TEST_CASE(conv2d_values) {
  // 3x3 input 1..9, 2x2 kernel of ones: each output is the sum of its window, plus the bias
  Tensor x = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6, 7, 8, 9}, Shape{1, 1, 3, 3});
  Tensor w = Tensor::ones(Shape{2, 1, 2, 2});
  Tensor b = Tensor::from_vector<float>({0, 100}, Shape{2});
  BOOST_TEST(
      conv2d(x, w, b).to_vector<float>() == (std::vector<float>{12, 16, 24, 28, 112, 116, 124, 128}),
      tt::per_element());
  // padding 1, stride 2: windows at (-1,-1), (-1,1), (1,-1), (1,1)
  const Conv2dParams p{{2, 2}, {1, 1}};  // stride, padding
  BOOST_TEST(
      conv2d(x, w.rows(0, 1), Tensor(), p).to_vector<float>() == (std::vector<float>{1, 5, 11, 28}),
      tt::per_element());
  BOOST_TEST(conv2d(x, w.rows(0, 1), Tensor(), p).shape() == (Shape{1, 1, 2, 2}));
}

BOOST_AUTO_TEST_CASE(conv2d_errors) {
  Tensor x = Tensor::zeros(Shape{1, 3, 5, 5}), w = Tensor::zeros(Shape{2, 3, 3, 3});
  auto conv = [&](Pair stride, Pair padding, Pair dilation, std::int64_t groups) {
    return conv2d(x, w, Tensor(), conv_params(stride, padding, dilation, groups));
  };
  expect_error(
      [&] {
        conv2d(x, Tensor::zeros(Shape{2, 2, 3, 3}));
      },
      "conv2d: weight of shape [2, 2, 3, 3] with groups=1 expects 2 input channels, but x "
      "of shape [1, 3, 5, 5] has 3");
  expect_error([&] { conv({0, 1}, {0, 0}, {1, 1}, 1); }, "conv2d: stride must be positive, got (0, 1)");
  expect_error(
      [&] {
        conv2d(x, Tensor::zeros(Shape{2, 3, 6, 3}));
      },
      "conv2d: kernel 6x3 (dilated 6x3) is larger than the padded input 5x5");
  BOOST_CHECK_THROW(conv({1, 1}, {0, 0}, {1, 1}, 2), Error);  // 3 channels in 2 groups
  BOOST_CHECK_THROW(conv({1, 1}, {0, 0}, {0, 1}, 1), Error);
  BOOST_CHECK_THROW(conv({1, 1}, {-1, 0}, {1, 1}, 1), Error);
  BOOST_CHECK_THROW(conv2d(Tensor::zeros(Shape{3, 5, 5}), w), Error);
  BOOST_CHECK_THROW(conv2d(x, Tensor::zeros(Shape{2, 3, 3, 3}, DType::Float64)), Error);
  BOOST_CHECK_THROW(conv2d(x, w, Tensor::zeros(Shape{3})), Error);
  BOOST_CHECK_THROW(conv2d(Tensor::zeros(Shape{0, 3, 5, 5}), w), Error);
  BOOST_CHECK_THROW(conv2d(x, Tensor::zeros(Shape{2, 3, 3, 3}, DType::Int32)), Error);
}

BOOST_AUTO_TEST_CASE(conv2d_golden) {
  int n = 0;
  for (const auto& c : golden()) {
    if (c.name.rfind("conv_", 0) != 0) continue;
    ++n;
    const Conv2dParams p = conv_params(pair_of(c, "stride"), pair_of(c, "padding"),
                                       pair_of(c, "dilation"), as_int(c, "groups"));
    for (auto [dt, rtol] : {std::pair{DType::Float64, 1e-10}, std::pair{DType::Float32, 1e-5}}) {
      Tensor x = leaf(c, "x", dt), w = leaf(c, "weight", dt);
      Tensor b = c.has("bias") ? leaf(c, "bias", dt) : Tensor();
      check_golden(c, conv2d(x, w, b, p), {{"x", x}, {"weight", w}, {"bias", b}}, rtol);
    }
  }
  BOOST_TEST(n == 6);
}

// The direct forward for few taps per output (kernels/cpu/conv_direct.h) on the current kernel
// path against float64, next to the GEMM path (cpu::set_direct_conv(false)): odd widths (row
// tails), channel counts that leave block tails, dilation, row stride, groups, no bias; the
// gradients beside it (GEMMs either way); the same bits at 1 and 2 threads.
BOOST_AUTO_TEST_CASE(conv2d_direct_kernels) {
  const ConvCase configs[] = {
      {"fmnist_conv1", {3, 1, 28, 28}, {16, 1, 5, 5}, conv_params({1, 1}, {2, 2}, {1, 1}, 1), true},
      {"odd_width_tails", {2, 1, 9, 37}, {7, 1, 3, 3}, conv_params({1, 1}, {1, 1}, {1, 1}, 1), true},
      {"rgb_3x3_row_stride",
       {2, 3, 11, 19},
       {5, 3, 3, 3},
       conv_params({2, 1}, {1, 0}, {1, 1}, 1),
       false},
      {"dilated_wide", {1, 2, 8, 70}, {9, 2, 2, 4}, conv_params({1, 1}, {0, 3}, {2, 2}, 1), true},
      {"groups_2", {2, 4, 6, 13}, {6, 2, 3, 2}, conv_params({1, 1}, {1, 0}, {1, 1}, 2), true},
      {"one_column", {2, 1, 5, 1}, {3, 1, 3, 1}, conv_params({1, 1}, {1, 0}, {1, 1}, 1), true},
  };
  std::uint64_t seed = 900;
  for (const ConvCase& c : configs) {
    const Tensor x64 = rand_double(c.x, seed++).detach(), w64 = rand_double(c.w, seed++).detach();
    const Tensor b64 = c.bias ? rand_double(Shape{c.w[0]}, seed++).detach() : Tensor();
    Tensor xr = x64.clone(), wr = w64.clone().requires_grad_(),
           br = c.bias ? b64.clone().requires_grad_() : Tensor();
    Tensor yr = conv2d(xr, wr, br, c.p);
    const Tensor g64 = rand_double(yr.shape(), seed++).detach();
    yr.backward(g64);
    struct Out {
      Tensor y, dw, db;
    };
    auto run = [&](bool direct, int threads) {
      const int saved = get_num_threads();
      set_num_threads(threads);
      cpu::set_direct_conv(direct);
      Tensor x = x64.to(DType::Float32), w = w64.to(DType::Float32).requires_grad_();
      Tensor b = c.bias ? b64.to(DType::Float32).requires_grad_() : Tensor();
      Tensor y = conv2d(x, w, b, c.p);
      y.backward(g64.to(DType::Float32));
      cpu::set_direct_conv(true);
      set_num_threads(saved);
      return Out{y.detach(), w.grad(), c.bias ? b.grad() : Tensor()};
    };
    const Out direct = run(true, 1), direct2 = run(true, 2), gemm = run(false, 1);
    const std::string name = std::string(c.name) + " (" + cpu::isa_name(cpu::isa()) + ")";
    expect_close(direct.y, yr.detach(), 1e-5, name + " y");
    expect_close(direct.dw, wr.grad(), 1e-5, name + " dW");
    expect_close(gemm.y, yr.detach(), 1e-5, name + " y, GEMM path");
    expect_close(gemm.dw, wr.grad(), 1e-5, name + " dW, GEMM path");
    if (c.bias) expect_close(direct.db, br.grad(), 1e-5, name + " db");
    BOOST_TEST(direct.y.to_vector<float>() == direct2.y.to_vector<float>(), name << ": y at 2 threads");
    BOOST_TEST(direct.dw.to_vector<float>() == direct2.dw.to_vector<float>(),
               name << ": dW at 2 threads");
  }
}

// Winograd F(2x2, r x r) (kernels/cpu/winograd.h) on the current kernel path against float64
// (its float error is larger than the GEMMs': about 2e-5 of the largest dW, 5e-6 of y and dx),
// next to the GEMM path (cpu::WinogradMode::On, which runs the generic path's kernel too, and
// Off; the direct kernel off, which would take the shapes with few taps per output): batches that leave
// a partial block of images, odd output planes (partial tiles), output channel counts that leave every
// block tail, input channel counts that leave partial vectors in dW's sums, rows of more than two
// vectors, an input packed in several bands of tile rows, groups, padding on one side only, padding
// beyond the kernel's reach (dx then through col2im), a single output. y, dx and dW the same bits at 1
// and 2 threads, and not the GEMM's bits (so the Winograd path ran; dW only where its vectors hold input
// channels, else the GEMM's bits).
BOOST_AUTO_TEST_CASE(conv2d_winograd_kernels) {
  const ConvCase configs[] = {
      {"fmnist_conv2", {19, 16, 14, 14}, {32, 16, 5, 5}, conv_params({1, 1}, {2, 2}, {1, 1}, 1), true},
      {"odd_planes_3x3", {17, 9, 9, 7}, {5, 9, 3, 3}, conv_params({1, 1}, {1, 1}, {1, 1}, 1), true},
      {"unpadded_5x5_tails", {9, 4, 11, 8}, {19, 4, 5, 5}, conv_params({1, 1}, {0, 0}, {1, 1}, 1), true},
      {"groups_2", {16, 20, 6, 10}, {10, 10, 3, 3}, conv_params({1, 1}, {0, 0}, {1, 1}, 2), false},
      {"uneven_padding", {8, 12, 8, 9}, {7, 12, 3, 3}, conv_params({1, 1}, {2, 1}, {1, 1}, 1), true},
      {"padding_past_reach", {8, 2, 5, 6}, {3, 2, 3, 3}, conv_params({1, 1}, {3, 3}, {1, 1}, 1), true},
      {"one_output", {8, 17, 3, 3}, {4, 17, 3, 3}, conv_params({1, 1}, {0, 0}, {1, 1}, 1), true},
      // rows wider than two blocks of lanes: the transposes' column chunks and their tail
      {"wide_rows", {9, 8, 5, 37}, {6, 8, 3, 3}, conv_params({1, 1}, {1, 1}, {1, 1}, 1), true},
      // input bands of 1 (AVX-512), 4 (AVX2) and 9 (generic) tile rows of 12, the last tile
      // row with one output row
      {"many_bands", {8, 24, 23, 30}, {5, 24, 3, 3}, conv_params({1, 1}, {1, 1}, {1, 1}, 1), true},
  };
  std::uint64_t seed = 950;
  for (const ConvCase& c : configs) {
    const Tensor x64 = rand_double(c.x, seed++).detach(), w64 = rand_double(c.w, seed++).detach();
    const Tensor b64 = c.bias ? rand_double(Shape{c.w[0]}, seed++).detach() : Tensor();
    Tensor xr = x64.clone().requires_grad_(), wr = w64.clone().requires_grad_(),
           br = c.bias ? b64.clone().requires_grad_() : Tensor();
    Tensor yr = conv2d(xr, wr, br, c.p);
    const Tensor g64 = rand_double(yr.shape(), seed++).detach();
    yr.backward(g64);
    struct Out {
      Tensor y, dx, dw;
    };
    auto run = [&](bool winograd, int threads) {
      const int saved = get_num_threads();
      set_num_threads(threads);
      const cpu::WinogradMode saved_mode = cpu::winograd_mode();
      cpu::set_winograd_mode(winograd ? cpu::WinogradMode::On : cpu::WinogradMode::Off);
      cpu::set_direct_conv(false);
      Tensor x = x64.to(DType::Float32).requires_grad_(), w = w64.to(DType::Float32).requires_grad_();
      Tensor b = c.bias ? b64.to(DType::Float32).requires_grad_() : Tensor();
      Tensor y = conv2d(x, w, b, c.p);
      y.backward(g64.to(DType::Float32));
      cpu::set_winograd_mode(saved_mode);
      cpu::set_direct_conv(true);
      set_num_threads(saved);
      return Out{y.detach(), x.grad(), w.grad()};
    };
    const Out wino = run(true, 1), wino2 = run(true, 2), gemm = run(false, 1);
    const std::string name = std::string(c.name) + " (" + cpu::isa_name(cpu::isa()) + ")";
    expect_close(wino.y, yr.detach(), 2e-5, name + " y");
    expect_close(wino.dx, xr.grad(), 2e-5, name + " dx");
    expect_close(wino.dw, wr.grad(), 5e-5, name + " dW");
    expect_close(gemm.y, yr.detach(), 1e-5, name + " y, GEMM path");
    expect_close(gemm.dx, xr.grad(), 1e-5, name + " dx, GEMM path");
    expect_close(gemm.dw, wr.grad(), 1e-5, name + " dW, GEMM path");
    BOOST_TEST(wino.y.to_vector<float>() != gemm.y.to_vector<float>(), name << ": y is the GEMM's");
    BOOST_TEST(wino.y.to_vector<float>() == wino2.y.to_vector<float>(), name << ": y at 2 threads");
    BOOST_TEST(wino.dx.to_vector<float>() == wino2.dx.to_vector<float>(), name << ": dx at 2 threads");
    BOOST_TEST(wino.dw.to_vector<float>() == wino2.dw.to_vector<float>(), name << ": dW at 2 threads");
    // dW by Winograd where half a block's lanes hold input channels, else the GEMM's bits
    if (2 * (c.w[1]) >= kernels::winograd_lanes())
      BOOST_TEST(wino.dw.to_vector<float>() != gemm.dw.to_vector<float>(), name << ": dW is the GEMM's");
    else
      BOOST_TEST(wino.dw.to_vector<float>() == gemm.dw.to_vector<float>(),
                 name << ": dW is not the GEMM's");
  }
}

// The float32 kernels (AVX-512 GEMMs reading the im2col matrix in place) against the float64
// path (the matrix built, BLAS) on shapes that take every branch: output channels as GEMM
// columns (Og >= 32) or not, dx as a convolution of dY (stride 1) or through col2im (stride 2,
// or padding beyond the kernel; the input channels as columns or not), groups, dilation, a
// first layer without dx, and widths that leave partial vectors.
BOOST_AUTO_TEST_CASE(conv2d_float_matches_double) {
  struct Config {
    Shape x, w;
    Conv2dParams p;
    bool x_grad;
  };
  const Config configs[] = {
      {{3, 16, 14, 14}, {32, 16, 5, 5}, conv_params({1, 1}, {2, 2}, {1, 1}, 1), true},  // CNN conv2
      {{3, 1, 28, 28}, {16, 1, 5, 5}, conv_params({1, 1}, {2, 2}, {1, 1}, 1), false},   // CNN conv1
      // few taps (dW summed over fixed parts of the batch, 2-3 images each)
      {{30, 2, 7, 6}, {5, 2, 2, 3}, conv_params({1, 1}, {1, 1}, {1, 1}, 1), true},
      {{2, 3, 9, 37}, {48, 3, 3, 3}, conv_params({1, 1}, {1, 1}, {1, 1}, 1), true},
      {{2, 4, 11, 10}, {64, 2, 3, 2}, conv_params({2, 2}, {1, 0}, {1, 1}, 2), true},
      {{2, 5, 12, 19}, {7, 5, 3, 3}, conv_params({1, 1}, {2, 1}, {2, 2}, 1), true},
      {{1, 3, 6, 7}, {40, 3, 1, 1}, conv_params({1, 1}, {1, 1}, {1, 1}, 1), true},  // pad > reach
      // input channels per group filling the GEMM's column tiles (16 on AVX2, 48 on AVX-512):
      // dx with the channels as columns, odd planes (rows past the last whole register tile)
      {{2, 32, 6, 7}, {6, 16, 3, 3}, conv_params({1, 1}, {1, 1}, {1, 1}, 2), true},
      {{2, 48, 5, 9}, {8, 48, 3, 2}, conv_params({1, 1}, {1, 0}, {2, 1}, 1), true},
  };
  std::uint64_t seed = 300;
  for (const Config& c : configs) {
    Generator gen(seed++);
    Tensor x = Tensor::normal(c.x, 0, 1, gen, DType::Float64),
           w = Tensor::normal(c.w, 0, 0.3, gen, DType::Float64);
    Tensor b = Tensor::normal(Shape{c.w[0]}, 0, 1, gen, DType::Float64);
    Tensor y = conv2d(x, w, b, c.p);
    Tensor g = Tensor::normal(y.shape(), 0, 1, gen, DType::Float64);
    std::vector<Tensor> grads[2];
    for (DType dt : {DType::Float64, DType::Float32}) {
      Tensor xs = x.to(dt).requires_grad_(c.x_grad), ws = w.to(dt).requires_grad_(),
             bs = b.to(dt).requires_grad_();
      Tensor out = conv2d(xs, ws, bs, c.p);
      out.backward(g.to(dt));
      grads[dt == DType::Float32] = {out.detach(), c.x_grad ? xs.grad() : Tensor(), ws.grad(),
                                     bs.grad()};
    }
    const std::string tag = "conv x" + detail::concat(c.x) + " w" + detail::concat(c.w);
    const char* names[] = {" out", " grad_x", " grad_w", " grad_b"};
    for (int i = 0; i < 4; ++i)
      if (grads[0][i].defined()) expect_close(grads[1][i], grads[0][i], 2e-5, tag + names[i]);
  }
}

BOOST_AUTO_TEST_CASE(conv2d_is_deterministic) {
  Generator gen(7);
  Tensor x = Tensor::normal(Shape{8, 4, 12, 12}, 0, 1, gen).requires_grad_();
  Tensor w = Tensor::normal(Shape{6, 4, 5, 5}, 0, 1, gen).requires_grad_();
  Tensor b = Tensor::normal(Shape{6}, 0, 1, gen).requires_grad_();
  Tensor g = Tensor::normal(Shape{8, 6, 12, 12}, 0, 1, gen);
  const Conv2dParams p{{1, 1}, {2, 2}};
  std::vector<std::vector<float>> runs;
  for (int r = 0; r < 2; ++r) {
    x.zero_grad(), w.zero_grad(), b.zero_grad();
    Tensor y = conv2d(x, w, b, p);
    y.backward(g);
    runs.push_back(y.to_vector<float>());
    for (const Tensor& t : {x, w, b}) {
      auto v = t.grad().to_vector<float>();
      runs.back().insert(runs.back().end(), v.begin(), v.end());
    }
  }
  BOOST_TEST(runs[0] == runs[1], tt::per_element());
}

// ---- pooling -----------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(grad_pooling) {
  auto x = distinct_values(Shape{2, 3, 7, 7}, 1);  // k3 s2 p1 clips both edges
  const std::pair<const char*, Pool2dParams> max_configs[] = {
      {"max_k2", pool_params({2, 2}, {0, 0}, {0, 0})},
      {"max_k3_s2_p1", pool_params({3, 3}, {2, 2}, {1, 1})},
      {"max_rect_overlap", pool_params({3, 2}, {1, 2}, {1, 0})},
  };
  for (const auto& [name, p] : max_configs)
    check_gradients(name, [p = p](const V& in) { return max_pool2d(in[0], p); }, {x});
  const std::pair<const char*, Pool2dParams> avg_configs[] = {
      {"avg_k2", pool_params({2, 2}, {0, 0}, {0, 0})},
      {"avg_k3_s2_p1_incl", pool_params({3, 3}, {2, 2}, {1, 1}, true)},
      {"avg_k3_s2_p1_excl", pool_params({3, 3}, {2, 2}, {1, 1}, false)},
      {"avg_rect_excl", pool_params({2, 3}, {1, 2}, {1, 1}, false)},
  };
  for (const auto& [name, p] : avg_configs)
    check_gradients(name, [p = p](const V& in) { return avg_pool2d(in[0], p); }, {x});
  auto y = rand_double(Shape{2, 2, 7, 5}, 2);
  for (Pair size : {Pair{3, 2}, Pair{9, 4}, Pair{7, 5}})
    check_gradients("adaptive_7x5_to_" + std::to_string(size[0]) + "x" + std::to_string(size[1]),
                    [size](const V& in) { return adaptive_avg_pool2d(in[0], size); }, {y});
  check_gradients("global_avg", [](const V& in) { return global_avg_pool2d(in[0]); }, {y});
}

BOOST_AUTO_TEST_CASE(pooling_values) {
  // all negative: padding counts as -inf for max and as 0 (counted or not) for avg
  Tensor x = Tensor::from_vector<float>({-1, -2, -3, -4, -5, -6, -7, -8, -9}, Shape{1, 1, 3, 3});
  const Pool2dParams p = pool_params({2, 2}, {2, 2}, {1, 1});
  BOOST_TEST(max_pool2d(x, p).to_vector<float>() == (std::vector<float>{-1, -2, -4, -5}),
             tt::per_element());
  BOOST_TEST(avg_pool2d(x, p).to_vector<float>() == (std::vector<float>{-0.25, -1.25, -2.75, -7}),
             tt::per_element());
  BOOST_TEST(avg_pool2d(x, pool_params({2, 2}, {2, 2}, {1, 1}, false)).to_vector<float>() ==
                 (std::vector<float>{-1, -2.5, -5.5, -7}),
             tt::per_element());
  BOOST_TEST(global_avg_pool2d(x).to_vector<float>() == (std::vector<float>{-5}), tt::per_element());
  BOOST_TEST(global_avg_pool2d(x).shape() == (Shape{1, 1, 1, 1}));
  // NaN propagates through max like in PyTorch
  Tensor nan = Tensor::from_vector<float>({1, NAN, 3, 4}, Shape{1, 1, 2, 2});
  BOOST_TEST(std::isnan(max_pool2d(nan, pool_params({2, 2}, {0, 0}, {0, 0})).item()));
  // the gradient goes to the argmax of each window, accumulating where windows overlap
  Tensor y = Tensor::from_vector<double>({1, 9, 2, 3, 4, 5, 6, 7, 8}, Shape{1, 1, 3, 3});
  y.requires_grad_();
  sum(max_pool2d(y, pool_params({2, 2}, {1, 1}, {0, 0}))).backward();
  BOOST_TEST(y.grad().to_vector<double>() == (std::vector<double>{0, 2, 0, 0, 0, 0, 0, 1, 1}),
             tt::per_element());
}

// The float32 2x2 path (AVX-512, argmax kept as the window position) against the float64
// generic path: ties keep the first element in scan order, NaN wins (the last NaN scanned), and
// the gradient goes to the same element. Widths with more than 16 windows and with a leftover
// odd column and row.
BOOST_AUTO_TEST_CASE(max_pool2d_2x2_matches_generic) {
  const Pool2dParams p = pool_params({2, 2}, {0, 0}, {0, 0});
  for (const Shape& shape :
       {Shape{2, 3, 6, 34}, Shape{2, 3, 7, 9}, Shape{3, 2, 14, 14}, Shape{1, 1, 2, 2}}) {
    Generator gen(shape.numel());
    std::vector<double> v(static_cast<std::size_t>(shape.numel()));
    for (double& x : v) {
      const std::uint64_t r = gen.below(20);
      x = r == 0 ? NAN : static_cast<double>(gen.below(4));  // many ties, some NaNs
    }
    Tensor x64 = Tensor::from_vector<double>(v, shape).requires_grad_();
    Tensor x32 = x64.detach().to(DType::Float32).requires_grad_();
    Tensor y64 = max_pool2d(x64, p), y32 = max_pool2d(x32, p);
    const auto a = y32.to(DType::Float64).to_vector<double>(), e = y64.to_vector<double>();
    for (std::size_t i = 0; i < e.size(); ++i)
      BOOST_TEST((a[i] == e[i] || (std::isnan(a[i]) && std::isnan(e[i]))), "out " << i << " " << shape);
    Tensor g = Tensor::uniform(y64.shape(), 1, 2, gen).to(DType::Float64);  // exact in both
    y64.backward(g);
    y32.backward(g.to(DType::Float32));
    BOOST_TEST(x32.grad().to(DType::Float64).to_vector<double>() == x64.grad().to_vector<double>(),
               tt::per_element());
  }
}

// relu_max_pool2d = max_pool2d(relu(x)) bit for bit, values and the gradient reaching x, on
// every CPU path: the fused 2x2 kernel (even and odd planes, more than 16 windows a row) and
// the two ops it falls back to (other windows, float64). nn::Sequential fuses a ReLU and a
// MaxPool2d unless a hook watches them.
BOOST_AUTO_TEST_CASE(relu_max_pool2d_matches_relu_then_max_pool2d) {
  const std::pair<const char*, Pool2dParams> configs[] = {
      {"k2", pool_params({2, 2}, {0, 0}, {0, 0})},
      {"k3_s2_p1", pool_params({3, 3}, {2, 2}, {1, 1})},
  };
  test::for_each_isa([&](cpu::Isa) {
    for (const auto& [name, p] : configs)
      for (const Shape& shape : {Shape{2, 3, 6, 34}, Shape{2, 3, 7, 9}, Shape{3, 2, 14, 14}}) {
        Generator gen(shape.numel());
        std::vector<float> v(static_cast<std::size_t>(shape.numel()));
        for (float& e : v) {  // ties, zeros of both signs, negative windows, a few NaNs
          const std::uint64_t r = gen.below(24);
          e = r == 0 ? NAN : r == 1 ? -0.0f : static_cast<float>(gen.below(5)) - 2.0f;
        }
        Tensor a = Tensor::from_vector<float>(v, shape).requires_grad_();
        Tensor b = a.detach().requires_grad_();
        Tensor ya = relu_max_pool2d(a, p), yb = max_pool2d(relu(b), p);
        const auto va = ya.to_vector<float>(), vb = yb.to_vector<float>();
        BOOST_TEST_REQUIRE(va.size() == vb.size());
        for (std::size_t i = 0; i < va.size(); ++i)
          BOOST_TEST(std::bit_cast<std::uint32_t>(va[i]) == std::bit_cast<std::uint32_t>(vb[i]),
                     name << " " << shape << " out " << i);
        const Tensor g = Tensor::uniform(ya.shape(), -1, 1, gen);
        ya.backward(g);
        yb.backward(g);
        BOOST_TEST(a.grad().to_vector<float>() == b.grad().to_vector<float>(), tt::per_element());
      }
  });
  auto x = distinct_values(Shape{2, 3, 6, 6}, 3);  // float64: the two ops, checked numerically
  check_gradients("relu_max_pool2d",
                  [](const V& in) { return relu_max_pool2d(in[0], pool_params({2, 2}, {0, 0}, {0, 0})); },
                  {x});

  // nn::Sequential: fused, the same as the modules one by one; a hook sees its module's call
  auto net = std::make_shared<nn::Sequential>();
  net->push_back("relu", std::make_shared<nn::ReLU>());
  net->push_back("pool", std::make_shared<nn::MaxPool2d>(2));
  Generator gen(7);
  const Tensor in = Tensor::uniform(Shape{2, 3, 8, 10}, -1, 1, gen);
  const auto want = max_pool2d(relu(in), pool_params({2, 2}, {0, 0}, {0, 0})).to_vector<float>();
  BOOST_TEST(net->forward(in).to_vector<float>() == want, tt::per_element());
  int seen = 0;
  (*net)[0]->register_forward_hook([&](nn::Module&, const std::vector<Tensor>&, Tensor& out) {
    ++seen;
    BOOST_TEST(out.shape() == in.shape());  // the ReLU's own output
  });
  BOOST_TEST(net->forward(in).to_vector<float>() == want, tt::per_element());
  BOOST_TEST(seen == 1);
}

BOOST_AUTO_TEST_CASE(pooling_errors) {
  Tensor x = Tensor::zeros(Shape{1, 2, 4, 4});
  expect_error(
      [&] {
        max_pool2d(x, pool_params({3, 3}, {1, 1}, {2, 2}));
      },
      "max_pool2d: padding must be between 0 and half the kernel (3, 3), got (2, 2)");
  expect_error(
      [&] {
        avg_pool2d(x, pool_params({5, 2}, {1, 1}, {0, 0}));
      },
      "avg_pool2d: kernel (5, 2) is larger than the padded input 4x4 (x of shape "
      "[1, 2, 4, 4])");
  expect_error(
      [&] {
        adaptive_avg_pool2d(x, {0, 2});
      },
      "adaptive_avg_pool2d: output_size must be positive, got (0, 2)");
  BOOST_CHECK_THROW(max_pool2d(x, pool_params({2, 2}, {-1, 1}, {0, 0})), Error);
  BOOST_CHECK_THROW(max_pool2d(x, pool_params({0, 2}, {0, 0}, {0, 0})), Error);
  BOOST_CHECK_THROW(max_pool2d(Tensor::zeros(Shape{2, 4, 4}), pool_params({2, 2}, {2, 2}, {0, 0})),
                    Error);
  BOOST_CHECK_THROW(global_avg_pool2d(Tensor::zeros(Shape{1, 2, 0, 4})), Error);
  BOOST_CHECK_THROW(global_avg_pool2d(Tensor::zeros(Shape{1, 2, 4, 4}, DType::Int64)), Error);
}

BOOST_AUTO_TEST_CASE(pooling_golden) {
  int n = 0;
  for (const auto& c : golden()) {
    const bool is_max = c.name.rfind("max_", 0) == 0, is_avg = c.name.rfind("avg_", 0) == 0;
    const bool is_adaptive = c.name.rfind("adaptive_", 0) == 0;
    if (!is_max && !is_avg && !is_adaptive) continue;
    ++n;
    for (auto [dt, rtol] : {std::pair{DType::Float64, 1e-10}, std::pair{DType::Float32, 1e-5}}) {
      Tensor x = leaf(c, "x", dt), out;
      if (is_adaptive) {
        const Pair size{as_int(c, "out_h"), as_int(c, "out_w")};
        out = size == Pair{1, 1} ? global_avg_pool2d(x) : adaptive_avg_pool2d(x, size);
      } else {
        const Pool2dParams p =
            pool_params(pair_of(c, "kernel"), pair_of(c, "stride"), pair_of(c, "padding"),
                        is_avg && as_int(c, "count_include_pad") == 1);
        out = is_max ? max_pool2d(x, p) : avg_pool2d(x, p);
      }
      check_golden(c, out, {{"x", x}}, rtol);
    }
  }
  BOOST_TEST(n == 11);
}

// ---- batch norm --------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(grad_batch_norm) {
  auto x2 = rand_double(Shape{6, 3}, 30, -2, 2), x4 = rand_double(Shape{3, 4, 3, 2}, 31, -2, 2);
  auto w3 = rand_double(Shape{3}, 32, 0.5, 1.5), b3 = rand_double(Shape{3}, 33);
  auto w4 = rand_double(Shape{4}, 34, 0.5, 1.5), b4 = rand_double(Shape{4}, 35);
  Tensor rm3 = Tensor::zeros(Shape{3}, DType::Float64), rv3 = Tensor::ones(Shape{3}, DType::Float64);
  Tensor rm4 = Tensor::full(Shape{4}, 0.2, DType::Float64);
  Tensor rv4 = Tensor::full(Shape{4}, 1.5, DType::Float64);
  auto bn = [](Tensor rm, Tensor rv, bool training) {
    return [=](const V& in) { return batch_norm(in[0], rm, rv, in[1], in[2], training); };
  };
  check_gradients("bn_train_2d", bn(rm3, rv3, true), {x2, w3, b3});  // BatchNorm1d's (N, C)
  auto x3 = rand_double(Shape{4, 3, 5}, 36, -2, 2);                  // and (N, C, L)
  check_gradients("bn_train_3d", bn(rm3, rv3, true), {x3, w3, b3});
  check_gradients("bn_eval_3d", bn(rm3, rv3, false), {x3, w3, b3});
  check_gradients("bn_train_4d", bn(rm4, rv4, true), {x4, w4, b4});
  check_gradients("bn_train_4d_noaffine", bn(rm4, rv4, true), {x4, Tensor(), Tensor()});
  check_gradients("bn_train_no_running", bn(Tensor(), Tensor(), true), {x4, w4, b4});
  check_gradients("bn_eval_2d", bn(rm3, rv3, false), {x2, w3, b3});
  check_gradients("bn_eval_4d", bn(rm4, rv4, false), {x4, w4, b4});
  check_gradients("bn_eval_4d_noaffine", bn(rm4, rv4, false), {x4, Tensor(), Tensor()});
}

BOOST_AUTO_TEST_CASE(batch_norm_values_and_errors) {
  // one channel, values 1..4: mean 2.5, biased var 1.25, unbiased var 5/3
  Tensor x = Tensor::from_vector<double>({1, 2, 3, 4}, Shape{4, 1});
  Tensor rm = Tensor::zeros(Shape{1}), rv = Tensor::ones(Shape{1});  // float32 running stats
  Tensor y = batch_norm(x, rm, rv, Tensor(), Tensor(), true, 0.5, 0.0);
  BOOST_TEST(y.to_vector<double>()[0] == -1.5 / std::sqrt(1.25), tt::tolerance(1e-12));
  BOOST_TEST(rm.item() == 1.25, tt::tolerance(1e-6));
  BOOST_TEST(rv.item() == 0.5 + 0.5 * 5.0 / 3.0, tt::tolerance(1e-6));
  // eval uses the running statistics and leaves them alone
  Tensor e = batch_norm(x, rm, rv, Tensor(), Tensor(), false, 0.5, 0.0);
  BOOST_TEST(e.to_vector<double>()[3] == (4 - 1.25) / std::sqrt(0.5 + 2.5 / 3.0), tt::tolerance(1e-6));
  BOOST_TEST(rm.item() == 1.25, tt::tolerance(1e-6));
  const Tensor none;
  expect_error(
      [&] {
        batch_norm(Tensor::zeros(Shape{1, 3, 1, 1}), none, none, none, none, true);
      },
      "batch_norm: expected more than 1 value per channel when training, got x of shape "
      "[1, 3, 1, 1]");
  expect_error([&] { batch_norm(x, Tensor(), Tensor(), Tensor(), Tensor(), false); },
               "batch_norm: eval mode needs running_mean and running_var");
  BOOST_CHECK_THROW(batch_norm(x, rm, rv, Tensor::ones(Shape{2}, DType::Float64), none, true), Error);
  BOOST_CHECK_THROW(batch_norm(x, rm, Tensor::ones(Shape{3}), Tensor(), Tensor(), true), Error);
  BOOST_CHECK_THROW(batch_norm(x, rm, rv, Tensor::ones(Shape{1}), Tensor(), true), Error);  // dtype
  BOOST_CHECK_THROW(batch_norm(Tensor::zeros(Shape{4}), none, none, none, none, true), Error);
}

BOOST_AUTO_TEST_CASE(batch_norm_golden) {
  int n = 0;
  for (const auto& c : golden()) {
    if (c.name.rfind("bn_", 0) != 0) continue;
    ++n;
    for (auto [dt, rtol] : {std::pair{DType::Float64, 1e-10}, std::pair{DType::Float32, 1e-5}}) {
      Tensor x = leaf(c, "x", dt);
      Tensor w = c.has("weight") ? leaf(c, "weight", dt) : Tensor();
      Tensor b = c.has("bias") ? leaf(c, "bias", dt) : Tensor();
      Tensor rm = c.tensor("running_mean").to(dt), rv = c.tensor("running_var").to(dt);
      Tensor out =
          batch_norm(x, rm, rv, w, b, c.scalar("training") != 0, c.scalar("momentum"), c.scalar("eps"));
      const std::string tag = c.name + " " + std::string(dtype_name(dt));
      expect_close(rm, c.tensor("running_mean_out"), rtol, tag + " running_mean");
      expect_close(rv, c.tensor("running_var_out"), rtol, tag + " running_var");
      check_golden(c, out, {{"x", x}, {"weight", w}, {"bias", b}}, rtol);
    }
  }
  BOOST_TEST(n == 5);
}

BOOST_AUTO_TEST_CASE(threads_do_not_change_results) {
  // large enough for the parallel loops of pooling and batch norm; each output and gradient is
  // computed by one thread in a fixed order, so the bits match the serial run
  Generator gen(11);
  Tensor x = Tensor::normal(Shape{8, 16, 32, 32}, 0, 1, gen).requires_grad_();
  Tensor w = Tensor::uniform(Shape{16}, 0.5, 1.5, gen).requires_grad_();
  auto run = [&](int threads) {
    const int saved = get_num_threads();
    set_num_threads(threads);
    x.zero_grad(), w.zero_grad();
    Tensor rm = Tensor::zeros(Shape{16}), rv = Tensor::ones(Shape{16});
    Tensor y = batch_norm(x, rm, rv, w, Tensor(), true);
    const Pool2dParams p = pool_params({3, 3}, {2, 2}, {1, 1});
    y = max_pool2d(y, p) + avg_pool2d(y, p);
    sum(mul(y, y)).backward();
    set_num_threads(saved);
    std::vector<float> bits = y.to_vector<float>();
    for (const Tensor& t : {x.grad(), w.grad(), rm, rv}) {
      const auto v = t.to_vector<float>();
      bits.insert(bits.end(), v.begin(), v.end());
    }
    return bits;
  };
  const auto serial = run(1), parallel = run(2);
  BOOST_TEST(serial == parallel, tt::per_element());
}

// ---- dropout -----------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(dropout_masks_and_scales) {
  Generator gen(5);
  Tensor x = Tensor::uniform(Shape{100, 100}, 0.5, 1.5, gen).requires_grad_();
  BOOST_TEST(dropout(x, 0.3, false, gen).is_same(x));
  BOOST_TEST(dropout(x, 0.0, true, gen).is_same(x));
  const double p = 0.3;
  Generator g1(42);
  Tensor y = dropout(x, p, true, g1);
  Tensor gout = Tensor::uniform(x.shape(), -1, 1, gen);
  y.backward(gout);
  const auto xv = x.to_vector<float>(), yv = y.to_vector<float>(), gv = gout.to_vector<float>();
  const auto dx = x.grad().to_vector<float>();
  std::int64_t kept = 0;
  bool ok = true;
  const float scale = static_cast<float>(1.0 / (1.0 - p));
  for (std::size_t i = 0; i < xv.size(); ++i) {
    const bool keep = yv[i] != 0;
    kept += keep;
    ok = ok && yv[i] == (keep ? xv[i] * scale : 0.0f) && dx[i] == (keep ? gv[i] * scale : 0.0f);
  }
  BOOST_TEST(ok);  // y = x * mask * scale and dx = g * mask * scale, elementwise
  BOOST_TEST(kept / 10000.0 == 0.7, tt::tolerance(0.03));
  // the same seed gives the same mask, another seed another one
  Generator g2(42), g3(43);
  BOOST_TEST(dropout(x, p, true, g2).to_vector<float>() == yv, tt::per_element());
  const bool differs = dropout(x, p, true, g3).to_vector<float>() != yv;
  BOOST_TEST(differs);
  BOOST_TEST(sum(dropout(x, 1.0, true, g3)).item() == 0.0);
  expect_error([&] { dropout(x, 1.5, true, gen); }, "dropout: p must be in [0, 1], got 1.5");
  BOOST_CHECK_THROW(dropout(x, -0.1, true, gen), Error);
}

BOOST_AUTO_TEST_CASE(grad_dropout) {
  // re-seeding inside f draws the same mask on every call, so f is a fixed linear map
  auto x = rand_double(Shape{4, 5}, 40);
  check_gradients("dropout",
                  [](const V& in) {
                    Generator gen(9);
                    return dropout(in[0], 0.4, true, gen);
                  },
                  {x});
}

BOOST_AUTO_TEST_SUITE_END()
