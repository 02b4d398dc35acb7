#pragma once
// Internal: pooling CPU kernels on raw planes, runtime-dispatched (tensor/simd.h).
#include <cstdint>

namespace qat::kernels {

/// Window positions of a 2x2 max pool, the argmax byte stored by max_pool_2x2; kNowhere: no
/// element of the window gets a gradient (max_pool_2x2_relu where the window's ReLU is 0).
enum : std::uint8_t { kTopLeft, kTopRight, kBottomLeft, kBottomRight, kNowhere };

/// Non-overlapping 2x2 max pool (kernel = stride = 2, no padding) of one (H, W) plane into
/// (Ho, Wo) = (H/2, W/2): out[oh, ow] = max of the window, at[oh, ow] its position. PyTorch's
/// rule: scan top-left, top-right, bottom-left, bottom-right; take v if v > best or v is NaN.
void max_pool_2x2(const float* in, std::int64_t H, std::int64_t W, float* out, std::uint8_t* at);

/// max_pool_2x2 of relu(in) (relu(v) = v > 0 ? v : 0) in one read of the plane, with the
/// gradient of both: at = the pool's argmax over the ReLU's outputs where that maximum is above
/// 0, else kNowhere (the ReLU passes no gradient there). max_pool_2x2_backward is its adjoint.
void max_pool_2x2_relu(const float* in, std::int64_t H, std::int64_t W, float* out, std::uint8_t* at);

/// The adjoint of max_pool_2x2 for one plane: d[window] = g at the argmax, 0 at its other three
/// places. Rows and columns beyond 2*Ho, 2*Wo (odd H, W) are left untouched.
void max_pool_2x2_backward(const float* g, const std::uint8_t* at, std::int64_t H, std::int64_t W,
                           float* d);

}  // namespace qat::kernels
