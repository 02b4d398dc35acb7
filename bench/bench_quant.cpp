// The quantization hot path of a QAT step, each kernel next to a reference measured in the same
// run (1 thread), on the AVX2 path and the best path of this CPU: memcpy of the bytes a kernel
// must read and write (observers, fake quant, FP8, int8 add), or the fake-quant forward of the same
// tensor (LSQ forward + the three gradients, learnable amax), and PyTorch 1.13's LSQ op on data of
// the same size and distribution (bench/torch_lsq.py; skipped without python3 and torch); then the
// int8 inference kernel next to our float GEMM on the same shape.
//   build/bench/bench_quant           both paths, every kernel
//   build/bench/bench_quant --rows    the current path (QAT_CPU) only, the issue-table rows as
//                                     "ROW key ratio (detail)" lines (bench/cpu_table.sh reads them)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "framework/autograd/grad_mode.h"
#include "framework/autograd/ops.h"
#include "framework/tensor/cpu.h"
#include "framework/tensor/parallel.h"
#include "framework/tensor/random.h"
#include "modules/quant/fake_quant.h"
#include "modules/quant/functional.h"
#include "modules/quant/observer.h"

using namespace qat;
using namespace qat::quant;
using bench::memcpy_seconds;
using bench::seconds_per_call;

namespace {
bool g_rows = false;  // --rows: print only the table rows
struct Figure {
  double seconds = 0, ref = 0;
};
Figure g_observer, g_lsq;

// PyTorch 1.13's LSQ op and fake-quant forward on data of the LSQ row's size and distribution
// (bench/torch_lsq.py), on the instruction set of the current path (bench/torch_env.sh caps
// ATen there); {0, 0} and `why` when python3 or torch is missing.
Figure torch_lsq(std::string* why) {
  const std::string cmd = QAT_SOURCE_DIR "/bench/torch_env.sh " +
                          std::string(cpu::isa_name(cpu::isa())) +
                          " /usr/bin/python3 " QAT_SOURCE_DIR "/bench/torch_lsq.py 2>/dev/null";
  Figure f;
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) {
    *why = "cannot run python3";
    return f;
  }
  char line[256];
  while (std::fgets(line, sizeof line, p))
    if (std::sscanf(line, "torch lsq %lf fq %lf", &f.seconds, &f.ref) == 2) break;
  const int rc = pclose(p);
  if (!(f.seconds > 0)) *why = rc != 0 ? "python3 or torch missing" : "no output";
  return f;
}

// one figure next to its reference measured just before, as a ratio
void row(const char* what, const Shape& shape, double seconds, double ref, const char* ref_name) {
  if (g_rows) return;
  std::printf("  %-38s %-14s %9.1f us %9.1f us %7.2fx %s\n", what, shape.str().c_str(), seconds * 1e6,
              ref * 1e6, seconds / ref, ref_name);
}
double row(const char* what, const Shape& shape, double seconds, std::size_t bytes) {
  const double ref = memcpy_seconds(bytes);
  row(what, shape, seconds, ref, "memcpy");
  return ref;
}

// Every quantization kernel of a QAT step on the current path (cpu::isa()).
void quant_kernels() {
  Generator gen(0);
  const Shape w_shape{256, 784}, a_shape{64, 256}, big{1 << 20};
  const std::size_t wf = w_shape.numel() * sizeof(float), af = a_shape.numel() * sizeof(float);
  const std::size_t bf = big.numel() * sizeof(float);
  Tensor w = Tensor::uniform(w_shape, -0.1, 0.1, gen), a = Tensor::uniform(a_shape, 0, 4, gen);
  const QuantSpec wspec = QuantSpec::weight_per_channel(8), aspec = QuantSpec::activation_affine(8);

  MovingAverageMinMaxObserver wobs(wspec, Shape{256}), aobs(aspec), bobs(aspec);
  g_observer.seconds = seconds_per_call([&] { wobs.forward(w); });
  g_observer.ref = row("observer per-channel (weights)", w_shape, g_observer.seconds, wf);
  row("observer per-tensor (activations)", a_shape, seconds_per_call([&] { aobs.forward(a); }), af);
  const Tensor xb = Tensor::uniform(big, -3, 3, gen);
  row("observer per-tensor", big, seconds_per_call([&] { bobs.forward(xb); }), bf);
  const Tensor act = Tensor::uniform(Shape{64, 256}, -1, 1, gen);
  MovingAveragePerChannelMinMaxObserver cobs(QuantSpec::weight_per_channel(8, 1), 256);
  row("observer per-channel axis 1 (act.)", a_shape, seconds_per_call([&] { cobs.forward(act); }), af);
  const QParams wq = wobs.calculate_qparams(), aq = aobs.calculate_qparams(),
                bq = bobs.calculate_qparams();
  double t_fq_big = 0;
  {
    NoGradGuard ng;
    row("fake quant per-channel forward", w_shape,
        seconds_per_call([&] { fake_quantize(w, wq, wspec); }), wf * 2 + w_shape.numel());
    row("fake quant per-tensor forward", a_shape, seconds_per_call([&] { fake_quantize(a, aq, aspec); }),
        af * 2 + a_shape.numel());
    t_fq_big = seconds_per_call([&] { fake_quantize(xb, bq, aspec); });
    row("fake quant per-tensor forward", big, t_fq_big, bf * 2 + big.numel());
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
  {  // LSQ per tensor on 2^20 floats next to the fake-quant forward of the same tensor
    Tensor x = xb.detach(), s = bq.scale.clone(), z = Tensor::full(Shape{1}, 3.0f, DType::Float32);
    x.requires_grad_(true);
    s.requires_grad_(true);
    z.requires_grad_(true);
    const Tensor gb = Tensor::uniform(big, -1, 1, gen);
    auto lsq = [&] {
      return seconds_per_call([&] {
        fake_quantize_learnable_per_tensor_affine(x, s, z, -128, 127, 1.0 / 1024).backward(gb);
        x.zero_grad();
        s.zero_grad();
        z.zero_grad();
      });
    };
    g_lsq = {lsq(), t_fq_big};
    if (g_rows)  // the table's row: two more rounds, alternating, the fastest of each (a slow
                 // spell of the shared machine then hits both or neither)
      for (int round = 0; round < 2; ++round) {
        g_lsq.ref = std::min(g_lsq.ref, seconds_per_call([&] {
                               NoGradGuard ng;
                               fake_quantize(xb, bq, aspec);
                             }));
        g_lsq.seconds = std::min(g_lsq.seconds, lsq());
      }
    row("LSQ per-tensor fwd + 3 gradients", big, g_lsq.seconds, t_fq_big, "fake quant fwd");
    if (!g_rows) {
      std::string why;
      const Figure t = torch_lsq(&why);
      if (t.seconds > 0)
        row("  the same op in PyTorch 1.13", big, g_lsq.seconds, t.seconds, "PyTorch's");
      else
        std::printf("  PyTorch 1.13's LSQ: skipped (%s)\n", why.c_str());
    }
    // the same with the scale below the data's range: ~10% of the elements clipped (the
    // zero-point gradient gets terms; the kernel is branch-free)
    s.data<float>()[0] *= 0.9f;
    row("LSQ per-tensor, 10% clipped", big, lsq(), t_fq_big, "fake quant fwd");
    Tensor amax = Tensor::full(Shape{1}, 2.5f, DType::Float32);
    amax.requires_grad_(true);
    const double t_amax = seconds_per_call([&] {
      fake_quantize_learnable_amax(x, amax, QuantSpec{}).backward(gb);
      x.zero_grad();
      amax.zero_grad();
    });
    row("learnable amax fwd + 2 gradients", big, t_amax, t_fq_big, "fake quant fwd");
    NoGradGuard ng;
    const Tensor fs = Tensor::full(Shape{1}, 0.01f, DType::Float32);
    const QuantSpec e4{.format = Format::FP8_E4M3};
    row("FP8 E4M3 fake quant forward", big, seconds_per_call([&] { fake_quantize_fp8(xb, fs, e4); }),
        bf * 2 + big.numel());
    // microscaling on [1024, 1024] (blocks along the rows): reads x, writes y and the mask
    const Tensor xm = xb.view_as_shape(Shape{1024, 1024});
    for (auto [name, spec] :
         {std::pair{"MXFP8 E4M3 fake quant forward", QuantSpec::mx(Format::FP8_E4M3)},
          std::pair{"MXFP6 E2M3 fake quant forward", QuantSpec::mx(Format::FP6_E2M3)},
          std::pair{"MXFP4 fake quant forward", QuantSpec::mx(Format::FP4_E2M1)},
          std::pair{"MXINT8 fake quant forward", QuantSpec::mx(Format::Int)},
          std::pair{"NVFP4 fake quant forward", QuantSpec::nvfp4()}})
      row(name, big, seconds_per_call([&, spec = spec] { fake_quantize_mx(xm, spec); }),
          bf * 2 + big.numel());
  }
  {  // MXFP4 forward + STE backward: reads x, writes y and mask; reads dy and mask, writes dx
    Tensor x = xb.view_as_shape(Shape{1024, 1024}).detach();
    x.requires_grad_(true);
    const Tensor gb = Tensor::ones(Shape{1024, 1024});
    row("MXFP4 fwd + STE bwd", big, seconds_per_call([&] {
          fake_quantize_mx(x, QuantSpec::mx(Format::FP4_E2M1)).backward(gb);
          x.zero_grad();
        }),
        bf * 4 + big.numel() * 2);
  }
  {  // int8 add (QuantizedAdd, bit-exact with the fake-quant model) of 2^20 codes: reads two
     // uint8 tensors, writes one
    const Tensor qa = Quantize({{0.03, 128}, 0, 255}).forward(xb),
                 qb = Quantize({{0.02, 100}, 0, 255}).forward(xb);
    QuantizedAdd add_op({{0.05, 128}, 0, 255});
    row("int8 add (QuantizedAdd)", big, seconds_per_call([&] { add_op(qa, qb); }), big.numel() * 3);
  }
}
}  // namespace

int main(int argc, char** argv) {
  set_num_threads(1);
  g_rows = argc > 1 && std::strcmp(argv[1], "--rows") == 0;
  if (g_rows) {  // the current path only
    quant_kernels();
    std::printf("ROW observer_per_channel %.2fx (%.0fus vs memcpy %.0fus)\n",
                g_observer.seconds / g_observer.ref, g_observer.seconds * 1e6, g_observer.ref * 1e6);
    std::printf("ROW lsq_vs_fq %.2fx (%.0fus vs fake quant %.0fus)\n", g_lsq.seconds / g_lsq.ref,
                g_lsq.seconds * 1e6, g_lsq.ref * 1e6);
    std::string why;
    const Figure t = torch_lsq(&why);
    if (t.seconds > 0)
      std::printf(
          "ROW lsq_vs_torch %.1fx_faster (ours %.0fus vs torch 1.13 %.0fus; its fake quant fwd "
          "%.0fus, a ratio of %.2fx)\n",
          t.seconds / g_lsq.seconds, g_lsq.seconds * 1e6, t.seconds * 1e6, t.ref * 1e6,
          t.seconds / t.ref);
    else
      std::printf("ROW lsq_vs_torch skipped (%s)\n", why.c_str());
    return 0;
  }
  std::printf("  %-38s %-14s %12s %12s %8s\n", "kernel (1 thread)", "shape", "time", "reference",
              "ratio");
  std::vector<cpu::Isa> paths;
  if (cpu::best_isa() >= cpu::Isa::AVX2) paths.push_back(cpu::Isa::AVX2);
  if (cpu::best_isa() != cpu::Isa::AVX2) paths.push_back(cpu::best_isa());
  for (cpu::Isa isa : paths) {
    cpu::IsaGuard guard(isa);
    std::printf("%s\n", cpu::describe().c_str());
    quant_kernels();
  }
  std::printf("(int8 inference kernels: bench_int8)\n");
  return 0;
}
