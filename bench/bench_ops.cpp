// The non-GEMM kernels of the CNN / MLP training step (batch 64, 1 thread), each next to a memcpy
// moving the same memory traffic (a copy of (bytes read + bytes written) / 2), measured in the
// same run, on the AVX2 path and on the best path this CPU has:
//   relu forward / backward, 2x2 max pool forward / backward, batch-norm statistics, affine and
//   backward, the bias-gradient sum over the batch, gradient accumulation, SGD and Adam steps.
//   build/bench/bench_ops
#include <cstdint>
#include <cstdio>
#include <vector>

#include "bench/bench_util.h"
#include "framework/kernels/cpu/elementwise.h"
#include "framework/kernels/cpu/norm.h"
#include "framework/kernels/cpu/optim.h"
#include "framework/kernels/cpu/pool.h"
#include "framework/kernels/cpu/reduce.h"
#include "framework/tensor/cpu.h"
#include "framework/tensor/random.h"

using namespace qat;
using bench::memcpy_seconds;
using bench::seconds_per_call;
using i64 = std::int64_t;

namespace {

std::vector<float> random_floats(i64 n, Generator& gen) {
  std::vector<float> v(n);
  for (auto& x : v) x = static_cast<float>(gen.uniform() * 2 - 1);
  return v;
}

void row(const char* what, const char* shape, double seconds, double bytes_moved) {
  const double ref = memcpy_seconds(static_cast<std::size_t>(bytes_moved / 2));
  std::printf("%-34s %-16s %9.1f us %9.1f us %8.2fx\n", what, shape, seconds * 1e6, ref * 1e6,
              seconds / ref);
}

void run_all() {
  Generator gen(0);
  // conv1 activation of the CNN: (64, 16, 28, 28); MLP parameters: 784*256 + 256*128 + 128*10 (+ biases)
  const i64 B = 64, C = 16, H = 28, W = 28, S = H * W, n = B * C * S,
            P = 784 * 256 + 256 * 128 + 1290 + 394;
  const double f = sizeof(float);
  const auto x = random_floats(n, gen), g = random_floats(n, gen);
  std::vector<float> y(n), d(n);
  const char* act = "64x16x28x28";
  row("relu forward", act, seconds_per_call([&] { kernels::relu(x.data(), y.data(), n); }), 2 * n * f);
  row("relu backward", act,
      seconds_per_call([&] { kernels::relu_backward(g.data(), x.data(), d.data(), n); }), 3 * n * f);
  std::vector<float> pooled(n / 4);
  std::vector<std::uint8_t> at(n / 4);
  row("max pool 2x2 forward (+argmax)", act, seconds_per_call([&] {
        for (i64 p = 0; p < B * C; ++p)
          kernels::max_pool_2x2(x.data() + p * S, H, W, pooled.data() + p * S / 4,
                                at.data() + p * S / 4);
      }),
      n * f + n / 4 * (f + 1));
  row("max pool 2x2 backward", act, seconds_per_call([&] {
        for (i64 p = 0; p < B * C; ++p)
          kernels::max_pool_2x2_backward(g.data() + p * S / 4, at.data() + p * S / 4, H, W,
                                         d.data() + p * S);
      }),
      n * f + n / 4 * (f + 1));
  double s1 = 0, s2 = 0;
  row("batch norm statistics", act, seconds_per_call([&] {
        for (i64 c = 0; c < C; ++c)
          kernels::channel_moments(x.data() + c * S, B, S, C * S, 0.1, &s1, &s2);
      }),
      2 * n * f);  // reads n: the same traffic as copying n / 2
  row("batch norm affine", act, seconds_per_call([&] {
        for (i64 c = 0; c < C; ++c)
          kernels::channel_affine(x.data() + c * S, y.data() + c * S, B, S, C * S, 1.5f, 0.5f);
      }),
      2 * n * f);
  row("batch norm backward sums", act, seconds_per_call([&] {
        for (i64 c = 0; c < C; ++c)
          kernels::channel_grad_sums(g.data() + c * S, x.data() + c * S, B, S, C * S, 0.1, &s1, &s2);
      }),
      2 * n * f);
  row("batch norm backward dx", act, seconds_per_call([&] {
        for (i64 c = 0; c < C; ++c)
          kernels::channel_backward(g.data() + c * S, x.data() + c * S, d.data() + c * S, B, S, C * S,
                                    0.9, 0.1, 0.2, 0.3);
      }),
      3 * n * f);
  std::vector<float> bias(256);
  row("bias grad: sum over batch", "64x256",
      seconds_per_call([&] { kernels::sum_rows(x.data(), 64, 256, bias.data()); }), 65 * 256 * f);
  row("gradient accumulation (+=)", act,
      seconds_per_call([&] { kernels::add_inplace(y.data(), x.data(), n); }), 3 * n * f);
  auto p = random_floats(P, gen), pg = random_floats(P, gen), m = random_floats(P, gen),
       v = random_floats(P, gen);
  for (auto& e : v) e = e * e;
  const kernels::SgdScalars<float> sgd{0, 0.9f, 1, -0.01f, false, false, false};
  row("SGD momentum step", "MLP params",
      seconds_per_call([&] { kernels::sgd_step(P, p.data(), pg.data(), m.data(), sgd); }), 5 * P * f);
  const kernels::AdamScalars<float> adam{0.9f, 0.999f, 0.1f,   0.001f, 0,    1,
                                         0.5f, 1e-8f,  -1e-3f, false,  false};
  row("Adam step", "MLP params", seconds_per_call([&] {
        kernels::adam_step(P, p.data(), pg.data(), m.data(), v.data(), nullptr, adam);
      }),
      7 * P * f);
}

}  // namespace

int main() {
  std::printf("%-34s %-16s %12s %12s %9s\n", "kernel (1 thread)", "shape", "time", "memcpy", "x memcpy");
  for (cpu::Isa isa : {cpu::Isa::AVX2, cpu::best_isa()}) {
    bool have = false;
    for (cpu::Isa s : cpu::supported_isas()) have = have || s == isa;
    if (!have) continue;
    cpu::IsaGuard guard(isa);
    std::printf("-- path %s\n", cpu::isa_name(isa));
    run_all();
    if (isa == cpu::best_isa()) break;
  }
  return 0;
}
