#include "framework/tensor/blas.h"

#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <mutex>
#include <string>
#include <type_traits>
#include <vector>

#include "framework/tensor/cpu.h"
#include "framework/tensor/error.h"
#include "framework/tensor/parallel.h"
#include "framework/tensor/sgemm.h"

// The CBLAS library is opened at first use (QAT_BLAS_LIBRARY overrides the search), so the
// library links without a BLAS at build time and reports which one and which kernels it runs.

namespace qat::detail {
namespace {

enum CblasOrder { kRowMajor = 101 };
enum CblasTranspose { kNoTrans = 111, kTrans = 112 };
using SgemmFn = void (*)(int, int, int, int, int, int, float, const float*, int, const float*, int,
                         float, float*, int);
using DgemmFn = void (*)(int, int, int, int, int, int, double, const double*, int, const double*, int,
                         double, double*, int);
using SetThreadsFn = void (*)(int);
using CorenameFn = char* (*)();

struct Blas {
  SgemmFn sgemm = nullptr;
  DgemmFn dgemm = nullptr;
  SetThreadsFn set_threads = nullptr;
  std::string info;
};

Blas load() {
  std::string tried;
  const char* env = std::getenv("QAT_BLAS_LIBRARY");
  const char* candidates[] = {env, "libopenblas.so.0", "libopenblas.so", "libcblas.so.3",
                              "libblas.so.3"};
  for (const char* name : candidates) {
    if (name == nullptr) continue;
    void* h = dlopen(name, RTLD_NOW | RTLD_GLOBAL);
    if (h == nullptr) {
      tried += std::string(" ") + name;
      continue;
    }
    Blas b;
    b.sgemm = reinterpret_cast<SgemmFn>(dlsym(h, "cblas_sgemm"));
    b.dgemm = reinterpret_cast<DgemmFn>(dlsym(h, "cblas_dgemm"));
    if (b.sgemm == nullptr || b.dgemm == nullptr) {
      tried += std::string(" ") + name + "(no cblas_sgemm)";
      continue;
    }
    b.set_threads = reinterpret_cast<SetThreadsFn>(dlsym(h, "openblas_set_num_threads"));
    auto corename = reinterpret_cast<CorenameFn>(dlsym(h, "openblas_get_corename"));
    b.info = std::string(name) + (corename ? std::string(" (") + corename() + ")" : "");
    return b;
  }
  throw Error("qat BLAS: no CBLAS library could be loaded (tried:" + tried +
              "); install libopenblas0 or set QAT_BLAS_LIBRARY");
}

std::atomic<bool> loaded{false};

Blas& blas() {
  static Blas b = [] {
    Blas lib = load();
    if (lib.set_threads) lib.set_threads(1);  // qat shares out the blocks (blas_rows)
    loaded = true;
    return lib;
  }();
  return b;
}

// OpenBLAS's sums depend on how its threads share out C (0.3.21, Haswell kernels, 25 x 16 x 784:
// 175 of the 400 outputs differ between 1 and 2 threads, and as many between one call and two
// calls of half the rows each). So the library runs on one thread, and qat calls it on fixed
// blocks of kBlasRows rows of C, shared out over its threads: the calls, hence the bits, are the
// same for any thread count.
constexpr std::int64_t kBlasRows = 64;
constexpr std::int64_t kBlasParallelMinMacs = std::int64_t{1} << 21;

template <class T, class Fn>
void blas_rows(Fn fn, bool ta, bool tb, std::int64_t M, std::int64_t N, std::int64_t K, T alpha,
               const T* A, std::int64_t lda, const T* B, std::int64_t ldb, T beta, T* C,
               std::int64_t ldc) {
  if (M == 0 || N == 0) return;
  const std::int64_t blocks = (M + kBlasRows - 1) / kBlasRows;
  const int slots = in_parallel() || M * N * K < kBlasParallelMinMacs ? 1 : parallel_slots(blocks);
  parallel_for_each(blocks, slots, [&](std::int64_t blk, int) {
    const std::int64_t r0 = blk * kBlasRows, m = std::min(kBlasRows, M - r0);
    fn(kRowMajor, ta ? kTrans : kNoTrans, tb ? kTrans : kNoTrans, int(m), int(N), int(K), alpha,
       A + (ta ? r0 : r0 * lda), int(lda), B, int(ldb), beta, C + r0 * ldc, int(ldc));
  });
}

}  // namespace

template <>
void blas_gemm<float>(bool ta, bool tb, std::int64_t M, std::int64_t N, std::int64_t K, float alpha,
                      const float* A, std::int64_t lda, const float* B, std::int64_t ldb, float beta,
                      float* C, std::int64_t ldc) {
  blas_rows(blas().sgemm, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

template <>
void blas_gemm<double>(bool ta, bool tb, std::int64_t M, std::int64_t N, std::int64_t K, double alpha,
                       const double* A, std::int64_t lda, const double* B, std::int64_t ldb, double beta,
                       double* C, std::int64_t ldc) {
  blas_rows(blas().dgemm, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

template <>
void gemm<float>(bool ta, bool tb, std::int64_t M, std::int64_t N, std::int64_t K, float alpha,
                 const float* A, std::int64_t lda, const float* B, std::int64_t ldb, float beta,
                 float* C, std::int64_t ldc) {
  if (M == 0 || N == 0) return;
  if (sgemm_available())
    sgemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  else
    blas_gemm<float>(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

template <>
void gemm<double>(bool ta, bool tb, std::int64_t M, std::int64_t N, std::int64_t K, double alpha,
                  const double* A, std::int64_t lda, const double* B, std::int64_t ldb, double beta,
                  double* C, std::int64_t ldc) {
  blas_gemm<double>(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

template <class T>
void gemm_gather_a(std::int64_t M, std::int64_t N, std::int64_t K, T alpha, const T* a,
                   const std::int64_t* row_offset, const std::int64_t* k_offset, bool trans_b,
                   const T* B, std::int64_t ldb, T beta, T* C, std::int64_t ldc) {
  if constexpr (std::is_same_v<T, float>) {
    if (sgemm_available())
      return sgemm_gather_a(M, N, K, alpha, a, row_offset, k_offset, trans_b, B, ldb, beta, C, ldc);
  }
  std::vector<T> A(M * K);
  for (std::int64_t i = 0; i < M; ++i)
    for (std::int64_t k = 0; k < K; ++k) A[i * K + k] = a[row_offset[i] + k_offset[k]];
  gemm<T>(false, trans_b, M, N, K, alpha, A.data(), K, B, ldb, beta, C, ldc);
}
template void gemm_gather_a<float>(std::int64_t, std::int64_t, std::int64_t, float, const float*,
                                   const std::int64_t*, const std::int64_t*, bool, const float*,
                                   std::int64_t, float, float*, std::int64_t);
template void gemm_gather_a<double>(std::int64_t, std::int64_t, std::int64_t, double, const double*,
                                    const std::int64_t*, const std::int64_t*, bool, const double*,
                                    std::int64_t, double, double*, std::int64_t);

template <class T>
void gemm_gather_b(bool trans_a, std::int64_t M, std::int64_t N, std::int64_t K, T alpha, const T* A,
                   std::int64_t lda, const T* b, const std::int64_t* k_offset,
                   const std::int64_t* col_offset, T beta, T* C, std::int64_t ldc) {
  if constexpr (std::is_same_v<T, float>) {
    if (sgemm_available())
      return sgemm_gather_b(trans_a, M, N, K, alpha, A, lda, b, k_offset, col_offset, beta, C, ldc);
  }
  std::vector<T> B(K * N);
  for (std::int64_t k = 0; k < K; ++k)
    for (std::int64_t j = 0; j < N; ++j) B[k * N + j] = b[k_offset[k] + col_offset[j]];
  gemm<T>(trans_a, false, M, N, K, alpha, A, lda, B.data(), N, beta, C, ldc);
}
template void gemm_gather_b<float>(bool, std::int64_t, std::int64_t, std::int64_t, float, const float*,
                                   std::int64_t, const float*, const std::int64_t*, const std::int64_t*,
                                   float, float*, std::int64_t);
template void gemm_gather_b<double>(bool, std::int64_t, std::int64_t, std::int64_t, double,
                                    const double*, std::int64_t, const double*, const std::int64_t*,
                                    const std::int64_t*, double, double*, std::int64_t);

std::string blas_info() {
  if (sgemm_available())  // the system BLAS only serves float64: do not load it just to name it
    return std::string("float32: qat sgemm (") + cpu::isa_name(cpu::isa()) + "); float64: " +
           (loaded ? blas().info : std::string("system CBLAS, loaded on first use"));
  return "float32 and float64: " + blas().info;
}

}  // namespace qat::detail
