// Which path conv2d takes on CUDA tensors (tensor/cuda.h): cuDNN when the build has it, unless
// QAT_CUDNN=0 in the environment or set_conv_path() says otherwise. Plain C++, in every build.
#include <atomic>
#include <cstdlib>
#include <iostream>
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
}  // namespace detail

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
