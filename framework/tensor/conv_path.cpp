// Which path conv2d takes on CUDA tensors (tensor/cuda.h): cuDNN when the build has it, unless
// QAT_CUDNN=0 in the environment or set_conv_path() says otherwise; and whether float32 GEMMs and
// convolutions may use TF32 (QAT_CUDA_TF32, set_allow_tf32). Plain C++, in every build.
#include <atomic>
#include <cstdlib>
#include <iostream>
#include <string>
#include <string_view>

#include "framework/tensor/cuda.h"
#include "framework/tensor/error.h"

namespace qat::cuda {
namespace {

#ifdef QAT_HAS_CUDNN
constexpr bool kCudnnBuilt = true;
#else
constexpr bool kCudnnBuilt = false;
#endif

ConvPath from_environment() {
  static const ConvPath path = [] {
    std::string warning;
    const ConvPath p = detail::conv_path_from_env(std::getenv("QAT_CUDNN"), kCudnnBuilt, &warning);
    if (!warning.empty()) std::cerr << "qat: " << warning << "\n";
    return p;
  }();
  return path;
}

std::atomic<int> forced{-1};  // a ConvPath set by set_conv_path(), -1 before

bool tf32_from_environment() {
  static const bool on = [] {
    std::string warning;
    const bool v = detail::tf32_from_env(std::getenv("QAT_CUDA_TF32"), &warning);
    if (!warning.empty()) std::cerr << "qat: " << warning << "\n";
    return v;
  }();
  return on;
}

std::atomic<int> tf32_forced{-1};  // set_allow_tf32's value, -1 before

}  // namespace

namespace detail {
ConvPath conv_path_from_env(const char* value, bool cudnn_built, std::string* warning) {
  const ConvPath best = cudnn_built ? ConvPath::Cudnn : ConvPath::Im2colGemm;
  warning->clear();
  const std::string_view v = value == nullptr ? "" : value;
  if (v.empty()) return best;
  if (v == "0") return ConvPath::Im2colGemm;
  if (v == "1") {
    if (!cudnn_built)
      *warning =
          "QAT_CUDNN=1 but this build has no cuDNN (CMake QAT_CUDNN); conv2d on CUDA runs "
          "im2col + cuBLAS";
    return best;
  }
  *warning = qat::detail::concat("ignoring QAT_CUDNN=", v, " (expected 0 or 1); conv2d on CUDA runs ",
                                 conv_path_name(best));
  return best;
}
bool tf32_from_env(const char* value, std::string* warning) {
  warning->clear();
  const std::string_view v = value == nullptr ? "" : value;
  if (v.empty() || v == "0") return false;
  if (v == "1") return true;
  *warning = qat::detail::concat("ignoring QAT_CUDA_TF32=", v,
                                 " (expected 0 or 1); float32 GEMMs and convolutions stay float32");
  return false;
}
}  // namespace detail

bool allow_tf32() {
  const int f = tf32_forced.load(std::memory_order_relaxed);
  return f < 0 ? tf32_from_environment() : f != 0;
}

void set_allow_tf32(bool on) { tf32_forced.store(on ? 1 : 0, std::memory_order_relaxed); }

const char* conv_path_name(ConvPath path) { return path == ConvPath::Cudnn ? "cudnn" : "im2col_gemm"; }

bool has_cudnn() { return kCudnnBuilt; }

ConvPath conv_path() {
  const int f = forced.load(std::memory_order_relaxed);
  return f < 0 ? from_environment() : static_cast<ConvPath>(f);
}

void set_conv_path(ConvPath path) {
  QAT_REQUIRE(path != ConvPath::Cudnn || kCudnnBuilt, "cuda::set_conv_path",
              "path cudnn, but this build has no cuDNN (CMake QAT_CUDNN)");
  forced.store(static_cast<int>(path), std::memory_order_relaxed);
}

}  // namespace qat::cuda
