#include "modules/quant/qparams.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace qat::quant {

void calculate_qparams(const float* min_val, const float* max_val, std::int64_t n, const QuantSpec& spec,
                       float* scale, std::int32_t* zero_point) {
  const std::int64_t qmin = spec.quant_min(), qmax = spec.quant_max();
  const float inf = std::numeric_limits<float>::infinity();
  for (std::int64_t i = 0; i < n; ++i) {
    if (min_val[i] == inf && max_val[i] == -inf) {  // never observed
      scale[i] = 1.0f;
      zero_point[i] = 0;
      continue;
    }
    QAT_REQUIRE(min_val[i] <= max_val[i], "calculate_qparams", "min ", min_val[i], " exceeds max ",
                max_val[i], " at index ", i);
    const float lo = std::min(min_val[i], 0.0f), hi = std::max(max_val[i], 0.0f);
    if (spec.symmetric) {
      const float half_range = static_cast<float>(static_cast<double>(qmax - qmin) / 2);
      scale[i] = std::max(std::max(-lo, hi) / half_range, kScaleEps);
      zero_point[i] = static_cast<std::int32_t>(spec.symmetric_zero_point());
    } else {
      scale[i] = std::max((hi - lo) / static_cast<float>(qmax - qmin), kScaleEps);
      const auto zp = static_cast<std::int64_t>(qmin - std::nearbyint(lo / scale[i]));
      zero_point[i] = static_cast<std::int32_t>(std::clamp(zp, qmin, qmax));
    }
  }
}

QParams calculate_qparams(const Tensor& min_val, const Tensor& max_val, const QuantSpec& spec) {
  require_dtype(min_val, DType::Float32, "calculate_qparams", "min_val");
  require_dtype(max_val, DType::Float32, "calculate_qparams", "max_val");
  QAT_REQUIRE(min_val.shape() == max_val.shape(), "calculate_qparams", "min_val ", min_val.shape(),
              " and max_val ", max_val.shape(), " differ in shape");
  spec.validate();
  QParams q{Tensor::empty(min_val.shape(), DType::Float32),
            Tensor::empty(min_val.shape(), DType::Int32)};
  calculate_qparams(min_val.data<float>(), max_val.data<float>(), min_val.numel(), spec,
                    q.scale.data<float>(), q.zero_point.data<std::int32_t>());
  return q;
}

}  // namespace qat::quant
