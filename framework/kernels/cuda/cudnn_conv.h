#pragma once
// Internal: conv2d through cuDNN (cudnn_conv.cpp; in a build without cuDNN, cudnn_none.cpp,
// whose entry points throw). NCHW, contiguous, float and double, groups, stride / padding /
// dilation. Each call queues work on the one stream and returns. No cuDNN headers here.
#include <cstdint>
#include <string>

#include "framework/kernels/cuda/kernels.h"  // ConvDims

namespace qat::kernels::cuda {

/// One convolution: x (N, C, H, W), weight (O, C/groups, kh, kw), y (N, O, Ho, Wo).
struct CudnnConv {
  ConvDims d;
  std::int64_t N, O, groups;
};

/// y = conv(x, w) + beta y   (beta 0: y is only written)
void cudnn_conv_forward(const float* x, const float* w, float beta, float* y, const CudnnConv& c);
void cudnn_conv_forward(const double* x, const double* w, double beta, double* y, const CudnnConv& c);
/// dx = the adjoint of the convolution applied to dy (overwritten)
void cudnn_conv_backward_data(const float* w, const float* dy, float* dx, const CudnnConv& c);
void cudnn_conv_backward_data(const double* w, const double* dy, double* dx, const CudnnConv& c);
/// dw = sum over the images of x correlated with dy (overwritten)
void cudnn_conv_backward_filter(const float* x, const float* dy, float* dw, const CudnnConv& c);
void cudnn_conv_backward_filter(const double* x, const double* dy, double* dw, const CudnnConv& c);

/// The algorithms cuDNN runs for `c` in each direction, e.g. "forward IMPLICIT_PRECOMP_GEMM
/// (0 B workspace), backward data ALGO_1 (...), backward filter ALGO_1 (...)" (for benchmarks).
std::string cudnn_conv_algorithms(const CudnnConv& c, bool float64);

namespace detail {
/// Throws qat::Error "<fn>: <call> failed on cuda:<device>: <cudnnGetErrorString(status)>
/// [; cuDNN's last error message] (file:line)" unless status is CUDNN_STATUS_SUCCESS (0).
/// Only in a build with cuDNN (QAT_CUDNN_CHECK in cudnn_conv.cpp).
void check_cudnn(int status, const char* fn, const char* call, const char* file, int line);
}  // namespace detail

}  // namespace qat::kernels::cuda
