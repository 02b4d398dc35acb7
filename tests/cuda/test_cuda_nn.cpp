// The CUDA layers, losses, dropout and optimizers against the CPU reference, forward and
// backward, on odd sizes (not multiples of the 256-thread block): conv2d (float32 GEMM
// tolerance), pooling (bit-exact, ties and NaN included), batch norm, log_softmax and the
// losses, pointwise nonlinearities, dropout (reproducible Philox masks) and the fused
// multi-tensor SGD / Adam / AdamW steps. The Philox known-answer vectors run without a device.
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <limits>
#include <memory>

#include "cuda_test_util.h"
#include "framework/autograd/ops.h"
#include "framework/kernels/cuda/philox.h"
#include "framework/kernels/cuda/window.h"
#include "framework/nn/nn.h"
#include "framework/optim/adam.h"
#include "framework/optim/sgd.h"
#include "framework/tensor/error.h"

using namespace qat;
using qat::test::compare;
using qat::test::has_cuda_device;
using qat::test::leaf;
using qat::test::require_bits_equal;
using qat::test::require_close;
using qat::test::rnd;

namespace {

// values from {-1, 0, 1, 2}: pooling windows full of ties
Tensor ties(const Shape& s, std::uint64_t seed) {
  std::vector<float> v = rnd(s, seed, -1, 3).to_vector<float>();
  for (float& e : v) e = std::floor(e);
  return Tensor::from_vector(v, s);
}

Tensor on(const Tensor& t, const Tensor& like) { return t.defined() ? t.to(like.device()) : t; }

}  // namespace

// Random123's kat_vectors for philox4x32_10: the generator behind the CUDA dropout masks.
BOOST_AUTO_TEST_CASE(philox_known_answers) {
  using kernels::cuda::Philox4;
  using kernels::cuda::philox4x32_10;
  auto same = [](Philox4 r, std::array<std::uint32_t, 4> want) {
    for (int k = 0; k < 4; ++k) BOOST_TEST(r.v[k] == want[k]);
  };
  same(philox4x32_10(Philox4{{0, 0, 0, 0}}, 0, 0), {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8});
  same(philox4x32_10(Philox4{{~0u, ~0u, ~0u, ~0u}}, ~0u, ~0u),
       {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd});
  same(philox4x32_10(Philox4{{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}}, 0xa4093822, 0x299f31d0),
       {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1});
  // uniforms in [0, 1), about half below 1/2
  int below = 0;
  for (std::uint64_t i = 0; i < 10000; ++i) {
    const double u = kernels::cuda::philox_uniform(42, i);
    BOOST_REQUIRE(u >= 0.0);
    BOOST_REQUIRE(u < 1.0);
    below += u < 0.5;
  }
  BOOST_TEST(std::abs(below - 5000) < 300);
}

// The per-element code of the im2col / col2im and pooling kernels (window.h) run on the host
// against the CPU ops: conv2d rebuilt from im2col_at and double GEMMs (forward, dx through
// col2im_at, dW), pooling bit-exact with its gradients. No device needed.
BOOST_AUTO_TEST_CASE(kernel_index_math_on_host) {
  namespace win = kernels::cuda::window;
  using i64 = std::int64_t;
  struct Case {
    Shape x, w;
    Conv2dParams p;
  };
  std::uint64_t seed = 1000;
  for (const Case& c : {Case{Shape{2, 5, 11, 13}, Shape{7, 5, 3, 3}, {{1, 1}, {1, 1}, {1, 1}, 1}},
                        Case{Shape{2, 3, 17, 9}, Shape{4, 3, 3, 2}, {{2, 1}, {0, 0}, {2, 1}, 1}},
                        Case{Shape{2, 6, 13, 15}, Shape{9, 2, 3, 3}, {{2, 3}, {1, 2}, {1, 2}, 3}},
                        Case{Shape{1, 4, 9, 7}, Shape{4, 1, 5, 5}, {{3, 1}, {2, 2}, {1, 1}, 4}}}) {
    BOOST_TEST_CONTEXT("x " << c.x << " w " << c.w) {
      const Tensor x = leaf(rnd(c.x, seed++)), w = leaf(rnd(c.w, seed++, -0.5, 0.5));
      const Tensor y = conv2d(x, w, Tensor(), c.p);
      const Tensor gy = rnd(y.shape(), seed++);
      y.backward(gy);
      const i64 N = c.x[0], C = c.x[1], O = c.w[0], G = c.p.groups, Og = O / G,
                K = C / G * c.w[2] * c.w[3];
      const kernels::cuda::ConvDims d{C,
                                      c.x[2],
                                      c.x[3],
                                      c.w[2],
                                      c.w[3],
                                      c.p.stride[0],
                                      c.p.stride[1],
                                      c.p.padding[0],
                                      c.p.padding[1],
                                      c.p.dilation[0],
                                      c.p.dilation[1],
                                      y.size(2),
                                      y.size(3)};
      const i64 P = d.Ho * d.Wo, CK = G * K;
      const std::vector<float> xv = x.to_vector<float>(), wv = w.to_vector<float>(),
                               gv = gy.to_vector<float>();
      std::vector<float> col(N * CK * P), yv(N * O * P), dcol(N * CK * P), dx(N * C * d.H * d.W),
          dw(O * K);
      for (i64 i = 0; i < N * CK * P; ++i) col[i] = win::im2col_at(xv.data(), d, i);
      for (i64 n = 0; n < N; ++n)
        for (i64 g = 0; g < G; ++g)
          for (i64 o = 0; o < Og; ++o)
            for (i64 k = 0; k < K; ++k) {
              double sw = 0;
              for (i64 p = 0; p < P; ++p) {
                double sy = 0, sc = 0;
                if (k == 0)
                  for (i64 kk = 0; kk < K; ++kk)
                    sy += double(wv[(g * Og + o) * K + kk]) * col[(n * CK + g * K + kk) * P + p];
                if (k == 0) yv[(n * O + g * Og + o) * P + p] = static_cast<float>(sy);
                if (o == 0)
                  for (i64 oo = 0; oo < Og; ++oo)
                    sc += double(wv[(g * Og + oo) * K + k]) * gv[(n * O + g * Og + oo) * P + p];
                if (o == 0) dcol[(n * CK + g * K + k) * P + p] = static_cast<float>(sc);
                sw += double(gv[(n * O + g * Og + o) * P + p]) * col[(n * CK + g * K + k) * P + p];
              }
              dw[(g * Og + o) * K + k] += static_cast<float>(sw);
            }
      for (i64 i = 0; i < static_cast<i64>(dx.size()); ++i) dx[i] = win::col2im_at(dcol.data(), d, i);
      require_close(y, Tensor::from_vector(yv, y.shape()), 1e-5);
      require_close(x.grad(), Tensor::from_vector(dx, x.shape()), 1e-5);
      require_close(w.grad(), Tensor::from_vector(dw, w.shape()), 1e-4);
    }
  }
  // pooling: bit-exact with the CPU ops, forward and backward
  auto pool_dims = [](const Tensor& x, const Tensor& y, Pool2dParams p, bool adaptive) {
    const Pair s = p.stride == Pair{0, 0} ? p.kernel : p.stride;
    return kernels::cuda::PoolDims{
        x.size(0) * x.size(1), x.size(2), x.size(3), y.size(2),    y.size(3),    p.kernel[0],
        p.kernel[1],           s[0],      s[1],      p.padding[0], p.padding[1], adaptive,
        p.count_include_pad};
  };
  for (const auto& [s, p] :
       {std::pair{Shape{2, 3, 8, 10}, Pool2dParams{{2, 2}, {0, 0}, {0, 0}, true}},
        std::pair{Shape{2, 3, 7, 9}, Pool2dParams{{2, 2}, {0, 0}, {0, 0}, true}},
        std::pair{Shape{3, 2, 11, 13}, Pool2dParams{{3, 3}, {2, 2}, {1, 1}, true}},
        std::pair{Shape{1, 7, 9, 5}, Pool2dParams{{3, 2}, {1, 2}, {1, 0}, false}},
        std::pair{Shape{1, 2, 30, 3}, Pool2dParams{{5, 3}, {3, 1}, {2, 1}, false}}}) {
    BOOST_TEST_CONTEXT("pool x " << s) {
      for (bool max_pool : {true, false}) {
        const Tensor x = leaf(max_pool ? ties(s, seed++) : rnd(s, seed++));
        const Tensor y = max_pool ? max_pool2d(x, p) : avg_pool2d(x, p);
        const Tensor g = rnd(y.shape(), seed++);
        y.backward(g);
        const kernels::cuda::PoolDims d = pool_dims(x, y, p, false);
        const std::vector<float> xv = x.to_vector<float>(), gv = g.to_vector<float>();
        std::vector<float> yv(y.numel()), dx(x.numel());
        std::vector<i64> at(y.numel());
        for (i64 i = 0; i < y.numel(); ++i)
          yv[i] =
              max_pool ? win::max_pool_at(xv.data(), d, i, &at[i]) : win::avg_pool_at(xv.data(), d, i);
        for (i64 i = 0; i < x.numel(); ++i)
          dx[i] = max_pool ? win::max_pool_grad_at(gv.data(), at.data(), d, i)
                           : win::avg_pool_grad_at(gv.data(), d, i);
        require_bits_equal(y, Tensor::from_vector(yv, y.shape()));
        require_bits_equal(x.grad(), Tensor::from_vector(dx, x.shape()));
      }
    }
  }
  for (const auto& [s, out] :
       {std::pair{Shape{2, 3, 7, 11}, Pair{3, 5}}, std::pair{Shape{1, 4, 5, 5}, Pair{7, 2}},
        std::pair{Shape{2, 3, 3, 3}, Pair{1, 1}}}) {
    const Tensor x = leaf(rnd(s, seed++));
    const Tensor y = adaptive_avg_pool2d(x, out);
    const Tensor g = rnd(y.shape(), seed++);
    y.backward(g);
    const kernels::cuda::PoolDims d = pool_dims(x, y, {{0, 0}, {1, 1}, {0, 0}, false}, true);
    const std::vector<float> xv = x.to_vector<float>(), gv = g.to_vector<float>();
    std::vector<float> yv(y.numel()), dx(x.numel());
    for (i64 i = 0; i < y.numel(); ++i) yv[i] = win::avg_pool_at(xv.data(), d, i);
    for (i64 i = 0; i < x.numel(); ++i) dx[i] = win::avg_pool_grad_at(gv.data(), d, i);
    require_bits_equal(y, Tensor::from_vector(yv, y.shape()));
    require_bits_equal(x.grad(), Tensor::from_vector(dx, x.shape()));
  }
}

BOOST_AUTO_TEST_SUITE(cuda_nn, *boost::unit_test::precondition(has_cuda_device))

BOOST_AUTO_TEST_CASE(conv2d_forward_backward) {
  struct Case {
    Shape x, w;
    bool bias;
    Conv2dParams p;
  };
  const std::vector<Case> cases = {
      {Shape{3, 5, 11, 13}, Shape{7, 5, 3, 3}, true, {{1, 1}, {1, 1}, {1, 1}, 1}},
      {Shape{2, 3, 17, 9}, Shape{4, 3, 3, 2}, false, {{2, 1}, {0, 0}, {2, 1}, 1}},
      {Shape{2, 6, 13, 15}, Shape{9, 2, 3, 3}, true, {{2, 3}, {1, 2}, {1, 2}, 3}},  // groups
      {Shape{3, 4, 9, 7}, Shape{4, 1, 5, 5}, true, {{1, 1}, {2, 2}, {1, 1}, 4}},    // depthwise
      {Shape{2, 3, 5, 7}, Shape{33, 3, 1, 1}, true, {{1, 1}, {0, 0}, {1, 1}, 1}},   // 1x1, Og >= 32
      {Shape{1, 1, 1, 1}, Shape{1, 1, 1, 1}, true, {{1, 1}, {0, 0}, {1, 1}, 1}},
      {Shape{2, 3, 6, 6}, Shape{5, 3, 3, 3}, true, {{3, 3}, {1, 1}, {1, 1}, 1}},  // stride > 1, padded
      // col buffer over 2^24 elements: several image chunks (dW accumulates across them)
      {Shape{30, 16, 64, 64}, Shape{5, 16, 3, 3}, true, {{1, 1}, {1, 1}, {1, 1}, 1}},
  };
  std::uint64_t seed = 100;
  for (const Case& c : cases) {
    BOOST_TEST_CONTEXT("x " << c.x << " w " << c.w << " groups " << c.p.groups) {
      std::vector<Tensor> in;  // x, weight[, bias]
      in.reserve(3);
      in.push_back(rnd(c.x, seed++));
      in.push_back(rnd(c.w, seed++, -0.5, 0.5));
      if (c.bias) in.push_back(rnd(Shape{c.w[0]}, seed++));
      // dW of the largest case sums 122880 products per element, most of them cancelling: its
      // float32 error scales with the terms (cuDNN may sum through an FFT), so it is checked by
      // norm (METHOD: ||cuda - cpu|| / ||cpu||); every other gradient elementwise
      const bool long_sums = c.x[0] * c.x[2] * c.x[3] > 100000;
      compare(
          in, [&](const auto& t) { return conv2d(t[0], t[1], c.bias ? t[2] : Tensor(), c.p); }, 1e-4,
          long_sums ? 1e-4 : 2e-4, {}, long_sums ? test::GradCheck::Norm : test::GradCheck::Elementwise);
    }
  }
  // only x, or only the weight, needs a gradient
  const Tensor x = rnd(Shape{2, 3, 7, 8}, 1), w = rnd(Shape{4, 3, 3, 3}, 2), b = rnd(Shape{4}, 3);
  compare({x, w, b},
          [](const auto& t) {
            return conv2d(t[0], t[1], t[2], {{1, 1}, {1, 1}, {1, 1}, 1});
          },
          1e-4, 2e-4, {true, false, true});
  compare({x, w, b},
          [](const auto& t) {
            return conv2d(t[0], t[1], t[2], {{1, 1}, {1, 1}, {1, 1}, 1});
          },
          1e-4, 2e-4, {false, true, true});
}

// Max pooling: windows full of ties (the first maximum wins, as on the CPU), NaN, overlapping
// and padded windows, odd planes; bit-exact forward and backward.
BOOST_AUTO_TEST_CASE(max_pool2d_ties_bit_exact) {
  const std::vector<std::pair<Shape, Pool2dParams>> cases = {
      {Shape{2, 3, 8, 10}, {{2, 2}, {0, 0}, {0, 0}}},  // the CPU's 2x2 fast path
      {Shape{2, 3, 7, 9}, {{2, 2}, {0, 0}, {0, 0}}},   // odd: the last row / column unused
      {Shape{3, 5, 11, 13}, {{3, 3}, {2, 2}, {1, 1}}}, {Shape{1, 7, 9, 5}, {{3, 2}, {1, 2}, {1, 0}}},
      {Shape{2, 1, 1, 1}, {{1, 1}, {1, 1}, {0, 0}}},   {Shape{1, 2, 300, 3}, {{5, 3}, {3, 1}, {2, 1}}},
  };
  std::uint64_t seed = 200;
  for (const auto& [s, p] : cases) {
    BOOST_TEST_CONTEXT("x " << s) {
      compare(
          {ties(s, seed++)}, [p = p](const auto& t) { return max_pool2d(t[0], p); }, 0);
      compare(
          {rnd(s, seed++)}, [p = p](const auto& t) { return max_pool2d(t[0], p); }, 0);
    }
  }
  Tensor x = rnd(Shape{1, 2, 6, 6}, 7);
  std::vector<float> v = x.to_vector<float>();
  v[0] = v[7] = std::numeric_limits<float>::quiet_NaN(), v[20] = -INFINITY, v[21] = INFINITY;
  x = Tensor::from_vector(v, x.shape());
  compare(
      {x},
      [](const auto& t) {
        return max_pool2d(t[0], {{3, 3}, {1, 1}, {1, 1}});
      },
      0);
}

// Average and adaptive pooling: the CPU's operations in the CPU's order, so bit-exact.
BOOST_AUTO_TEST_CASE(avg_pools_bit_exact) {
  std::uint64_t seed = 300;
  for (bool cip : {true, false}) {
    for (const auto& [s, k, st, pad] :
         {std::tuple{Shape{2, 3, 11, 13}, Pair{3, 3}, Pair{2, 2}, Pair{1, 1}},
          std::tuple{Shape{1, 5, 7, 9}, Pair{2, 4}, Pair{1, 3}, Pair{1, 2}},
          std::tuple{Shape{3, 2, 8, 8}, Pair{2, 2}, Pair{0, 0}, Pair{0, 0}}}) {
      const Pool2dParams p{k, st, pad, cip};
      compare(
          {rnd(s, seed++)}, [p](const auto& t) { return avg_pool2d(t[0], p); }, 0);
    }
  }
  for (const auto& [s, out] :
       {std::pair{Shape{2, 3, 7, 11}, Pair{3, 5}}, std::pair{Shape{1, 4, 5, 5}, Pair{7, 2}},
        std::pair{Shape{2, 257, 3, 3}, Pair{1, 1}}}) {
    compare(
        {rnd(s, seed++)}, [out = out](const auto& t) { return adaptive_avg_pool2d(t[0], out); }, 0);
  }
  compare(
      {rnd(Shape{3, 5, 9, 7}, seed++)}, [](const auto& t) { return global_avg_pool2d(t[0]); }, 0);
}

// Batch norm, training and eval, with and without the affine parameters; the running statistics
// after the update. The sums run in another (fixed) order than the CPU's.
BOOST_AUTO_TEST_CASE(batch_norm_train_eval) {
  std::uint64_t seed = 400;
  for (const Shape& s : {Shape{5, 3, 7, 9}, Shape{33, 17}, Shape{4, 6, 1000}, Shape{2, 1, 1, 3}}) {
    for (bool affine : {true, false}) {
      for (bool training : {true, false}) {
        BOOST_TEST_CONTEXT("x " << s << " affine " << affine << " training " << training) {
          const std::int64_t C = s[1];
          const Tensor x = rnd(s, seed++, -3, 5), w = rnd(Shape{C}, seed++, 0.5, 2),
                       b = rnd(Shape{C}, seed++);
          const Tensor rm0 = rnd(Shape{C}, seed++), rv0 = rnd(Shape{C}, seed++, 0.5, 2);
          Tensor rm_h = rm0.clone(), rv_h = rv0.clone();
          Tensor rm_d = rm0.to(Device::CUDA), rv_d = rv0.to(Device::CUDA);
          std::vector<Tensor> in{x};
          if (affine) in.push_back(w), in.push_back(b);
          compare(
              in,
              [&](const auto& t) {
                const bool d = t[0].device() == Device::CUDA;
                return batch_norm(t[0], d ? rm_d : rm_h, d ? rv_d : rv_h, affine ? t[1] : Tensor(),
                                  affine ? t[2] : Tensor(), training, 0.1, 1e-5);
              },
              1e-5, 1e-4);
          require_close(rm_h, rm_d.to(Device::CPU), 1e-6);
          require_close(rv_h, rv_d.to(Device::CPU), 1e-6);
        }
      }
    }
  }
  // training without running statistics
  compare(
      {rnd(Shape{3, 4, 5}, 1)},
      [](const auto& t) {
        return batch_norm(t[0], Tensor(), Tensor(), Tensor(), Tensor(), true, 0.1, 1e-5);
      },
      1e-5, 1e-4);
  // deterministic: the same bits twice
  const Tensor x = rnd(Shape{64, 7, 33, 33}, 9).to(Device::CUDA);
  require_bits_equal(
      batch_norm(x, Tensor(), Tensor(), Tensor(), Tensor(), true, 0.1, 1e-5).to(Device::CPU),
      batch_norm(x, Tensor(), Tensor(), Tensor(), Tensor(), true, 0.1, 1e-5));
}

BOOST_AUTO_TEST_CASE(log_softmax_and_losses) {
  std::uint64_t seed = 500;
  for (const auto& [s, dim] :
       {std::pair{Shape{37, 11}, 1}, std::pair{Shape{37, 11}, 0}, std::pair{Shape{3, 7, 5}, 1},
        std::pair{Shape{1, 1}, 1}, std::pair{Shape{2, 300}, -1}}) {
    compare(
        {rnd(s, seed++, -8, 8)}, [dim = dim](const auto& t) { return log_softmax(t[0], dim); }, 1e-5);
  }
  for (const auto& [N, C] :
       {std::pair{37, 11}, std::pair{1, 1}, std::pair{300, 3}, std::pair{5, 1000}}) {
    BOOST_TEST_CONTEXT("cross_entropy " << N << "x" << C) {
      Tensor logits = rnd(Shape{N, C}, seed++, -6, 6);
      std::vector<float> v = logits.to_vector<float>();
      for (std::int64_t c = 0; c < C; ++c) v[c] = 1.5f;  // a row of ties
      logits = Tensor::from_vector(v, logits.shape());
      std::vector<std::int64_t> y(N);
      for (std::int64_t i = 0; i < N; ++i) y[i] = (i * 7 + 3) % C;
      const Tensor labels = Tensor::from_vector(y, Shape{N});
      compare(
          {logits}, [&](const auto& t) { return cross_entropy(t[0], on(labels, t[0])); }, 1e-5);
      std::vector<std::int32_t> y32(y.begin(), y.end());
      const Tensor labels32 = Tensor::from_vector(y32, Shape{N});
      compare(
          {logits}, [&](const auto& t) { return cross_entropy(t[0], on(labels32, t[0])); }, 1e-5);
    }
  }
  // a label out of range is named, on CUDA as on the CPU
  const Tensor bad = Tensor::from_vector(std::vector<std::int64_t>{0, 3}, Shape{2});
  BOOST_CHECK_THROW(cross_entropy(rnd(Shape{2, 3}, 1).to(Device::CUDA), bad.to(Device::CUDA)), Error);
  for (const Shape& s : {Shape{1}, Shape{7, 33}, Shape{100003}}) {
    compare(
        {rnd(s, seed++), rnd(s, seed++)}, [](const auto& t) { return mse_loss(t[0], t[1]); }, 1e-5);
  }
}

// max / argmax along a dimension: the first maximum on ties, the first NaN; the gradient at it.
BOOST_AUTO_TEST_CASE(max_and_argmax_ties) {
  Tensor x = ties(Shape{7, 13, 5}, 650);
  std::vector<float> v = x.to_vector<float>();
  v[3] = v[40] = std::numeric_limits<float>::quiet_NaN();
  x = Tensor::from_vector(v, x.shape());
  for (int d : {0, 1, 2}) {
    BOOST_TEST(argmax(x, d).to_vector<std::int64_t>() ==
                   argmax(x.to(Device::CUDA), d).to_vector<std::int64_t>(),
               boost::test_tools::per_element());
    compare(
        {x}, [d](const auto& t) { return max(t[0], d, d == 1); }, 0);
  }
  compare(
      {rnd(Shape{1001}, 651)}, [](const auto& t) { return max(t[0]); }, 0);
}

BOOST_AUTO_TEST_CASE(pointwise_nonlinearities) {
  Tensor x = rnd(Shape{3, 333}, 600, -9, 9);
  std::vector<float> v = x.to_vector<float>();
  v[0] = 0.0f, v[1] = -0.0f, v[2] = 30.0f, v[3] = -30.0f, v[4] = 1e-30f;
  x = Tensor::from_vector(v, x.shape());
  compare(
      {x}, [](const auto& t) { return sigmoid(t[0]); }, 1e-6);
  compare(
      {x}, [](const auto& t) { return tanh(t[0]); }, 1e-6);
  compare(
      {rnd(Shape{1001}, 601, -5, 5)}, [](const auto& t) { return exp(t[0]); }, 1e-6);
  compare(
      {rnd(Shape{1001}, 602, 0.01, 9)}, [](const auto& t) { return log(t[0]); }, 1e-6);
  const Tensor e = Tensor::empty(Shape{0, 3}).to(Device::CUDA);
  BOOST_TEST(sigmoid(e).numel() == 0);
}

// Dropout: the mask is Philox at counter i under one draw of the generator (checked on the host),
// the same seed gives the same mask, the kept values are x / (1 - p) exactly, dx = g * mask.
BOOST_AUTO_TEST_CASE(dropout_reproducible) {
  const Tensor x = rnd(Shape{7, 1001}, 700);
  const Tensor xd = x.to(Device::CUDA);
  for (double p : {0.1, 0.5, 0.9}) {
    Generator g1(1234), g2(1234), g3(99), ref(1234);
    const Tensor a = dropout(xd, p, true, g1), b = dropout(xd, p, true, g2),
                 c = dropout(xd, p, true, g3);
    require_bits_equal(a.to(Device::CPU), b);
    const std::uint64_t key = ref.next_u64();
    const float keep = static_cast<float>(1.0 / (1.0 - p));
    const std::vector<float> xv = x.to_vector<float>(), av = a.to_vector<float>(),
                             cv = c.to_vector<float>();
    std::int64_t kept = 0, differ = 0;
    for (std::size_t i = 0; i < xv.size(); ++i) {
      const bool k = kernels::cuda::philox_uniform(key, i) >= p;
      kept += k;
      differ += av[i] != cv[i];
      if (av[i] != (k ? xv[i] * keep : 0.0f)) BOOST_FAIL("element " << i << ": " << av[i] << " p " << p);
    }
    const double n = static_cast<double>(xv.size());
    BOOST_TEST(std::abs(kept / n - (1 - p)) < 0.03);
    BOOST_TEST(differ > 0);
    // backward: g * mask
    Tensor xl = leaf(xd);
    Generator g4(1234);
    const Tensor y = dropout(xl, p, true, g4);
    const Tensor g = rnd(x.shape(), 701);
    y.backward(g.to(Device::CUDA));
    const std::vector<float> gv = g.to_vector<float>(), dv = xl.grad().to_vector<float>();
    for (std::size_t i = 0; i < gv.size(); ++i) {
      const bool k = kernels::cuda::philox_uniform(key, i) >= p;
      if (dv[i] != (k ? gv[i] * keep : 0.0f)) BOOST_FAIL("grad element " << i);
    }
  }
  Generator gen(5);
  require_bits_equal(x, dropout(xd, 0.0, true, gen));
  require_bits_equal(x, dropout(xd, 0.5, false, gen));
  const std::vector<float> zero = dropout(xd, 1.0, true, gen).to_vector<float>();
  for (float z : zero) BOOST_REQUIRE(z == 0.0f);
  BOOST_TEST(dropout(Tensor::empty(Shape{0}).to(Device::CUDA), 0.5, true, gen).numel() == 0);
}

// The fused multi-tensor steps against the CPU optimizers over several steps, parameters of odd
// sizes (one spanning several chunks of a block); the state moves with load_state.
BOOST_AUTO_TEST_CASE(optimizers_multi_tensor) {
  const std::vector<Shape> shapes = {Shape{1}, Shape{257}, Shape{3, 16 * 256 + 3}, Shape{100003}};
  auto make_params = [&](Device d) {
    NamedTensors ps;
    for (std::size_t i = 0; i < shapes.size(); ++i) {
      Tensor p = rnd(shapes[i], 800 + i).to(d);
      p.requires_grad_();
      ps.emplace_back("p" + std::to_string(i), p);
    }
    return ps;
  };
  using Make = std::function<std::unique_ptr<optim::Optimizer>(NamedTensors)>;
  const std::vector<std::pair<const char*, Make>> makers = {
      {"sgd",
       [](NamedTensors p) { return std::make_unique<optim::SGD>(p, optim::SGD::Options{.lr = 0.1}); }},
      {"sgd momentum",
       [](NamedTensors p) {
         return std::make_unique<optim::SGD>(
             p,
             optim::SGD::Options{.lr = 0.05, .momentum = 0.9, .dampening = 0.1, .weight_decay = 1e-3});
       }},
      {"sgd nesterov",
       [](NamedTensors p) {
         return std::make_unique<optim::SGD>(
             p,
             optim::SGD::Options{.lr = 0.05, .momentum = 0.9, .weight_decay = 1e-4, .nesterov = true});
       }},
      {"adam",
       [](NamedTensors p) {
         return std::make_unique<optim::Adam>(p, optim::Adam::Options{.lr = 1e-2});
       }},
      {"adam l2 amsgrad",
       [](NamedTensors p) {
         return std::make_unique<optim::Adam>(
             p, optim::Adam::Options{.lr = 1e-2, .weight_decay = 1e-2, .amsgrad = true});
       }},
      {"adamw",
       [](NamedTensors p) {
         return std::make_unique<optim::AdamW>(p,
                                               optim::AdamW::Options{.lr = 1e-2, .weight_decay = 0.1});
       }},
  };
  for (const auto& [name, make] : makers) {
    BOOST_TEST_CONTEXT(name) {
      NamedTensors ph = make_params(Device::CPU), pd = make_params(Device::CUDA);
      auto oh = make(ph), od = make(pd);
      for (int step = 0; step < 5; ++step) {
        for (std::size_t i = 0; i < shapes.size(); ++i) {
          if (step == 1 && i == 2) {  // a parameter without a gradient this step
            ph[i].second.zero_grad(), pd[i].second.zero_grad();
            continue;
          }
          const Tensor g = rnd(shapes[i], 900 + 10 * step + i);
          ph[i].second.set_grad(g);
          pd[i].second.set_grad(g.to(Device::CUDA));
        }
        oh->step();
        od->step();
        for (std::size_t i = 0; i < shapes.size(); ++i) require_close(ph[i].second, pd[i].second, 1e-6);
      }
      // the state round-trips through the CPU and back onto the device
      const NamedTensors sh = oh->state(), sd = od->state();
      BOOST_REQUIRE(sh.size() == sd.size());
      for (std::size_t k = 0; k < sh.size(); ++k)
        if (sh[k].second.dtype() != DType::Int64)
          require_close(sh[k].second, sd[k].second.to(Device::CPU), 1e-6);
      od->load_state(sh);
      for (const auto& [key, t] : od->state())
        if (t.dtype() != DType::Int64) BOOST_TEST((t.device() == Device::CUDA));
    }
  }
}

// A small CNN (conv, batch norm, relu, pools, linear, cross entropy, SGD with momentum) trained a
// few steps on the CPU and, moved with Module::to, on CUDA: the same losses, parameters and
// buffers (num_batches_tracked counted on the device) within float32 tolerance.
BOOST_AUTO_TEST_CASE(small_cnn_trains_alike) {
  auto make = [] {
    manual_seed(7);
    using namespace nn;
    return std::make_shared<Sequential>(std::initializer_list<ModulePtr>{
        std::make_shared<Conv2d>(3, 8, 3, Conv2dParams{.padding = {1, 1}}),
        std::make_shared<BatchNorm2d>(8), std::make_shared<ReLU>(), std::make_shared<MaxPool2d>(2),
        std::make_shared<Conv2d>(8, 12, 3, Conv2dParams{.stride = {2, 2}}), std::make_shared<ReLU>(),
        std::make_shared<AdaptiveAvgPool2d>(Pair{1, 1}), std::make_shared<Flatten>(),
        std::make_shared<Linear>(12, 5)});
  };
  auto host = make(), dev = make();
  dev->to(Device::CUDA);
  optim::SGD oh(host->named_parameters(), {.lr = 0.05, .momentum = 0.9});
  optim::SGD od(dev->named_parameters(), {.lr = 0.05, .momentum = 0.9});
  const Tensor x = rnd(Shape{6, 3, 13, 11}, 1200);
  std::vector<std::int64_t> y{0, 1, 2, 3, 4, 2};
  const Tensor labels = Tensor::from_vector(y, Shape{6});
  for (int step = 0; step < 4; ++step) {
    oh.zero_grad(), od.zero_grad();
    const Tensor lh = cross_entropy((*host)(x), labels);
    const Tensor ld = cross_entropy((*dev)(x.to(Device::CUDA)), labels.to(Device::CUDA));
    BOOST_TEST(std::abs(lh.item() - ld.item()) <= 1e-4 * std::max(1.0, std::abs(lh.item())));
    lh.backward();
    ld.backward();
    oh.step(), od.step();
  }
  const NamedTensors ph = host->named_parameters(), pd = dev->named_parameters();
  for (std::size_t i = 0; i < ph.size(); ++i) BOOST_TEST_CONTEXT(ph[i].first) {
      require_close(ph[i].second, pd[i].second.to(Device::CPU), 1e-3);
    }
  const NamedTensors bh = host->named_buffers(), bd = dev->named_buffers();
  for (std::size_t i = 0; i < bh.size(); ++i) {
    BOOST_TEST_CONTEXT(bh[i].first) {
      if (bh[i].second.dtype() == DType::Int64)
        BOOST_TEST(bh[i].second.item() == bd[i].second.to(Device::CPU).item());
      else
        require_close(bh[i].second, bd[i].second.to(Device::CPU), 1e-3);
    }
  }
  host->eval(), dev->eval();
  require_close((*host)(x), (*dev)(x.to(Device::CUDA)), 1e-3);
}

// Ops without a CUDA kernel yet say so, naming the op and the device.
BOOST_AUTO_TEST_CASE(unported_ops_name_themselves) {
  const Tensor x = rnd(Shape{3, 4}, 1).to(Device::CUDA);
  auto message = [](auto f) {
    try {
      f();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const std::string m = message([&] { clamp(x, -1, 1); });
  BOOST_TEST(m.find("clamp") != std::string::npos);
  BOOST_TEST(m.find("CUDA") != std::string::npos);
  BOOST_TEST(message([&] { kl_div_softmax(x, x, 2.0); }).find("kl_div_softmax") != std::string::npos);
}

BOOST_AUTO_TEST_SUITE_END()
