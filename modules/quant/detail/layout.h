#pragma once
// Internal: which scale / zero point each element of a tensor uses. The tensor is viewed as
// (outer, len, inner) around the spec's axis; elements sharing a parameter come in runs.
#include <cstdint>

#include "framework/tensor/shape.h"
#include "modules/quant/spec.h"

namespace qat::quant::detail {

struct Layout {
  std::int64_t outer = 1, len = 1, inner = 1, block = 1;
  bool blocked = false;
  std::int64_t num_params = 1;

  static Layout per_tensor(const Shape& x) {
    Layout l;
    l.inner = x.numel();
    return l;
  }
  static Layout per_channel(const Shape& x, int axis) {
    Layout l;
    const int a = x.axis(axis, "quant layout");
    for (int d = 0; d < x.rank(); ++d) {
      if (d < a) l.outer *= x[d];
      if (d > a) l.inner *= x[d];
    }
    l.len = x[a];
    l.num_params = l.len;
    return l;
  }
  static Layout per_block(const Shape& x, int axis, std::int64_t block) {
    Layout l = per_channel(x, axis);
    l.block = block;
    l.blocked = true;
    l.num_params = l.outer * (l.len / block) * l.inner;
    return l;
  }
  static Layout of(const QuantSpec& spec, const Shape& x) {
    switch (spec.granularity) {
      case Granularity::PerChannel:
        return per_channel(x, spec.axis);
      case Granularity::PerBlock:
        return per_block(x, spec.axis, spec.block_size);
      default:
        return per_tensor(x);
    }
  }

  /// Calls f(offset, count, param) for runs of `count` consecutive elements sharing `param`.
  template <class F>
  void for_each_run(F f) const {
    if (!blocked) {
      for (std::int64_t o = 0; o < outer; ++o)
        for (std::int64_t a = 0; a < len; ++a) f((o * len + a) * inner, inner, a);
    } else if (inner == 1) {
      for (std::int64_t o = 0; o < outer; ++o)
        for (std::int64_t b = 0; b < len / block; ++b)
          f((o * len + b * block), block, o * (len / block) + b);
    } else {
      for (std::int64_t o = 0; o < outer; ++o)
        for (std::int64_t a = 0; a < len; ++a)
          for (std::int64_t i = 0; i < inner; ++i)
            f((o * len + a) * inner + i, 1, (o * (len / block) + a / block) * inner + i);
    }
  }
};

/// kernels::cuda::ObserveArgs::sync_ranges for data-parallel training: MIN all-reduce of the
/// packed device ranges over the replica group (distributed::sync_device; observer.cpp).
void sync_ranges_min(float* packed, std::int64_t n);

}  // namespace qat::quant::detail
