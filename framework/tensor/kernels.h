#pragma once
// Internal: small same-shape kernels shared by the engine, ops and optimizers.
#include "framework/tensor/tensor.h"

namespace qat::detail {

/// dst += src (same shape and floating dtype).
void add_inplace(Tensor& dst, const Tensor& src);
/// a + b (same shape and floating dtype), a new tensor.
Tensor add(const Tensor& a, const Tensor& b);
/// dst *= s
void scale_inplace(Tensor& dst, double s);

}  // namespace qat::detail
