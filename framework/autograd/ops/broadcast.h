#pragma once
// Internal: NumPy broadcasting for binary ops and the reduction of gradients back to an
// input's shape. A broadcast is planned once: the output dimensions with each input's stride
// (0 where it is broadcast), size-1 dimensions dropped and contiguous ones merged, so that the
// innermost loop is long and has unit or zero strides.
#include <array>

#include "framework/kernels/cuda/kernels.h"
#include "framework/tensor/tensor.h"

namespace qat::detail {

struct BroadcastPlan {
  int rank = 0;
  std::array<std::int64_t, Shape::kMaxDims> size{}, sa{}, sb{};  // sb: second input (optional)

  /// Plan for out = f(a, b) (b may be an empty shape with `binary` false for a reduction).
  static BroadcastPlan make(const Shape& out, const Shape& a, const Shape& b, bool binary);
};

/// The sum of `in` down to `out` (out's dimensions aligned to in's trailing ones, each equal or
/// 1), for the CUDA sum kernel.
kernels::cuda::ReduceDims reduce_dims(const Shape& in, const Shape& out);

/// Sums `grad` over the dimensions that broadcasting expanded so that the result has `shape`
/// (the inverse of broadcasting `shape` to grad.shape()). Returns grad itself if equal.
Tensor sum_to(const Tensor& grad, const Shape& shape);

/// Sum of n values with 16 interleaved partial sums (vectorises; fixed order, so deterministic).
template <class T>
T sum_lanes(const T* __restrict p, std::int64_t n) {
  constexpr int L = 16;
  T acc[L] = {};
  std::int64_t i = 0;
  for (; i + L <= n; i += L)
    for (int l = 0; l < L; ++l) acc[l] += p[i + l];
  T s = 0;
  for (; i < n; ++i) s += p[i];
  for (int l = 0; l < L; ++l) s += acc[l];
  return s;
}

}  // namespace qat::detail
