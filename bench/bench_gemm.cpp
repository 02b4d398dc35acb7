// GEMM throughput on the shapes of the Fashion-MNIST MLP and CNN training steps: the library's
// gemm<float> next to the system BLAS (what PyTorch links here) on the same data, same run, on
// the AVX2 path and on the best path of this CPU (cpu::IsaGuard; BLAS picks its own kernels).
// The conv rows are the per-image GEMMs conv2d runs, which read the im2col matrix from the
// padded image (gemm_gather_a/_b); BLAS gets that matrix built (not timed).
//   build/bench/bench_gemm
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <vector>

#include "framework/tensor/blas.h"
#include "framework/tensor/cpu.h"
#include "framework/tensor/parallel.h"
#include "framework/tensor/random.h"

using namespace qat;
namespace {

// Seconds per call of f in this thread's CPU time (CLOCK_THREAD_CPUTIME_ID), the fastest of
// bench::seconds_per_call's trials: on a shared machine, the time other processes hold the
// core is not counted (their cache pollution still is).
template <class F>
double seconds_per_call(F f) {
  auto now = [] {
    timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
  };
  f();
  double t0 = now();
  f();
  const int reps = std::max(1, static_cast<int>(0.02 / std::max(now() - t0, 1e-9)));
  double best = 1e30;
  for (int trial = 0; trial < 15; ++trial) {
    t0 = now();
    for (int r = 0; r < reps; ++r) f();
    best = std::min(best, (now() - t0) / reps);
  }
  return best;
}

struct Case {
  const char* what;
  bool ta, tb;
  std::int64_t M, N, K;
};

void run_tables() {
  const Case cases[] = {
      {"mlp fc1 forward   x W^T", false, true, 64, 256, 784},
      {"mlp fc1 dW        G^T x", true, false, 256, 784, 64},
      {"mlp fc2 dX        G W", false, false, 64, 256, 128},
      {"fc1 batch 1       x W^T", false, true, 1, 256, 784},  // inference: dot products
      {"fc1 batch 4       x W^T", false, true, 4, 256, 784},
      {"fc1 batch 8       x W^T", false, true, 8, 256, 784},
      {"cnn conv2 forward W col", false, false, 32, 12544, 400},
      {"cnn conv2 dW      dY col^T", false, true, 32, 400, 12544},
      {"cnn conv2 dcol    W^T dY", true, false, 400, 12544, 32},
      {"cnn conv1 forward W col", false, false, 16, 50176, 25},
      {"cnn fc forward    x W^T", false, true, 64, 10, 1568},
      {"cnn fc dX         G W", false, false, 64, 1568, 10},
      {"cnn fc dW         G^T x", true, false, 10, 1568, 64},
  };
  std::printf("\nkernels: %s; %s\n", cpu::describe().c_str(), detail::blas_info().c_str());
  std::printf("%-28s %18s %10s %10s %8s\n", "shape (1 thread)", "M x N x K", "qat GF/s", "blas GF/s",
              "qat/blas");
  Generator gen(0);
  for (const Case& c : cases) {
    std::vector<float> A(c.M * c.K), B(c.K * c.N), C(c.M * c.N);
    for (auto& v : A) v = static_cast<float>(gen.uniform());
    for (auto& v : B) v = static_cast<float>(gen.uniform());
    const std::int64_t lda = c.ta ? c.M : c.K, ldb = c.tb ? c.K : c.N;
    const double ours = seconds_per_call([&] {
      detail::gemm<float>(c.ta, c.tb, c.M, c.N, c.K, 1, A.data(), lda, B.data(), ldb, 0, C.data(), c.N);
    });
    const double ref = seconds_per_call([&] {
      detail::blas_gemm<float>(c.ta, c.tb, c.M, c.N, c.K, 1, A.data(), lda, B.data(), ldb, 0, C.data(),
                               c.N);
    });
    const double flop = 2.0 * c.M * c.N * c.K;
    std::printf("%-28s %5lld x %5lld x %5lld %10.1f %10.1f %7.2fx\n", c.what, (long long)c.M,
                (long long)c.N, (long long)c.K, flop / ours / 1e9, flop / ref / 1e9, ref / ours);
  }

  // Per image, as conv2d runs them: a padded image of C planes (H + 4)^2, a 5x5 kernel, padding 2.
  struct ConvCase {
    const char* what;
    std::int64_t C, H, O;
    int gemm;  // 0: forward y^T = col^T W^T, 1: dW^T = col dY^T, 2: forward y = W col
  };
  const ConvCase conv_cases[] = {
      {"conv2 fwd/img  col^T W^T", 16, 14, 32, 0},  {"conv2 dW^T/img col dY^T", 16, 14, 32, 1},
      {"conv2 dx/img   Wf col(dY)", 32, 14, 16, 2},  // dx: conv of dY (32 ch) with 16 outputs
      {"conv1 fwd/img  W col", 1, 28, 16, 2},       {"conv1 dW^T/img col dY^T", 1, 28, 16, 1},
  };
  for (const ConvCase& c : conv_cases) {
    const std::int64_t hp = c.H + 4, K = c.C * 25, P = c.H * c.H;
    std::vector<std::int64_t> tap, pos;
    for (std::int64_t ch = 0; ch < c.C; ++ch)
      for (std::int64_t i = 0; i < 5; ++i)
        for (std::int64_t j = 0; j < 5; ++j) tap.push_back((ch * hp + i) * hp + j);
    for (std::int64_t oh = 0; oh < c.H; ++oh)
      for (std::int64_t ow = 0; ow < c.H; ++ow) pos.push_back(oh * hp + ow);
    std::vector<float> xp(c.C * hp * hp), col(K * P), W(c.O * K), D(c.O * P), C(std::max(K, P) * c.O);
    for (auto* v : {&xp, &W, &D})
      for (auto& x : *v) x = static_cast<float>(gen.uniform());
    for (std::int64_t k = 0; k < K; ++k)
      for (std::int64_t p = 0; p < P; ++p) col[k * P + p] = xp[tap[k] + pos[p]];
    std::int64_t M = P, N = c.O, KK = K;  // gemm 0: (P, O) = col^T (P, K) W^T (K, O)
    if (c.gemm == 1) M = K, N = c.O, KK = P;
    if (c.gemm == 2) M = c.O, N = P, KK = K;
    const double ours = seconds_per_call([&] {
      if (c.gemm == 0)  // conv.cpp passes W^T (K, O)
        detail::gemm_gather_a<float>(P, c.O, K, 1, xp.data(), pos.data(), tap.data(), false, W.data(),
                                     c.O, 0, C.data(), c.O);
      else if (c.gemm == 1)
        detail::gemm_gather_a<float>(K, c.O, P, 1, xp.data(), tap.data(), pos.data(), true, D.data(), P,
                                     0, C.data(), c.O);
      else
        detail::gemm_gather_b<float>(false, c.O, P, K, 1, W.data(), K, xp.data(), tap.data(), pos.data(),
                                     0, C.data(), P);
    });
    const double ref = seconds_per_call([&] {
      if (c.gemm == 0)
        detail::blas_gemm<float>(true, false, P, c.O, K, 1, col.data(), P, W.data(), c.O, 0, C.data(),
                                 c.O);
      else if (c.gemm == 1)
        detail::blas_gemm<float>(false, true, K, c.O, P, 1, col.data(), P, D.data(), P, 0, C.data(),
                                 c.O);
      else
        detail::blas_gemm<float>(false, false, c.O, P, K, 1, W.data(), K, col.data(), P, 0, C.data(), P);
    });
    const double flop = 2.0 * M * N * KK;
    std::printf("%-28s %5lld x %5lld x %5lld %10.1f %10.1f %7.2fx\n", c.what, (long long)M, (long long)N,
                (long long)KK, flop / ours / 1e9, flop / ref / 1e9, ref / ours);
  }
}

}  // namespace

int main() {
  set_num_threads(1);
  std::printf("GEMM GFLOP/s, qat next to the system BLAS; qat/blas > 1: qat is faster\n");
  for (cpu::Isa isa : {cpu::Isa::AVX2, cpu::best_isa()}) {
    if (static_cast<int>(isa) > static_cast<int>(cpu::best_isa())) continue;
    cpu::IsaGuard guard(isa);
    run_tables();
    if (isa == cpu::best_isa()) break;
  }
  return 0;
}
