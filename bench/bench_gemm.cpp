// GEMM throughput on the shapes of the Fashion-MNIST MLP and CNN training steps: the library's
// gemm<float> next to the system BLAS (what PyTorch links here) on the same data, same run.
//   build/bench/bench_gemm
#include <chrono>
#include <cstdio>
#include <vector>

#include "framework/tensor/blas.h"
#include "framework/tensor/parallel.h"
#include "framework/tensor/random.h"

using namespace qat;

namespace {
struct Case {
  const char* what;
  bool ta, tb;
  std::int64_t M, N, K;
};

template <class F>
double seconds_per_call(F f) {
  f();  // warm up (packing buffers, BLAS load)
  int reps = 0;
  const auto t0 = std::chrono::steady_clock::now();
  double t = 0;
  do {
    f();
    ++reps;
    t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  } while (t < 0.3);
  return t / reps;
}
}  // namespace

int main() {
  set_num_threads(1);
  const Case cases[] = {
      {"mlp fc1 forward   x W^T", false, true, 64, 256, 784},
      {"mlp fc1 dW        G^T x", true, false, 256, 784, 64},
      {"mlp fc2 dX        G W", false, false, 64, 256, 128},
      {"cnn conv2 forward W col", false, false, 32, 12544, 400},
      {"cnn conv2 dW      dY col^T", false, true, 32, 400, 12544},
      {"cnn conv2 dcol    W^T dY", true, false, 400, 12544, 32},
      {"cnn conv1 forward W col", false, false, 16, 50176, 25},
  };
  std::printf("BLAS: %s\n", detail::blas_info().c_str());
  std::printf("%-28s %18s %10s %10s %8s\n", "shape (1 thread)", "M x N x K", "qat GF/s", "blas GF/s",
              "speedup");
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
      detail::blas_gemm<float>(c.ta, c.tb, c.M, c.N, c.K, 1, A.data(), lda, B.data(), ldb, 0, C.data(), c.N);
    });
    const double flop = 2.0 * c.M * c.N * c.K;
    std::printf("%-28s %5lld x %5lld x %5lld %10.1f %10.1f %7.2fx\n", c.what, (long long)c.M,
                (long long)c.N, (long long)c.K, flop / ours / 1e9, flop / ref / 1e9, ref / ours);
  }
  return 0;
}
