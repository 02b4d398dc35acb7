// The quantization hot path of an MLP QAT step (batch 64), each kernel next to a memcpy of the
// bytes it must read and write, measured in the same run (1 thread):
//   fake quant (forward + STE backward), observers, LSQ (forward + the three gradients), and the
//   int8 inference kernel next to our float GEMM on the same shape.
//   build/bench/bench_quant
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <vector>

#include "bench/bench_util.h"
#include "framework/autograd/grad_mode.h"
#include "framework/autograd/ops.h"
#include "framework/tensor/blas.h"
#include "framework/tensor/parallel.h"
#include "framework/tensor/random.h"
#include "modules/quant/fake_quant.h"
#include "modules/quant/int8_kernels.h"
#include "modules/quant/observer.h"

using namespace qat;
using namespace qat::quant;
using bench::memcpy_seconds;
using bench::seconds_per_call;

namespace {
void row(const char* what, const Shape& shape, double seconds, std::size_t bytes) {
  const double ref = memcpy_seconds(bytes);
  std::printf("%-40s %-14s %9.1f us %9.1f us %8.2fx\n", what, shape.str().c_str(), seconds * 1e6,
              ref * 1e6, seconds / ref);
}
}  // namespace

int main() {
  set_num_threads(1);
  Generator gen(0);
  std::printf("%-40s %-14s %12s %12s %9s\n", "kernel (1 thread)", "shape", "time", "memcpy", "x memcpy");
  const Shape w_shape{256, 784}, a_shape{64, 256};
  const std::size_t wf = w_shape.numel() * sizeof(float), af = a_shape.numel() * sizeof(float);
  Tensor w = Tensor::uniform(w_shape, -0.1, 0.1, gen), a = Tensor::uniform(a_shape, 0, 4, gen);
  const QuantSpec wspec = QuantSpec::weight_per_channel(8), aspec = QuantSpec::activation_affine(8);

  MovingAverageMinMaxObserver wobs(wspec, Shape{256}), aobs(aspec);
  row("observer per-channel (weights)", w_shape, seconds_per_call([&] { wobs.forward(w); }), wf);
  row("observer per-tensor (activations)", a_shape, seconds_per_call([&] { aobs.forward(a); }), af);
  const QParams wq = wobs.calculate_qparams(), aq = aobs.calculate_qparams();
  {
    NoGradGuard ng;
    row("fake quant per-channel forward", w_shape,
        seconds_per_call([&] { fake_quantize(w, wq, wspec); }), wf * 2 + w_shape.numel());
    row("fake quant per-tensor forward", a_shape, seconds_per_call([&] { fake_quantize(a, aq, aspec); }),
        af * 2 + a_shape.numel());
  }
  Tensor wl = w.detach();
  wl.requires_grad_(true);
  const Tensor g = Tensor::ones(w_shape);
  row("fake quant per-channel fwd + STE bwd", w_shape, seconds_per_call([&] {
        fake_quantize(wl, wq, wspec).backward(g);
        wl.zero_grad();
      }),
      wf * 4 + w_shape.numel() * 2);
  Tensor scale = wq.scale.clone(), zp = Tensor::zeros(Shape{256});
  scale.requires_grad_(true);
  row("LSQ per-channel fwd + 3 gradients", w_shape, seconds_per_call([&] {
        fake_quantize_learnable_per_channel_affine(wl, scale, zp, 0, -128, 127, 0.001).backward(g);
        wl.zero_grad();
        scale.zero_grad();
      }),
      wf * 4);

  // int8 inference (u8 x s8 -> s32, requantized) next to our float GEMM of the same shape
  const std::int64_t N = 64, K = 784, O = 256;
  std::vector<std::uint8_t> xq(N * K, 3), yq(N * O);
  std::vector<std::int8_t> wq8(O * K, 1);
  std::vector<std::int32_t> sums(O, K), bias(O, 0);
  std::vector<int8::Multiplier> mult(O, int8::quantize_multiplier(0.001));
  const double t_int8 = seconds_per_call([&] {
    int8::linear_u8s8(xq.data(), N, K, 128, wq8.data(), sums.data(), O, bias.data(),
                      {mult.data(), 0, 0, 255}, yq.data());
  });
  std::vector<float> xf(N * K, 1.0f), wff(O * K, 1.0f), yf(N * O);
  const double t_f32 = seconds_per_call([&] {
    detail::gemm<float>(false, true, N, O, K, 1, xf.data(), K, wff.data(), K, 0, yf.data(), O);
  });
  std::printf("%-40s %-14s %9.1f us %9.1f us %8.2fx  (reference: our float32 GEMM)\n",
              "int8 linear (u8 x s8, requant)", "64x784 . 256", t_int8 * 1e6, t_f32 * 1e6,
              t_int8 / t_f32);
  return 0;
}
