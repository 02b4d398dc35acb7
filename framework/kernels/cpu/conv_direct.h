#pragma once
// Internal: direct 2-D convolution forward for few taps per output (K = C kh kw <=
// kConvDirectMaxTaps, the first layer of a CNN), where a GEMM's reduction is too short to pay
// for its tiles (the weight gradient stays a GEMM: see conv_direct.cpp).
// Vectors run along the output rows (column stride 1); runtime-dispatched (tensor/simd.h).
#include <cstdint>

namespace qat::kernels {

/// Taps per output up to which conv2d takes these kernels.
constexpr std::int64_t kConvDirectMaxTaps = 32;

/// One image and group: zero-padded input planes (C, Hp, Wp); kernel (kh, kw), dilation (dh, dw),
/// row stride sh, column stride 1; output (Ho, Wo). Tap k = (c kh + i) kw + j reads
/// xp[c][h sh + i dh][w + j dw] for output (h, w).
struct DirectConvGeom {
  std::int64_t C, Hp, Wp, kh, kw, dh, dw, sh, Ho, Wo;
  std::int64_t K() const { return C * kh * kw; }
};

/// y (O, Ho, Wo) = b + W (O, K) taps(xp):  y[o][h][w] = b[o] + sum_k W[o][k] xp[tap k at (h, w)],
/// summed after the bias in tap order with one fused multiply-add each (b null: 0).
void conv_direct_forward(const float* xp, const DirectConvGeom& g, const float* w, const float* b,
                         std::int64_t O, float* y);

}  // namespace qat::kernels
