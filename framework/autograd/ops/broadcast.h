#pragma once
// Internal: reduce a broadcast gradient back to an input's shape.
#include "framework/tensor/tensor.h"

namespace qat::detail {

/// Sums `grad` over the dimensions that broadcasting expanded so that the result has `shape`
/// (the inverse of broadcasting `shape` to grad.shape()). Returns grad itself if equal.
Tensor sum_to(const Tensor& grad, const Shape& shape);

}  // namespace qat::detail
