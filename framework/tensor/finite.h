#pragma once
// Internal: finding NaN / +-inf in a tensor, for the divergence guard and the learnable quantizers.
#include <cstdint>
#include <string>

#include "framework/tensor/tensor.h"

namespace qat::detail {

/// The non-finite values of a tensor: how many, and the first of them (flat index, value).
struct NonFinite {
  std::int64_t count = 0;  ///< 0: every value is finite
  std::int64_t first = -1;
  double value = 0;
};

/// NaN and +-inf in a float32 / float64 tensor (integer tensors have none). All finite costs
/// one vectorised pass without allocation; the count and first index are looked up only if not.
NonFinite find_nonfinite(const Tensor& t);

/// "[3, 7]": the multi-index of flat index `flat` in a row-major `shape` ("" for rank 0).
std::string index_text(const Shape& shape, std::int64_t flat);

}  // namespace qat::detail
