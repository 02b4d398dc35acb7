// GEMM through cuBLAS (kernels.h). Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T,
// so cuBLAS gets B first. Pedantic math mode: FP32 stays FP32 (no TF32), as on the CPU, unless
// cuda::allow_tf32() (float32 only; float64 is always float64).
// cuBLAS is opened on the first GEMM on a GPU, not linked: libcublas pulls in libcublasLt, whose
// static initializers took 0.33 s and 210 MB of every process that linked it (CUDA 13, measured
// with an empty main), CPU-only runs included. The entry points come from the header's
// declarations (decltype), so their types are checked at compile time.
#include <cublas_v2.h>
#include <dlfcn.h>

#include <atomic>
#include <string>
#include <type_traits>

#include "framework/kernels/cuda/check.h"
#include "framework/kernels/cuda/kernels.h"
#include "framework/tensor/cuda.h"

namespace qat::kernels::cuda {
namespace {

const char* status_text(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_NOT_INITIALIZED:
      return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED:
      return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE:
      return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH:
      return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_EXECUTION_FAILED:
      return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR:
      return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return "CUBLAS_STATUS_NOT_SUPPORTED";
    default:
      return "cuBLAS error";
  }
}

void check(cublasStatus_t s, const char* call) {
  if (s == CUBLAS_STATUS_SUCCESS) return;
  throw Error(qat::detail::concat("gemm: ", call,
                                  " failed on cuda:", std::max(::qat::cuda::detail::current_device(), 0),
                                  ": ", status_text(s)));
}

// The cuBLAS entry points this file calls; the names are the header's (cublasCreate is a macro for
// cublasCreate_v2, the symbol the library exports).
#define QAT_CUBLAS_NAME_(f) #f
#define QAT_CUBLAS_NAME(f) QAT_CUBLAS_NAME_(f)
struct Cublas {
  void* lib = nullptr;
  decltype(&cublasCreate) create = nullptr;
  decltype(&cublasSetStream) set_stream = nullptr;
  decltype(&cublasSetMathMode) set_math_mode = nullptr;
  decltype(&cublasSgemm) sgemm = nullptr;
  decltype(&cublasDgemm) dgemm = nullptr;
  decltype(&cublasSgemmStridedBatched) sgemm_batched = nullptr;
  decltype(&cublasDgemmStridedBatched) dgemm_batched = nullptr;
};

// dlopen by soname first (LD_LIBRARY_PATH, the executable's run path, the loader's cache), then
// the file this build was configured with (QAT_CUBLAS_PATH, framework/CMakeLists.txt).
Cublas open_cublas() {
  Cublas c;
  std::string tried;
  for (const char* name : {QAT_CUBLAS_SONAME, QAT_CUBLAS_PATH}) {
    if ((c.lib = dlopen(name, RTLD_NOW | RTLD_LOCAL)) != nullptr) break;
    const char* why = dlerror();
    tried += qat::detail::concat(tried.empty() ? "" : "; ", why ? why : name);
  }
  if (c.lib == nullptr) throw Error(qat::detail::concat("gemm: cannot load cuBLAS (", tried, ")"));
  const auto resolve = [&](auto& fn, const char* symbol) {
    void* p = dlsym(c.lib, symbol);
    if (p == nullptr)
      throw Error(qat::detail::concat("gemm: cuBLAS (", QAT_CUBLAS_SONAME, ") has no symbol ", symbol));
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(p);
  };
  resolve(c.create, QAT_CUBLAS_NAME(cublasCreate));
  resolve(c.set_stream, QAT_CUBLAS_NAME(cublasSetStream));
  resolve(c.set_math_mode, QAT_CUBLAS_NAME(cublasSetMathMode));
  resolve(c.sgemm, QAT_CUBLAS_NAME(cublasSgemm));
  resolve(c.dgemm, QAT_CUBLAS_NAME(cublasDgemm));
  resolve(c.sgemm_batched, QAT_CUBLAS_NAME(cublasSgemmStridedBatched));
  resolve(c.dgemm_batched, QAT_CUBLAS_NAME(cublasDgemmStridedBatched));
  return c;
}
#undef QAT_CUBLAS_NAME
#undef QAT_CUBLAS_NAME_

// Loaded once; a failed load throws and is tried again on the next call.
const Cublas& cublas() {
  static const Cublas c = open_cublas();
  return c;
}

cublasHandle_t handle() {
  static cublasHandle_t h = [] {
    const Cublas& api = cublas();
    cudaStream_t st = ::qat::cuda::detail::stream("gemm");
    cublasHandle_t created = nullptr;
    check(api.create(&created), "cublasCreate");
    check(api.set_stream(created, st), "cublasSetStream");
    check(api.set_math_mode(created, CUBLAS_PEDANTIC_MATH), "cublasSetMathMode");
    return created;
  }();
  return h;
}

cublasOperation_t op(bool t) { return t ? CUBLAS_OP_T : CUBLAS_OP_N; }

// The handle with the float32 math that cuda::allow_tf32() asks for: pedantic (float32 stays
// float32) or TF32 tensor cores. Changed only when the setting changes.
cublasHandle_t handle_for_float() {
  static std::atomic<int> mode{CUBLAS_PEDANTIC_MATH};  // handle() starts pedantic
  const cublasHandle_t h = handle();
  const int want = ::qat::cuda::allow_tf32() ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_PEDANTIC_MATH;
  if (mode.load(std::memory_order_relaxed) != want) {
    check(cublas().set_math_mode(h, static_cast<cublasMath_t>(want)), "cublasSetMathMode");
    mode.store(want, std::memory_order_relaxed);
  }
  return h;
}

}  // namespace

std::string cublas_library() {
  const Cublas& api = cublas();
  Dl_info info{};
  return dladdr(reinterpret_cast<void*>(api.sgemm), &info) != 0 && info.dli_fname != nullptr
             ? info.dli_fname
             : QAT_CUBLAS_SONAME;
}

void gemm(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k, float alpha,
          const float* a, std::int64_t lda, const float* b, std::int64_t ldb, float beta, float* c,
          std::int64_t ldc) {
  if (m == 0 || n == 0) return;
  check(cublas().sgemm(handle_for_float(), op(trans_b), op(trans_a), static_cast<int>(n),
                       static_cast<int>(m), static_cast<int>(k), &alpha, b, static_cast<int>(ldb), a,
                       static_cast<int>(lda), &beta, c, static_cast<int>(ldc)),
        "cublasSgemm");
}

void gemm(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k, double alpha,
          const double* a, std::int64_t lda, const double* b, std::int64_t ldb, double beta, double* c,
          std::int64_t ldc) {
  if (m == 0 || n == 0) return;
  check(cublas().dgemm(handle(), op(trans_b), op(trans_a), static_cast<int>(n), static_cast<int>(m),
                       static_cast<int>(k), &alpha, b, static_cast<int>(ldb), a, static_cast<int>(lda),
                       &beta, c, static_cast<int>(ldc)),
        "cublasDgemm");
}

}  // namespace qat::kernels::cuda

namespace qat::kernels::cuda {

void gemm_batched(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k,
                  float alpha, const float* a, std::int64_t lda, std::int64_t stride_a, const float* b,
                  std::int64_t ldb, std::int64_t stride_b, float beta, float* c, std::int64_t ldc,
                  std::int64_t stride_c, std::int64_t batch) {
  if (m == 0 || n == 0 || batch == 0) return;
  check(cublas().sgemm_batched(handle_for_float(), op(trans_b), op(trans_a), static_cast<int>(n),
                               static_cast<int>(m), static_cast<int>(k), &alpha, b,
                               static_cast<int>(ldb), stride_b, a, static_cast<int>(lda), stride_a,
                               &beta, c, static_cast<int>(ldc), stride_c, static_cast<int>(batch)),
        "cublasSgemmStridedBatched");
}

void gemm_batched(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k,
                  double alpha, const double* a, std::int64_t lda, std::int64_t stride_a,
                  const double* b, std::int64_t ldb, std::int64_t stride_b, double beta, double* c,
                  std::int64_t ldc, std::int64_t stride_c, std::int64_t batch) {
  if (m == 0 || n == 0 || batch == 0) return;
  check(cublas().dgemm_batched(handle(), op(trans_b), op(trans_a), static_cast<int>(n),
                               static_cast<int>(m), static_cast<int>(k), &alpha, b,
                               static_cast<int>(ldb), stride_b, a, static_cast<int>(lda), stride_a,
                               &beta, c, static_cast<int>(ldc), stride_c, static_cast<int>(batch)),
        "cublasDgemmStridedBatched");
}

}  // namespace qat::kernels::cuda
