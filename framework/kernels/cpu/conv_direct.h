#pragma once
// Internal: direct 2-D convolution forward for few taps per output (K = C kh kw <=
// kConvDirectMaxTaps, the first layer of a CNN), where a GEMM's reduction is too short to pay
// for its tiles (the weight gradient stays a GEMM: see conv_direct.cpp).
// Vectors run along the output rows (column stride 1); runtime-dispatched (tensor/simd.h).
#include <cstdint>

namespace qat::kernels {

/// Taps per output up to which conv2d takes these kernels.
constexpr std::int64_t kConvDirectMaxTaps = 32;

/// One image and group: output (Ho, Wo) over padded input planes whose rows are Wp wide, row
/// stride sh, column stride 1. tap[k] is the offset of tap k from an output's first input,
/// (c Hp + i dh) Wp + j dw for tap k = (c kh + i) kw + j: conv2d's im2col offsets.
struct DirectConvGeom {
  const std::int64_t* tap;
  std::int64_t K, Wp, sh, Ho, Wo;
};

/// y (O, Ho, Wo) = b + W (O, K) taps(xp):  y[o][h][w] = b[o] + sum_k W[o][k] xp[h sh Wp + w + tap[k]],
/// summed after the bias in tap order with one fused multiply-add each (b null: 0).
void conv_direct_forward(const float* xp, const DirectConvGeom& g, const float* w, const float* b,
                         std::int64_t O, float* y);

}  // namespace qat::kernels
