// The quantization kernels on CUDA at 2^20 and 2^26 floats: achieved bandwidth (bytes read +
// written / time) next to a device-to-device copy measured in the same run (copy bandwidth =
// 2 x bytes copied / time), and the ratio. Then a conv layer's forward + backward through cuDNN
// and through im2col + cuBLAS, as a ratio to the latter, float32 and with TF32 allowed. Without a
// device it prints "skipped: no CUDA device".
//   build/bench/bench_cuda
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>

#include "framework/autograd/grad_mode.h"
#include "framework/autograd/ops.h"
#include "framework/kernels/cuda/cudnn_conv.h"
#include "framework/tensor/cuda.h"
#include "framework/tensor/random.h"
#include "modules/quant/fake_quant.h"
#include "modules/quant/fused_observer.h"
#include "modules/quant/qconfig.h"
#include "modules/quant/quantizer.h"
#include "modules/quant/spec.h"

using namespace qat;

namespace {

// Best of 5 runs of `reps` calls, seconds per call (the stream drained around each run).
double seconds_per_call(const std::function<void()>& f, int reps) {
  f();
  cuda::synchronize();
  double best = 1e30;
  for (int run = 0; run < 5; ++run) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < reps; ++i) f();
    cuda::synchronize();
    const std::chrono::duration<double> dt = std::chrono::steady_clock::now() - t0;
    best = std::min(best, dt.count() / reps);
  }
  return best;
}

// conv2d forward + backward (dx, dW, db) of a 3x3 layer, 32 -> 64 channels, 28x28, N = 64,
// float32, stride 1, padding 1: cuDNN against im2col + cuBLAS, each timed the same way.
void conv_rows() {
  const std::int64_t N = 64, C = 32, O = 64, H = 28, W = 28, k = 3;
  Generator gen(1);
  Tensor x = Tensor::uniform(Shape{N, C, H, W}, -1, 1, gen).to(Device::CUDA);
  Tensor w = Tensor::uniform(Shape{O, C, k, k}, -0.2, 0.2, gen).to(Device::CUDA);
  Tensor b = Tensor::uniform(Shape{O}, -1, 1, gen).to(Device::CUDA);
  const Tensor g = Tensor::uniform(Shape{N, O, H, W}, -1, 1, gen).to(Device::CUDA);
  x.requires_grad_(), w.requires_grad_(), b.requires_grad_();
  const Conv2dParams p{{1, 1}, {1, 1}, {1, 1}, 1};
  auto step = [&] {
    x.zero_grad(), w.zero_grad(), b.zero_grad();
    conv2d(x, w, b, p).backward(g);
  };
  auto time_path = [&](cuda::ConvPath path) {
    const cuda::ConvPathGuard guard(path);
    return seconds_per_call(step, 20);
  };
  // forward, dx and dW: 2 N O (H W) (C k k) flops each
  const double flops = 3.0 * 2 * N * O * H * W * C * k * k;
  std::printf("\n%-52s %10s %10s %9s\n", "conv2d 3x3 32->64 28x28 N=64 fp32 fwd+bwd", "time", "TFLOP/s",
              "vs im2col");
  const double gemm_s = time_path(cuda::ConvPath::Im2colGemm);
  std::printf("%-52s %7.3f ms %10.2f %8.2fx\n", "im2col + cuBLAS", gemm_s * 1e3, flops / gemm_s / 1e12,
              1.0);
  if (!cuda::has_cudnn()) {
    std::printf("%-52s (this build has no cuDNN)\n", "cuDNN");
    return;
  }
  const double dnn_s = time_path(cuda::ConvPath::Cudnn);
  std::printf("%-52s %7.3f ms %10.2f %8.2fx\n", "cuDNN", dnn_s * 1e3, flops / dnn_s / 1e12,
              gemm_s / dnn_s);
  const kernels::cuda::CudnnConv c{{C, H, W, k, k, 1, 1, 1, 1, 1, 1, H, W}, N, O, 1};
  std::printf("cuDNN algorithms: %s\n", kernels::cuda::cudnn_conv_algorithms(c, false).c_str());
  // the opt-in TF32 (cuda::set_allow_tf32): tensor cores on float32, ~1e-3 relative
  const cuda::Tf32Guard tf32(true);
  const double gemm32 = time_path(cuda::ConvPath::Im2colGemm), dnn32 = time_path(cuda::ConvPath::Cudnn);
  std::printf("%-52s %7.3f ms %10.2f %8.2fx\n", "im2col + cuBLAS, TF32 allowed", gemm32 * 1e3,
              flops / gemm32 / 1e12, gemm_s / gemm32);
  std::printf("%-52s %7.3f ms %10.2f %8.2fx\n", "cuDNN, TF32 allowed", dnn32 * 1e3, flops / dnn32 / 1e12,
              gemm_s / dnn32);
  std::printf("cuDNN algorithms with TF32 allowed: %s\n",
              kernels::cuda::cudnn_conv_algorithms(c, false).c_str());
}

}  // namespace

int main() {
  if (!cuda::is_available()) {
    std::printf("skipped: no CUDA device (%s)\n", cuda::unavailable_reason().c_str());
    return 0;
  }
  std::printf("%-40s %10s %12s %12s %9s\n", "kernel", "floats", "time", "GB/s", "x copy");
  for (int log2n : {20, 26}) {
    const std::int64_t n = std::int64_t{1} << log2n;
    const int reps = log2n == 20 ? 200 : 10;
    Generator gen(0);
    const Tensor x = Tensor::uniform(Shape{n / 1024, 1024}, -4, 4, gen).to(Device::CUDA);
    const Tensor g = Tensor::uniform(Shape{n / 1024, 1024}, -1, 1, gen).to(Device::CUDA);
    const Tensor dst = Tensor::empty(x.shape(), DType::Float32, Device::CUDA);
    const double copy_s = seconds_per_call([&] { dst.copy_(x); }, reps);
    const double copy_bw = 2.0 * 4.0 * static_cast<double>(n) / copy_s;
    auto row = [&](const char* name, double bytes_per_float, const std::function<void()>& f) {
      const double s = seconds_per_call(f, reps);
      const double bw = bytes_per_float * static_cast<double>(n) / s;
      std::printf("%-40s %10lld %9.1f us %12.1f %8.2fx\n", name, static_cast<long long>(n), s * 1e6,
                  bw / 1e9, bw / copy_bw);
    };
    std::printf("%-40s %10lld %9.1f us %12.1f %8.2fx\n", "device-to-device copy",
                static_cast<long long>(n), copy_s * 1e6, copy_bw / 1e9, 1.0);
    const Tensor scale = Tensor::full(Shape{1024}, 0.05, DType::Float32, Device::CUDA);
    const Tensor zp = Tensor::zeros(Shape{1024}, DType::Int32, Device::CUDA);
    {
      NoGradGuard no_grad;  // forward only: x read, y and the STE mask written (4 + 4 + 1 bytes)
      row("fake quant per-tensor forward", 9,
          [&] { quant::fake_quantize_per_tensor_affine(x, 0.05f, 0, -128, 127); });
      row("fake quant per-channel forward", 9,
          [&] { quant::fake_quantize_per_channel_affine(x, scale, zp, 1, -128, 127); });
      quant::FusedObserverState st = quant::FusedObserverState::make(Device::CUDA);
      const auto spec = quant::QuantSpec::parse("uint8 affine per-tensor");
      // observer pass reads x, then fake quant reads x, writes y and mask: 4 + 4 + 4 + 1
      row("fused observer + fake quant forward", 13,
          [&] { quant::fused_moving_avg_obs_fake_quant(x, st, spec, 0.01); });
      // int8_default's weight quantizer (FakeQuantize, moving-average per-channel observer on
      // axis 0: n / 1024 channels of 1024): the min / max pass reads x, fake quant reads x and
      // writes y and the mask
      const quant::QConfigRegistry reg;
      auto wq = quant::make_quantizer(*reg.get("int8_default").weight, x.shape());
      wq->train();
      wq->to(Device::CUDA);
      row("FakeQuantize per-channel (observer + fq)", 13, [&] { (void)wq->forward(x); });
      // FP8 E4M3 per tensor: x read, y and the STE mask written
      const Tensor fp8_scale = Tensor::full(Shape{1}, 0.01, DType::Float32, Device::CUDA);
      const auto e4m3 = quant::QuantSpec::fp8(quant::Format::FP8_E4M3);
      row("FP8 E4M3 per-tensor forward", 9, [&] { (void)quant::fake_quantize_fp8(x, fp8_scale, e4m3); });
    }
    Tensor xl = x.detach();
    xl.requires_grad_();
    // LSQ per tensor: the forward reads x, writes y; the backward reads x and dy, writes dx and
    // reduces dscale / dzero_point (4 + 4 + 4 + 4 + 4 bytes)
    Tensor lsq_scale = Tensor::full(Shape{1}, 0.05, DType::Float32, Device::CUDA);
    Tensor lsq_zp = Tensor::full(Shape{1}, 0.3, DType::Float32, Device::CUDA);
    lsq_scale.requires_grad_(), lsq_zp.requires_grad_();
    const double gf = 1.0 / std::sqrt(static_cast<double>(n) * 127);
    row("LSQ per-tensor forward + dx, dscale, dzp", 20, [&] {
      xl.zero_grad(), lsq_scale.zero_grad(), lsq_zp.zero_grad();
      quant::fake_quantize_learnable_per_tensor_affine(xl, lsq_scale, lsq_zp, -128, 127, gf).backward(g);
    });
    // forward 9 bytes, backward reads dy and the mask, writes dx: 4 + 1 + 4
    row("fake quant per-tensor forward + STE", 18, [&] {
      xl.zero_grad();
      quant::fake_quantize_per_tensor_affine(xl, 0.05f, 0, -128, 127).backward(g);
    });
  }
  conv_rows();
  return 0;
}
