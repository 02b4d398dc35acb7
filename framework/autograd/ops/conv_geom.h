#pragma once
// Internal to autograd/ops/conv.cpp and conv_cuda.cpp: a 2-D convolution's geometry (conv.cpp's
// conv_geom checks conv2d's arguments and derives it) and conv2d's CUDA paths.
#include <cstdint>

#include "framework/autograd/ops.h"

namespace qat::conv_detail {
using i64 = std::int64_t;

struct ConvGeom {
  i64 N, C, H, W, O, kh, kw, groups, Cg, Og, Ho, Wo;
  Pair stride, padding, dilation;
  i64 K() const { return Cg * kh * kw; }  // rows of a group's column buffer
  i64 P() const { return Ho * Wo; }       // output positions per image
  i64 Hp() const { return H + 2 * padding[0]; }
  i64 Wp() const { return W + 2 * padding[1]; }
  bool channels_as_columns() const { return Og >= 32; }  // in the forward GEMM
  // With stride 1, dx is a convolution of dY, zero-padded to (Hd, Wd) with dY's corner at
  // (eh, ew) = ((kh-1)*dh - ph, (kw-1)*dw - pw), with the flipped kernel (Kd taps):
  //   dx[c][h][w] = sum_{o,i,j} W[o][c][kh-1-i][kw-1-j] * dYpad[o][h + i*dh][w + j*dw]
  // (needs the padding within the dilated kernel's reach, eh, ew >= 0).
  bool dx_as_convolution() const {
    return stride == Pair{1, 1} && padding[0] <= (kh - 1) * dilation[0] &&
           padding[1] <= (kw - 1) * dilation[1];
  }
  i64 Hd() const { return H + (kh - 1) * dilation[0]; }
  i64 Wd() const { return W + (kw - 1) * dilation[1]; }
  i64 eh() const { return (kh - 1) * dilation[0] - padding[0]; }
  i64 ew() const { return (kw - 1) * dilation[1] - padding[1]; }
  i64 Kd() const { return Og * kh * kw; }
};

/// conv2d on CUDA: cuDNN where the build has it and the geometry fits (cuda::conv_path()), else
/// im2col over chunks of images and cuBLAS GEMMs. Deterministic; with its backward recorded.
Tensor conv2d_cuda(const Tensor& x, const Tensor& weight, const Tensor& bias, const ConvGeom& g);

}  // namespace qat::conv_detail
