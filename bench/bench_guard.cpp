// The cost of DivergenceGuard on the examples' MLP QAT step (784-256-128-10, batch 64, 1 thread):
// the step without a guard, the same step with one (every step checked), and the guard's checks
// alone; then the finite scan next to memcpy of the same bytes, and the scan of the tensors that
// LSQ quantizers check in training (their inputs after the warm-up).
//   build/bench/bench_guard [preset ...]     (default: fp32 int8_default int8_lsq int8_pact)
#include <cstdio>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "examples/common/models.h"
#include "framework/autograd/ops.h"
#include "framework/optim/divergence.h"
#include "framework/optim/sgd.h"
#include "framework/tensor/finite.h"
#include "framework/tensor/parallel.h"
#include "framework/tensor/random.h"
#include "modules/quant/quant.h"

using namespace qat;
using bench::seconds_per_call;

namespace {

constexpr std::int64_t kBatch = 64;

struct Timing {
  double step, guarded, guarded10, checks, checks_no_state;
};

Timing time_preset(const std::string& preset) {
  manual_seed(1);
  nn::ModulePtr model = examples::fmnist_mlp();
  if (preset != "fp32") {
    quant::QConfigRegistry reg;
    reg.set_global(preset);
    quant::prepare_qat(*model, reg, Tensor::zeros(Shape{1, 784}));
  }
  model->train();
  optim::SGD opt(model->named_parameters(), {.lr = 0.01, .momentum = 0.9});
  Generator gen(2);
  const Tensor x = Tensor::uniform(Shape{kBatch, 784}, 0, 1, gen);
  std::vector<std::int64_t> y(kBatch);
  for (auto& v : y) v = static_cast<std::int64_t>(gen.below(10));
  const Tensor labels = Tensor::from_vector<std::int64_t>(y, Shape{kBatch});

  Tensor loss;
  auto plain = [&] {
    opt.zero_grad();
    loss = cross_entropy(model->forward(x), labels);
    loss.backward();
    opt.step();
  };
  auto guarded_step = [&](optim::DivergenceGuard& guard) {
    opt.zero_grad();
    guard.check_input(x);
    loss = cross_entropy(model->forward(x), labels);
    guard.check_loss(loss);
    loss.backward();
    guard.check_gradients();
    opt.step();
    guard.end_step();
  };
  optim::DivergenceGuard every10(*model, opt, {.every = 10});
  optim::DivergenceGuard guard(*model, opt);
  auto guarded = [&] { guarded_step(guard); };
  for (int i = 0; i < 3; ++i) plain();  // past the warm-up of learnable quantizers
  Timing t{};
  t.step = seconds_per_call(plain);
  t.guarded = seconds_per_call(guarded);
  t.guarded10 = seconds_per_call([&] { guarded_step(every10); });
  plain();  // gradients and parameters in place for the checks alone
  t.checks = seconds_per_call([&] {
    guard.check_input(x);
    guard.check_loss(loss);
    guard.check_gradients();
    guard.end_step();
  });
  optim::DivergenceGuard lax(*model, opt, {.check_state = false});
  t.checks_no_state = seconds_per_call([&] {
    lax.check_input(x);
    lax.check_loss(loss);
    lax.check_gradients();
    lax.end_step();
  });
  return t;
}

}  // namespace

int main(int argc, char** argv) {
  set_num_threads(1);
  std::vector<std::string> presets(argv + 1, argv + argc);
  if (presets.empty()) presets = {"fp32", "int8_default", "int8_lsq", "int8_pact"};

  std::printf("MLP training step, batch %lld, 1 thread (fastest of 15 trials)\n",
              static_cast<long long>(kBatch));
  std::printf("%-14s %9s %11s %9s %12s %9s %10s %12s\n", "preset", "step ms", "guarded ms", "overhead",
              "every 10 ms", "overhead", "checks ms", "no-state ms");
  for (const std::string& p : presets) {
    const Timing t = time_preset(p);
    std::printf("%-14s %9.3f %11.3f %8.1f%% %12.3f %8.1f%% %10.4f %12.4f\n", p.c_str(), t.step * 1e3,
                t.guarded * 1e3, 100.0 * (t.guarded / t.step - 1), t.guarded10 * 1e3,
                100.0 * (t.guarded10 / t.step - 1), t.checks * 1e3, t.checks_no_state * 1e3);
  }

  // The finite scan on the MLP's parameters (235146 floats) next to a memcpy of the same bytes.
  Generator gen(3);
  const Tensor params = Tensor::uniform(Shape{235146}, -1, 1, gen);
  volatile std::int64_t sink = 0;
  const double scan = seconds_per_call([&] { sink = sink + detail::find_nonfinite(params).count; });
  const double copy = bench::memcpy_seconds(params.nbytes());
  std::printf(
      "\nfinite scan of %lld floats: %.1f us, %.1f GB/s read; memcpy of the bytes %.1f us (scan/copy "
      "%.2f)\n",
      static_cast<long long>(params.numel()), scan * 1e6, params.nbytes() / scan / 1e9, copy * 1e6,
      scan / copy);

  // What the LSQ / PACT quantizers scan per training step after the warm-up: their inputs (the
  // batch, fc1-3 weights and outputs), the refusal of NaN / inf in training.
  const std::vector<Shape> inputs = {{kBatch, 784}, {256, 784}, {kBatch, 256}, {128, 256},
                                     {kBatch, 128}, {10, 128},  {kBatch, 10}};
  std::vector<Tensor> ts;
  for (const Shape& s : inputs) ts.push_back(Tensor::uniform(s, -1, 1, gen));
  const double lsq = seconds_per_call([&] {
    for (const Tensor& t : ts) sink = sink + detail::find_nonfinite(t).count;
  });
  std::printf(
      "LSQ / PACT input scans per step (7 tensors, %lld floats): %.1f us\n",
      [&] {
        long long n = 0;
        for (const Tensor& t : ts) n += t.numel();
        return n;
      }(),
      lsq * 1e6);
  return 0;
}
