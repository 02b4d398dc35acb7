#include "framework/tensor/finite.h"

#include <cmath>

#include "framework/kernels/cpu/reduce.h"

namespace qat::detail {

NonFinite find_nonfinite(const Tensor& t) {
  NonFinite r;
  if (!is_floating(t.dtype())) return r;
  if (t.device() != Device::CPU) return find_nonfinite(t.to(Device::CPU));  // a host copy
  auto scan = [&]<class T>(const T* p) {
    const std::int64_t n = t.numel();
    if (kernels::all_finite(p, n)) return;
    for (std::int64_t i = 0; i < n; ++i)
      if (!std::isfinite(p[i]) && r.count++ == 0) {
        r.first = i;
        r.value = static_cast<double>(p[i]);
      }
  };
  if (t.dtype() == DType::Float32)
    scan(t.data<float>());
  else
    scan(t.data<double>());
  return r;
}

std::string index_text(const Shape& shape, std::int64_t flat) {
  if (shape.rank() == 0) return "";
  std::int64_t idx[Shape::kMaxDims];
  for (int d = shape.rank() - 1; d >= 0; --d) {
    idx[d] = shape[d] > 0 ? flat % shape[d] : 0;
    flat = shape[d] > 0 ? flat / shape[d] : 0;
  }
  std::string s = "[";
  for (int d = 0; d < shape.rank(); ++d) s += (d ? ", " : "") + std::to_string(idx[d]);
  return s + "]";
}

}  // namespace qat::detail
