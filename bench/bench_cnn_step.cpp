// One training step of the Fashion-MNIST CNN (examples/cnn_qat.cpp), layer by layer on the real
// shapes (batch 64, 1 thread): forward + backward of each layer, next to two references
// measured in the same run:
//   copy  memcpy of the bytes the layer must read and write (input, output, their gradients)
//   gemm  the layer's GEMM flops at the speed of one large in-cache GEMM of ours (a convolution
//         by Winograd's algorithm does fewer multiplies and can go below it)
// and each convolution once more with its GEMMs (cpu::WinogradMode::Off), as "(GEMMs)", and
// the ratio of the two.
//   build/bench/bench_cnn_step [layer-name prefix, e.g. conv2]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <vector>

#include "bench/bench_util.h"
#include "framework/autograd/grad_mode.h"
#include "framework/autograd/ops.h"
#include "framework/tensor/blas.h"
#include "framework/tensor/cpu.h"
#include "framework/tensor/parallel.h"
#include "framework/tensor/random.h"

using namespace qat;
using bench::seconds_per_call;

namespace {
using i64 = std::int64_t;

// Seconds to copy `bytes` once (read + write), in and out of a buffer of that size.
double copy_seconds(i64 bytes) { return bench::memcpy_seconds(static_cast<std::size_t>(bytes)); }

struct Layer {
  const char* name;
  std::function<Tensor()> forward;  // builds the graph from leaves that require grad
  i64 bytes;                        // x, y, dy and (if needed) dx
  double flops;                     // GEMM flops of forward + backward (0: none)
};

Tensor leaf(const Shape& s, Generator& gen, bool grad = true) {
  Tensor t = Tensor::normal(s, 0, 1, gen);
  if (grad) t.requires_grad_();
  return t;
}
}  // namespace

int main(int argc, char** argv) {
  set_num_threads(1);
  Generator gen(0);
  const i64 N = 64;
  const Conv2dParams pad2{.padding = {2, 2}};
  const Pool2dParams pool2{.kernel = {2, 2}};
  Tensor x = leaf(Shape{N, 1, 28, 28}, gen, false);
  Tensor w1 = leaf(Shape{16, 1, 5, 5}, gen), b1 = leaf(Shape{16}, gen);
  Tensor a1 = leaf(Shape{N, 16, 28, 28}, gen), p1 = leaf(Shape{N, 16, 14, 14}, gen);
  Tensor w2 = leaf(Shape{32, 16, 5, 5}, gen), b2 = leaf(Shape{32}, gen);
  Tensor a2 = leaf(Shape{N, 32, 14, 14}, gen), f = leaf(Shape{N, 32 * 7 * 7}, gen);
  Tensor wf = leaf(Shape{10, 1568}, gen), bf = leaf(Shape{10}, gen), logits = leaf(Shape{N, 10}, gen);
  Tensor labels = Tensor::empty(Shape{N}, DType::Int64);
  for (i64 i = 0; i < N; ++i) labels.data<std::int64_t>()[i] = i % 10;

  const i64 c1 = N * 16 * 784 * 4, c2 = N * 32 * 196 * 4, fb = N * 1568 * 4;
  const std::vector<Tensor> leaves = {w1, b1, a1, p1, w2, b2, a2, f, wf, bf, logits};
  const Layer layers[] = {
      {"conv1 5x5 1->16", [&] { return conv2d(x, w1, b1, pad2); }, N * 784 * 4 + 2 * c1,
       2.0 * 2 * N * 16 * 784 * 25},
      {"relu  16x28x28", [&] { return relu(a1); }, 4 * c1, 0},
      {"pool  16x28x28", [&] { return max_pool2d(a1, pool2); }, 2 * c1 + c1 / 2, 0},
      {"conv2 5x5 16->32", [&] { return conv2d(p1, w2, b2, pad2); }, 2 * (c1 / 4) + 2 * c2,
       3.0 * 2 * N * 32 * 196 * 400},
      {"relu  32x14x14", [&] { return relu(a2); }, 4 * c2, 0},
      {"pool  32x14x14", [&] { return max_pool2d(a2, pool2); }, 2 * c2 + c2 / 2, 0},
      {"fc    1568->10", [&] { return linear(f, wf, bf); }, 2 * fb + 2 * N * 10 * 4,
       3.0 * 2 * N * 1568 * 10},
      {"cross_entropy", [&] { return cross_entropy(logits, labels); }, 2 * N * 10 * 4, 0},
  };

  // The GEMM reference: our float GEMM on one in-cache, panel-friendly shape.
  const i64 M = 64, Nn = 192, K = 256;
  std::vector<float> A(M * K, 0.5f), B(K * Nn, 0.25f), C(M * Nn);
  const double gemm_rate =
      2.0 * M * Nn * K / seconds_per_call([&] {
        detail::gemm<float>(false, false, M, Nn, K, 1, A.data(), K, B.data(), Nn, 0, C.data(), Nn);
      });

  std::printf("BLAS: %s\nreference GEMM %lldx%lldx%lld: %.1f GFLOP/s\n", detail::blas_info().c_str(),
              (long long)M, (long long)Nn, (long long)K, gemm_rate / 1e9);
  std::printf("%-18s %8s %10s %10s %8s %10s %8s\n", "batch 64", "fwd us", "fwd+bwd us", "copy us",
              "x copy", "gemm us", "x gemm");
  double total = 0;
  for (const Layer& l : layers) {
    if (argc > 1 && std::strncmp(l.name, argv[1], std::strlen(argv[1])) != 0) continue;
    Tensor g;  // the upstream gradient, fixed
    {
      Tensor y = l.forward();
      g = Tensor::normal(y.shape(), 0, 1, gen);
    }
    const double t = seconds_per_call([&] {
      for (Tensor t : leaves) t.zero_grad();  // as the optimizer does before each step
      Tensor y = l.forward();
      y.backward(g);
    });
    const double fwd = seconds_per_call([&] {
      NoGradGuard no_grad;
      l.forward();
    });
    total += t;
    const double copy = copy_seconds(l.bytes);
    std::printf("%-18s %8.1f %10.1f %10.1f %7.2fx", l.name, fwd * 1e6, t * 1e6, copy * 1e6, t / copy);
    if (l.flops > 0) std::printf(" %10.1f %7.2fx", l.flops / gemm_rate * 1e6, t * gemm_rate / l.flops);
    std::printf("\n");
    if (std::strncmp(l.name, "conv", 4) == 0) {  // the same layer through its GEMMs
      const cpu::WinogradMode saved_mode = cpu::winograd_mode();
      cpu::set_winograd_mode(cpu::WinogradMode::Off);
      const double tg = seconds_per_call([&] {
        for (Tensor t : leaves) t.zero_grad();
        Tensor y = l.forward();
        y.backward(g);
      });
      const double fg = seconds_per_call([&] {
        NoGradGuard no_grad;
        l.forward();
      });
      cpu::set_winograd_mode(saved_mode);
      std::printf(
          "%-18s %8.1f %10.1f   (this path: %.2fx the GEMMs' forward, %.2fx forward + backward)\n",
          "  (GEMMs)", fg * 1e6, tg * 1e6, fwd / fg, t / tg);
    }
  }
  std::printf("%-18s %8s %10.1f   (x 938 batches = %.2f s per epoch, without optimizer and data)\n",
              "total", "", total * 1e6, total * 938);
  return 0;
}
