// Integer inference next to references measured in the same run (1 thread), for the AVX2 path
// and the best path this CPU has:
//   (a) the int8 linear kernel (packed weights, fused requantization) vs our float GEMM on the
//       same shape (the MLP's layers, batch 64);
//   (a3) quads plus the excess vs the 8-bit kernel (AVX2 / AVX-512 without VNNI: Winograd's
//       form for a linear layer on AVX2, int16 pairs elsewhere) for inputs with a fraction
//       above 127: a linear layer and the CNN's conv2, where int8::quads_pay's thresholds come
//       from;
//   (a2) the dynamic int8 linear (DynamicQuantizedLinear: int4 weights in groups of 32, per-row
//       activation quantization on the fly, float out) vs our float GEMM on the same shape;
//   (b) the converted int8 MLP / CNN / CNN-BN (prepare_qat, 600 SGD steps on Fashion-MNIST's
//       training images, convert; timed on its test images; uniform noise for both when the
//       dataset is not installed) vs our fp32 model's inference on the same batch;
//   (c) PyTorch's quantized engine on the same architectures and batch (bench/torch_int8.py,
//       run as a subprocess; "skipped" when python3 or torch is missing).
//   build/bench/bench_int8 [--no-torch] [--only MODEL] [--layers] [--rows]
//   (--only: mlp, mlp-7bit, cnn, cnn-7bit or cnn-bn, skips (a); -7bit: the int8_fbgemm qconfig,
//   activations in [0, 127]; --layers: the int8 model's time per layer, and the share of each
//   int8 layer's input codes above 127;
//   --rows: only machine-readable lines for the current path (cpu::isa(), QAT_CPU):
//     ROW int8_linear <X>x_faster (...)       our float GEMM time / int8 kernel time, 64x784 . 256
//     ROW int8_linear_ceiling <X>x_faster (...) the most int8_linear can show on this path: the
//         int8 multiply's rate (Winograd's vpaddw x2 + vpmaddwd + vpaddd on AVX2, vpmaddwd +
//         vpaddd on AVX-512, or vpdpbusd) over FMA's of the same width, on
//         registers (bench/port_ceiling.h), and each kernel's share of its own
//     ROW int8_linear_relu <X>x_faster (...)  the same, 0.3% of the inputs above 127 (a trained ReLU
//         layer's share: quads plus the excess on AVX2 / AVX-512)
//     ROW int8_dyn_linear <X>x_faster (...)   our float GEMM time / dynamic int8 layer, 64x768 . 256
//     ROW int8_dyn_linear_batch1 <X>x_faster (...)  the same for one row (decoding a token)
//     ROW int8_linear_batch1 <X>x_faster (...)  nn::Linear's forward / QuantizedLinear's, one
//         sample 784 -> 256 (whole layers: the int8 one's dot products of rows, the float one's)
//     ROW int8_cnn_vs_fp32 <X>x_faster (...)  our fp32 CNN / our int8 CNN, batch 64 (and the same
//         with the fp32 convolutions as GEMMs: cpu::WinogradMode::Off; and on the paths with the
//         int8 row Winograd, the int8 model without it: int8::set_row_winograd(false))
//     ROW int8_cnn_vs_torch <X>x_faster (...) PyTorch int8 (best engine) / ours, or "skipped (why)"
//     ROW int8_linear_7bit, int8_cnn_7bit_vs_fp32, int8_cnn_7bit_vs_torch: the same with inputs /
//         activations in [0, 127] (int8_fbgemm, PyTorch fbgemm's reduce_range))
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "bench/bench_util.h"
#include "bench/port_ceiling.h"
#include "examples/common/models.h"
#include "framework/autograd/grad_mode.h"
#include "framework/autograd/ops.h"
#include "framework/data/dataloader.h"
#include "framework/data/idx.h"
#include "framework/nn/nn.h"
#include "framework/optim/sgd.h"
#include "framework/tensor/blas.h"
#include "framework/tensor/cpu.h"
#include "framework/tensor/parallel.h"
#include "framework/tensor/random.h"
#include "modules/quant/dynamic_quantized_linear.h"
#include "modules/quant/int8_dynamic.h"
#include "modules/quant/int8_kernels.h"
#include "modules/quant/kernels/cpu/int8_gemm.h"
#include "modules/quant/quant.h"
#include "modules/quant/quantized_layers.h"

using namespace qat;
using namespace qat::quant;
using bench::seconds_per_call;
using bench::seconds_per_call_pair;

namespace {

nn::ModulePtr mlp() { return examples::fmnist_mlp(); }
nn::ModulePtr cnn(bool batch_norm) { return examples::fmnist_cnn(batch_norm); }

// Fashion-MNIST (Debian's dataset-fashion-mnist) when installed: the int8 models train on its
// training images and are timed on its test images, so that their activations have a trained
// model's ranges (the int8 kernels pick their format from them: int8_gemm.h); otherwise
// uniform noise.
struct Data {
  data::Dataset train, test;
  bool real = false;
};
const Data& fmnist() {
  static const Data d = [] {
    Data r;
    try {
      r.train = data::load_fashion_mnist(data::kFashionMnistDir, true);
      r.test = data::load_fashion_mnist(data::kFashionMnistDir, false);
      r.real = true;
    } catch (const std::exception&) {
    }
    return r;
  }();
  return d;
}

// The first `batch` test images (`shape` without the batch), or uniform noise
Tensor inputs(const Shape& shape, std::int64_t batch) {
  std::vector<std::int64_t> d{batch};
  for (std::int64_t i = 0; i < shape.rank(); ++i) d.push_back(shape[i]);
  if (!fmnist().real) {
    Generator gen(4);
    return Tensor::uniform(Shape(d), 0, 1, gen);
  }
  data::DataLoader loader(fmnist().test,
                          {.batch_size = batch, .shuffle = false, .flatten = shape.rank() == 1});
  data::Batch b;
  loader.next(b);
  return b.images;  // (batch, 1, 28, 28) or flattened (batch, 784)
}

// prepare_qat (`qconfig` everywhere), kTrainSteps SGD steps of batch 32 on the training images
// (or noise), convert. A third of an epoch: the moving-average activation ranges have settled
// near a trained model's (the CNN's conv2 input: 4.7% of its codes above 127 after 100 steps,
// 0.7% after 300, 0.3% after 600 and 900; the demo's model after 5 epochs: 0.18%).
constexpr int kTrainSteps = 600;
nn::ModulePtr int8_model(const std::function<nn::ModulePtr()>& build, const Shape& sample,
                         const std::string& qconfig = "int8_default") {
  manual_seed(1);
  nn::ModulePtr model = build();
  QConfigRegistry reg;
  reg.set_global(qconfig);
  prepare_qat(*model, reg);
  Generator gen(2);
  optim::SGD opt(model->named_parameters(), {.lr = 0.05, .momentum = 0.9});
  model->train();
  const bool flat = sample.rank() == 1;
  std::optional<data::DataLoader> loader;
  if (fmnist().real)
    loader.emplace(fmnist().train,
                   data::DataLoader::Options{.batch_size = 32, .seed = 3, .flatten = flat});
  data::Batch b;
  for (int step = 0; step < kTrainSteps; ++step) {
    if (loader) {
      if (!loader->next(b)) loader->next(b);
    } else {
      std::vector<std::int64_t> d{32}, y(32);
      for (std::int64_t i = 0; i < sample.rank(); ++i) d.push_back(sample[i]);
      b.images = Tensor::uniform(Shape(d), 0, 1, gen);
      for (auto& v : y) v = static_cast<std::int64_t>(gen.below(10));
      b.labels = Tensor::from_vector<std::int64_t>(y, Shape{32});
    }
    opt.zero_grad();
    cross_entropy(model->forward(b.images), b.labels).backward();
    opt.step();
  }
  model->eval();
  convert(*model);
  return model;
}

// (model, batch) -> {engine, fp32 s, int8 s}, from bench/torch_int8.py
struct TorchRow {
  std::string engine;
  double fp32 = 0, int8 = 0;
};
using TorchRows = std::map<std::pair<std::string, std::int64_t>, TorchRow>;
// PyTorch on the instruction set of `isa` (bench/torch_env.sh caps oneDNN and ATen there), the
// way it runs on a CPU that has nothing above it.
TorchRows run_torch(cpu::Isa isa, const std::vector<std::int64_t>& batches, std::string* why) {
  TorchRows best;
  std::string cmd = QAT_SOURCE_DIR "/bench/torch_env.sh " + std::string(cpu::isa_name(isa)) +
                    " /usr/bin/python3 " QAT_SOURCE_DIR "/bench/torch_int8.py";
  for (auto b : batches) cmd += " " + std::to_string(b);
  cmd += " 2>/dev/null";
  FILE* f = popen(cmd.c_str(), "r");
  if (!f) {
    *why = "cannot run python3";
    return best;
  }
  char line[512];
  while (std::fgets(line, sizeof line, f)) {
    char model[64], engine[64];
    long long batch = 0;
    double t32 = 0, t8 = 0;
    if (std::sscanf(line, "torch %63s %lld %63s %lf %lf", model, &batch, engine, &t32, &t8) != 5)
      continue;
    auto& row = best[{model, batch}];
    if (row.engine.empty() || t8 < row.int8) row = {engine, t32, t8};
  }
  const int rc = pclose(f);
  if (best.empty()) *why = rc != 0 ? "python3 or torch (torch.ao.quantization) missing" : "no output";
  return best;
}

// {int8 kernel s, float GEMM s} on x (N, K) . w^T (O, K), packing excluded; narrow: inputs in
// [0, 127] (a 7-bit activation range, PyTorch fbgemm's reduce_range), packed for them. wide >= 0:
// that fraction of the inputs in [128, 255], the rest in [0, 127], packed narrow (quads plus
// the excess of those inputs) or not (Winograd's form on AVX2, int16 pairs on AVX-512).
std::pair<double, double> time_linear(std::int64_t N, std::int64_t K, std::int64_t O, bool narrow,
                                      double wide = -1) {
  Generator gen(3);
  std::vector<std::uint8_t> xq(N * K), yq(N * O);
  std::vector<std::int8_t> wq(O * K);
  for (auto& v : xq)
    v = static_cast<std::uint8_t>(wide < 0 ? gen.below(narrow ? 128 : 256)
                                           : gen.below(128) + (gen.uniform() < wide ? 128 : 0));
  for (auto& v : wq) v = static_cast<std::int8_t>(static_cast<int>(gen.below(256)) - 128);
  std::vector<float> scale(O, 0.0007f * 0.05f), bias(O, 0.0007f * 0.05f * 17);
  const int8::PackedWeights pw = int8::pack_weights(wq.data(), O, K, narrow);
  const int8::Requant rq{scale.data(), bias.data(), 1.0f / 0.05f, 3, 3, 255};
  std::vector<float> xf(N * K, 0.5f), wf(O * K, 0.25f), yf(N * O);
  return seconds_per_call_pair(
      [&] { int8::gemm_u8s8_packed(xq.data(), N, K, 128, pw, rq, yq.data(), O); },
      [&] {
        detail::gemm<float>(false, true, N, O, K, 1, xf.data(), K, wf.data(), K, 0, yf.data(), O);
      });
}

// {quads + excess s, int16 pairs s}: the CNN's conv2 (16 -> 32 channels, 5 x 5, padding 2, a
// fused ReLU) on a batch of 64 14 x 14 inputs, half zeros, the rest in [0, 127] but for a
// fraction `wide` in [128, 255]
std::pair<double, double> time_conv_excess(double wide) {
  Generator gen(6);
  Tensor wq = Tensor::empty(Shape{32, 16, 5, 5}, DType::Int8);
  for (std::int64_t i = 0; i < wq.numel(); ++i)
    wq.data<std::int8_t>()[i] = static_cast<std::int8_t>(static_cast<int>(gen.below(256)) - 128);
  const QuantInfo in{0.02, 0};
  QuantizedConv2d layer(wq, Tensor::full(Shape{32}, 0.001f, DType::Float32),
                        Tensor::full(Shape{32}, 0.01f, DType::Float32), in, {{0.05, 0}, 0, 255}, true,
                        Conv2dParams{.padding = {2, 2}});
  Tensor x = Tensor::empty(Shape{64, 16, 14, 14}, DType::UInt8);
  x.set_quant_info(in);
  for (std::int64_t i = 0; i < x.numel(); ++i)
    x.data<std::uint8_t>()[i] = static_cast<std::uint8_t>(gen.uniform() < wide  ? 128 + gen.below(128)
                                                          : gen.uniform() < 0.5 ? 0
                                                                                : gen.below(128));
  const auto forward = [&](int8::QuadsPolicy p) {
    int8::set_quads_policy(p);
    layer.forward(x);
  };
  const auto t = seconds_per_call_pair([&] { forward(int8::QuadsPolicy::Always); },
                                       [&] { forward(int8::QuadsPolicy::Never); });
  int8::set_quads_policy(int8::QuadsPolicy::Auto);
  return t;
}

// {grouped kernel s, whole DynamicQuantizedLinear forward s (float in: per-row quantization +
// kernel), float GEMM s} on x (N, K) . w^T (O, K), int4 weights in groups of 32
std::tuple<double, double, double> time_dynamic_linear(std::int64_t N, std::int64_t K, std::int64_t O) {
  Generator gen(5);
  std::vector<std::uint8_t> xq(N * K);
  std::vector<std::int8_t> wq(O * K);
  for (auto& v : xq) v = static_cast<std::uint8_t>(gen.below(256));
  for (auto& v : wq) v = static_cast<std::int8_t>(static_cast<int>(gen.below(16)) - 8);
  const std::int64_t groups = (K + 31) / 32;
  std::vector<float> ws(O * groups, 0.01f), rs(N, 0.02f), bias(O, 0.1f), y(N * O);
  std::vector<std::int32_t> zp(N, 3);
  const int8::GroupedWeights pw = int8::pack_grouped(wq.data(), ws.data(), O, K, 32);
  const double tk = seconds_per_call([&] {
    int8::linear_dynamic(xq.data(), N, K, zp.data(), rs.data(), pw, bias.data(), false, y.data(), O);
  });
  Tensor w = Tensor::empty(Shape{O, K}, DType::Int8);
  std::copy(wq.begin(), wq.end(), w.data<std::int8_t>());
  DynamicQuantizedLinear layer(w, Tensor::full(Shape{O, groups}, 0.01f, DType::Float32),
                               Tensor::full(Shape{O}, 0.1f, DType::Float32),
                               {.input = QuantSpec{.bits = 8,
                                                   .is_signed = true,
                                                   .symmetric = false,
                                                   .granularity = Granularity::PerChannel,
                                                   .axis = 0,
                                                   .dynamic = true},
                                .output = std::nullopt,
                                .group = 32,
                                .weight_bits = 4});
  const Tensor x = Tensor::uniform(Shape{N, K}, -1, 1, gen);
  NoGradGuard ng;
  const double tl = seconds_per_call([&] { layer.forward(x); });
  std::vector<float> xf(N * K, 0.5f), wf(O * K, 0.25f), yf(N * O);
  const double t32 = seconds_per_call([&] {
    detail::gemm<float>(false, true, N, O, K, 1, xf.data(), K, wf.data(), K, 0, yf.data(), O);
  });
  return {tk, tl, t32};
}

// {QuantizedLinear forward s, nn::Linear forward s} on one sample, K -> O (whole layers, no
// autograd): the int8 layer on uint8 codes, the float one on floats
std::pair<double, double> time_linear_layers_batch1(std::int64_t K, std::int64_t O) {
  Generator gen(9);
  Tensor wq = Tensor::empty(Shape{O, K}, DType::Int8);
  for (std::int64_t i = 0; i < wq.numel(); ++i)
    wq.data<std::int8_t>()[i] = static_cast<std::int8_t>(static_cast<int>(gen.below(256)) - 128);
  const QuantInfo in{0.05, 3};
  QuantizedLinear q(wq, Tensor::full(Shape{O}, 0.001f, DType::Float32),
                    Tensor::full(Shape{O}, 0.1f, DType::Float32), in, ActivationQuant{QuantInfo{0.1, 3}},
                    false);
  Tensor xq = Tensor::empty(Shape{1, K}, DType::UInt8);
  for (std::int64_t i = 0; i < K; ++i)
    xq.data<std::uint8_t>()[i] = static_cast<std::uint8_t>(gen.below(256));
  xq.set_quant_info(in);
  nn::Linear f(K, O);
  const Tensor xf = Tensor::uniform(Shape{1, K}, 0, 1, gen);
  NoGradGuard ng;
  return seconds_per_call_pair([&] { q.forward(xq); }, [&] { f.forward(xf); });
}

// --rows: the machine-readable lines for the current path
int print_rows(bool torch) {
  double linear8 = 0, linear32 = 0;  // the uniform row's times, for its ceiling
  for (const bool narrow : {false, true}) {
    const auto [l8, l32] = time_linear(64, 784, 256, narrow);
    std::printf("ROW %s %.2fx_faster (%s 64x784.256: int8 %.1fus vs f32 gemm %.1fus)\n",
                narrow ? "int8_linear_7bit" : "int8_linear", l32 / l8, cpu::isa_name(cpu::isa()),
                l8 * 1e6, l32 * 1e6);
    if (!narrow) linear8 = l8, linear32 = l32;
  }
  // The most the uniform row can show on this path: the int8 multiply's rate over FMA's
  // (bench/port_ceiling.h), and how near each kernel runs to its own
  if (const cpu::Isa isa = cpu::isa(); isa != cpu::Isa::Generic) {
    const bool wide = isa == cpu::Isa::AVX512 || isa == cpu::Isa::AVX512_VNNI;
    const bool vnni = isa == cpu::Isa::AVX2_VNNI || isa == cpu::Isa::AVX512_VNNI;
    const bench::PortCeiling c = bench::port_ceiling(wide, vnni, int8::kernels::winograd());
    const double macs = 64.0 * 784 * 256;
    std::printf(
        "ROW int8_linear_ceiling %.2fx_faster (%s: %s %.0f vs FMA %.0f GMAC/s on registers; the int8 "
        "kernel at %.0f%%, the f32 gemm at %.0f%% of them)\n",
        c.ratio(), cpu::isa_name(isa), c.int8_insn, c.int8_macs * 1e-9, c.fma_macs * 1e-9,
        100 * macs / linear8 / c.int8_macs, 100 * macs / linear32 / c.fma_macs);
  }
  {  // 0.3% of the inputs above 127, as a trained model's ReLU layers (quads plus the excess)
    const auto [l8, l32] = time_linear(64, 784, 256, true, 0.003);
    std::printf("ROW int8_linear_relu %.2fx_faster (%s 64x784.256, 0.3%% above 127: int8 %.1fus vs f32 "
                "gemm %.1fus)\n",
                l32 / l8, cpu::isa_name(cpu::isa()), l8 * 1e6, l32 * 1e6);
  }
  {
    const auto [t8, t32] = time_linear_layers_batch1(784, 256);
    std::printf(
        "ROW int8_linear_batch1 %.2fx_faster (%s 1x784.256 layers: QuantizedLinear %.1fus vs nn::Linear "
        "%.1fus)\n",
        t32 / t8, cpu::isa_name(cpu::isa()), t8 * 1e6, t32 * 1e6);
  }
  for (const std::int64_t batch : {64, 1}) {  // batch 1: one token at a time, as when decoding
    const auto [dk, dl, d32] = time_dynamic_linear(batch, 768, 256);
    std::printf(
        "ROW %s %.2fx_faster (%s %lldx768.256 int4 groups of 32: layer %.1fus (kernel %.1fus) vs f32 "
        "gemm %.1fus)\n",
        batch == 1 ? "int8_dyn_linear_batch1" : "int8_dyn_linear", d32 / dl, cpu::isa_name(cpu::isa()),
        static_cast<long long>(batch), dl * 1e6, dk * 1e6, d32 * 1e6);
  }
  std::string why = "--no-torch";
  const auto rows = torch ? run_torch(cpu::isa(), {64}, &why) : TorchRows{};
  // int8_default (activations in [0, 255]) and int8_fbgemm (PyTorch fbgemm's reduce_range: in
  // [0, 127], read as int8 quads on every path)
  for (const bool seven : {false, true}) {
    const char* tag = seven ? "int8_cnn_7bit" : "int8_cnn";
    nn::ModulePtr q =
        int8_model([] { return cnn(false); }, Shape{1, 28, 28}, seven ? "int8_fbgemm" : "int8_default");
    nn::ModulePtr f = cnn(false);
    f->eval();
    const Tensor x = inputs(Shape{1, 28, 28}, 64);
    NoGradGuard ng;
    const auto [t32, t8] = seconds_per_call_pair([&] { f->forward(x); }, [&] { q->forward(x); });
    // the fp32 model with its convolutions as GEMMs (no Winograd), as before it had them
    const cpu::WinogradMode saved_mode = cpu::winograd_mode();
    cpu::set_winograd_mode(cpu::WinogradMode::Off);
    const auto [g32, g8] = seconds_per_call_pair([&] { f->forward(x); }, [&] { q->forward(x); });
    cpu::set_winograd_mode(saved_mode);
    // the int8 model without its row Winograd (the direct kernel), on the paths that have it
    char direct[96] = "";
    if (int8::row_winograd_tile(5, 14) > 0) {
      int8::set_row_winograd(false);
      const auto [d32, d8] = seconds_per_call_pair([&] { f->forward(x); }, [&] { q->forward(x); });
      int8::set_row_winograd(true);
      std::snprintf(direct, sizeof direct, "; int8 without its row Winograd %.2fms: %.2fx", d8 * 1e3,
                    d32 / d8);
    }
    std::printf(
        "ROW %s_vs_fp32 %.2fx_faster (%s batch 64: int8 %.2fms vs fp32 %.2fms; vs fp32 without Winograd "
        "%.2fms: %.2fx%s)\n",
        tag, t32 / t8, cpu::isa_name(cpu::isa()), t8 * 1e3, t32 * 1e3, g32 * 1e3, g32 / g8, direct);
    const auto it = rows.find({"cnn", 64});
    if (it != rows.end())
      std::printf("ROW %s_vs_torch %.2fx_faster (batch 64: ours %.2fms vs torch 1.13 %s %s %.2fms)\n",
                  tag, it->second.int8 / t8, t8 * 1e3, it->second.engine.c_str(),
                  cpu::isa_name(cpu::isa()), it->second.int8 * 1e3);
    else
      std::printf("ROW %s_vs_torch skipped (%s)\n", tag, why.c_str());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  bool torch = true, layers = false, rows = false;
  std::string only;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--no-torch") == 0) torch = false;
    if (std::strcmp(argv[i], "--layers") == 0) layers = true;
    if (std::strcmp(argv[i], "--rows") == 0) rows = true;
    if (std::strcmp(argv[i], "--only") == 0 && i + 1 < argc) only = argv[++i];
  }
  set_num_threads(1);
  if (rows) return print_rows(torch);
  std::vector<cpu::Isa> paths{cpu::Isa::AVX2};
  if (cpu::supports(cpu::Isa::AVX2_VNNI)) paths.push_back(cpu::Isa::AVX2_VNNI);
  if (cpu::best_isa() != paths.back()) paths.push_back(cpu::best_isa());
  if (cpu::best_isa() < cpu::Isa::AVX2) paths = {cpu::best_isa()};

  // (a) kernel vs float GEMM
  std::printf(
      "(a) int8 linear (u8 x s8 -> s32, fused requant, packed weights) vs our float32 GEMM, 1 thread;\n"
      "    inputs in [0, 255], and in [0, 127] (7-bit: PyTorch fbgemm's reduce_range)\n");
  std::printf("%-12s %-18s %12s %12s %12s %10s %10s\n", "path", "shape", "int8", "int8 7-bit",
              "f32 gemm", "f32/int8", "f32/7-bit");
  const std::tuple<std::int64_t, std::int64_t, std::int64_t> shapes[] = {
      {64, 784, 256}, {64, 256, 128}, {64, 128, 10}, {1000, 784, 256}};
  for (cpu::Isa isa : paths) {
    if (!only.empty()) break;
    cpu::IsaGuard guard(isa);
    for (const auto& [N, K, O] : shapes) {
      const auto [t8, t32] = time_linear(N, K, O, false);
      const auto [t7, t32b] = time_linear(N, K, O, true);
      const double tf = std::min(t32, t32b);
      const std::string shape = std::to_string(N) + "x" + std::to_string(K) + " . " + std::to_string(O);
      std::printf("%-12s %-18s %9.1f us %9.1f us %9.1f us %9.2fx %9.2fx\n", cpu::isa_name(isa),
                  shape.c_str(), t8 * 1e6, t7 * 1e6, tf * 1e6, tf / t8, tf / t7);
    }
  }

  // (a3) the excess correction: inputs in [0, 127] but for a fraction above (ReLU activations
  // of a trained model: 0.07% / 0.18% for the demo CNN's fc1 / conv2), quads plus the excess
  // against the 8-bit kernel, to place int8::kQuadsPayGemm / kQuadsPayConv
  std::printf(
      "\n(a3) int8 layers with a fraction of the inputs in [128, 255] (the rest in [0, 127]): quads "
      "plus their excess vs the 8-bit kernel (\"8-bit\": Winograd's form for the linear layer on "
      "AVX2, int16 pairs elsewhere), 1 thread (the layers take quads up to 1/%lld (linear), 1/%lld "
      "(conv))\n",
      static_cast<long long>(int8::kQuadsPayGemm), static_cast<long long>(int8::kQuadsPayConv));
  std::printf("%-12s %-28s %8s %12s %12s %12s\n", "path", "layer", "above", "quads+exc", "8-bit",
              "8-bit/quads");
  for (cpu::Isa isa : paths) {
    if (!only.empty()) break;
    cpu::IsaGuard guard(isa);
    if (!int8::narrow_is_faster()) continue;
    for (const double wide : {0.001, 0.003, 0.01, 0.02, 0.04, 0.06, 0.08}) {
      const auto [tq, t32] = time_linear(64, 784, 256, true, wide);
      const auto [tp, t32b] = time_linear(64, 784, 256, false, wide);
      std::printf("%-12s %-28s %7.1f%% %9.1f us %9.1f us %11.2fx\n", cpu::isa_name(isa),
                  "linear 64x784 . 256", wide * 100, tq * 1e6, tp * 1e6, tp / tq);
    }
    for (const double wide : {0.001, 0.003, 0.006, 0.01, 0.02}) {
      const auto [tq, tp] = time_conv_excess(wide);
      std::printf("%-12s %-28s %7.1f%% %9.1f us %9.1f us %11.2fx\n", cpu::isa_name(isa),
                  "conv 64x16x14x14, 32 5x5", wide * 100, tq * 1e6, tp * 1e6, tp / tq);
    }
  }

  // (a2) dynamic int8 linear vs float GEMM
  std::printf(
      "\n(a2) dynamic int8 linear (per-row int8 activations quantized on the fly, int4 weights in "
      "groups of 32, float out) vs our float32 GEMM, 1 thread\n");
  std::printf("%-12s %-18s %12s %12s %12s %10s\n", "path", "shape", "layer", "kernel", "f32 gemm",
              "f32/layer");
  const std::tuple<std::int64_t, std::int64_t, std::int64_t> dyn_shapes[] = {
      {64, 768, 256}, {64, 256, 128}, {1, 4096, 4096}, {1000, 768, 256}};
  for (cpu::Isa isa : paths) {
    if (!only.empty()) break;
    cpu::IsaGuard guard(isa);
    for (const auto& [N, K, O] : dyn_shapes) {
      const auto [tk, tl, t32] = time_dynamic_linear(N, K, O);
      const std::string shape = std::to_string(N) + "x" + std::to_string(K) + " . " + std::to_string(O);
      std::printf("%-12s %-18s %9.1f us %9.1f us %9.1f us %9.2fx\n", cpu::isa_name(isa), shape.c_str(),
                  tl * 1e6, tk * 1e6, t32 * 1e6, t32 / tl);
    }
  }

  // (b) + (c) models
  const std::vector<std::int64_t> batches{64, 1000};
  std::string why = "--no-torch";
  std::map<cpu::Isa, TorchRows> torch_rows;
  for (cpu::Isa isa : paths)
    if (torch) torch_rows[isa] = run_torch(isa, batches, &why);
  std::printf(
      "\n(b) converted int8 model vs our fp32 model, (c) vs PyTorch %s int8 (best engine), 1 thread\n",
      "1.13");
  std::printf("%-12s %-7s %6s %11s %11s %9s %11s %-8s %10s\n", "path", "model", "batch", "int8", "fp32",
              "fp32/int8", "torch int8", "engine", "torch/ours");
  struct M {
    const char* name;
    std::function<nn::ModulePtr()> build;
    Shape sample;         // one input, without the batch
    const char* torch;    // PyTorch's model of the same architecture
    const char* qconfig;  // ours
  };
  // -7bit: int8_fbgemm, activations in [0, 127] as PyTorch fbgemm's reduce_range
  const M models[] = {{"mlp", mlp, Shape{784}, "mlp", "int8_default"},
                      {"mlp-7bit", mlp, Shape{784}, "mlp", "int8_fbgemm"},
                      {"cnn", [] { return cnn(false); }, Shape{1, 28, 28}, "cnn", "int8_default"},
                      {"cnn-7bit", [] { return cnn(false); }, Shape{1, 28, 28}, "cnn", "int8_fbgemm"},
                      {"cnn-bn", [] { return cnn(true); }, Shape{1, 28, 28}, "cnn-bn", "int8_default"}};
  for (const M& m : models) {
    if (!only.empty() && only != m.name) continue;
    nn::ModulePtr q = int8_model(m.build, m.sample, m.qconfig);
    nn::ModulePtr f = m.build();
    f->eval();
    for (std::int64_t batch : batches) {
      const Tensor x = inputs(m.sample, batch);
      NoGradGuard ng;
      for (cpu::Isa isa : paths) {
        cpu::IsaGuard guard(isa);
        const auto [t32, t8] = seconds_per_call_pair([&] { f->forward(x); }, [&] { q->forward(x); });
        std::printf("%-12s %-7s %6lld %8.1f us %8.1f us %8.2fx", cpu::isa_name(isa), m.name,
                    static_cast<long long>(batch), t8 * 1e6, t32 * 1e6, t32 / t8);
        if (layers) {  // each child on the previous child's output
          Tensor h = x;
          std::printf("\n");
          for (const auto& [name, child] : q->named_children()) {
            const Tensor in = h;
            const double t = seconds_per_call([&] { child->forward(in); });
            h = child->forward(in);
            std::printf("    %-10s %-20s %9.1f us", name.c_str(), child->type_name().c_str(), t * 1e6);
            if (in.dtype() == DType::UInt8)  // what picks quads or pairs (int8::quads_pay)
              std::printf("   input above 127: %.2f%%",
                          100.0 * int8::count_wide(in.data<std::uint8_t>(), in.numel()) / in.numel());
            std::printf("\n");
          }
        }
        const auto it = torch_rows[isa].find({m.torch, batch});
        if (it != torch_rows[isa].end())
          std::printf(" %8.1f us %-8s %9.2fx\n", it->second.int8 * 1e6, it->second.engine.c_str(),
                      it->second.int8 / t8);
        else
          std::printf("  torch skipped (%s)\n", why.c_str());
      }
    }
  }
  std::printf(
      "\nkernels: %s; x > 1 means ours is faster. PyTorch runs on each path's instruction set "
      "(bench/torch_env.sh); its fp32 for the record:",
      cpu::describe().c_str());
  for (const auto& [isa, rows] : torch_rows)
    for (const auto& [key, row] : rows)
      std::printf(" %s %s/%lld %.1f us;", cpu::isa_name(isa), key.first.c_str(),
                  static_cast<long long>(key.second), row.fp32 * 1e6);
  std::printf("\n");
  return 0;
}
