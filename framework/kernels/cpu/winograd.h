#pragma once
// Internal: 2-D convolution by Winograd's minimal filtering F(2x2, r x r), r = 3 or 5, stride 1,
// dilation 1 (Lavin & Gray, "Fast Algorithms for Convolutional Neural Networks", CVPR 2016).
// Each 2x2 block of outputs comes from an a x a input tile d (a = r + 1):
//   y = A^T [ sum_c (G w_c G^T) ⊙ (B^T d_c B) ] A
// a^2 multiplies per channel pair instead of 4 r^2 (2.25x fewer for r = 3, 2.78x for r = 5).
// The matrices are Toom-Cook's for the points 0, 1, -1 (r = 3) and 0, 1, -1, 2, -2 (r = 5),
// with infinity (scripts/winograd_matrices.py derives and checks them). Their float32 error is
// larger than a direct sum's: about 15x for r = 5, under 2x for r = 3 (the script prints both).
//
// The vector lanes hold images: a block of L images (the lanes of the current kernel path) is
// transposed to (channel, row, column, image), so every transform and product is lane-wise and
// an image's result does not depend on its block, lane or thread. Runtime-dispatched (simd.h).
#include <cstdint>

namespace qat::kernels {

/// The kernel sizes with a Winograd path.
inline bool winograd_kernel(std::int64_t r) { return r == 3 || r == 5; }

/// One group's convolution: x (C, H, W) per image, y (O, Ho, Wo) per image, kernel r x r,
/// zero padding pad_h rows on top and pad_w columns on the left (the bottom and right as
/// Ho, Wo imply), images x_image and y_image elements apart.
struct WinogradGeom {
  std::int64_t C, H, W, O, Ho, Wo, r, pad_h, pad_w, x_image, y_image;
  std::int64_t tiles_h() const { return (Ho + 1) / 2; }
  std::int64_t tiles_w() const { return (Wo + 1) / 2; }
  std::int64_t alpha() const { return r + 1; }
  /// Tile rows per band of packed input: about 256 KB of it for `lanes` images (at least one).
  std::int64_t band_tiles(std::int64_t lanes) const {
    const std::int64_t row_floats = C * (2 * tiles_w() + r - 1) * lanes;  // one padded input row
    const std::int64_t fit = ((std::int64_t{1} << 16) / row_floats - (r - 1)) / 2;
    return fit < 1 ? 1 : fit < tiles_h() ? fit : tiles_h();
  }
};

/// Images per block on the current kernel path.
std::int64_t winograd_lanes();

/// Floats of scratch one block needs (one per thread; any contents).
std::int64_t winograd_scratch_floats(const WinogradGeom& g);

/// U (a^2, C, O) = the transformed kernels G w[o][c] G^T of w (O, C, r, r), computed in double
/// and rounded once.
void winograd_weights(const float* w, const WinogradGeom& g, float* u);

/// y[n] = b + conv(x[n], w) for images n < count (count <= winograd_lanes()); u from
/// winograd_weights, b null: no bias. The channel sums run in order c = 0, 1, ...
void winograd_forward(const float* x, std::int64_t count, const float* u, const float* b,
                      const WinogradGeom& g, float* y, float* scratch);

/// The weight gradient in the transformed domain: du (a^2, O, C) += sum over the images n < count
/// and the 2x2 output tiles of (A dy_o A^T) ⊙ (B^T d_c B), for x and dy as winograd_forward's x
/// and y (dy: the gradient of y). Sums over the tiles in order, the images in order.
void winograd_backward_weights(const float* x, const float* dy, std::int64_t count,
                               const WinogradGeom& g, float* du, float* scratch);

/// dw (O, C, r, r) = G^T du[.][o][c] G, in double, rounded once: the weight gradient from
/// winograd_backward_weights' sums.
void winograd_weight_grad(const float* du, const WinogradGeom& g, float* dw);

}  // namespace qat::kernels
