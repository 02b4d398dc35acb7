#pragma once
// Internal: rounding to a floating element format (FP8, FP6, FP4, MXINT8's fixed point), round
// half to even, saturating at +-max, NaN kept. Shared by fp8.cpp and mx.cpp; the kernels
// (kernels/cpu/fp8.cpp, mx.cpp) vectorise the float32 version step for step.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "modules/quant/kernels/cuda/fp8_math.h"
#include "modules/quant/spec.h"

namespace qat::quant::detail {

// Values are spaced 2^(e - m) in the binade [2^e, 2^(e+1)) and 2^(emin - m) below 2^emin
// (subnormals); the spacing is a power of two, so v / step and r * step are exact.
template <class T>
T round_element(T v, const ElementFormat& f) {
  if (std::isnan(v)) return v;
  const T a = std::fabs(v);
  if (a >= static_cast<T>(f.max)) return std::copysign(static_cast<T>(f.max), v);
  int e = 0;
  std::frexp(a, &e);  // a = m 2^e with m in [0.5, 1): the binade is [2^(e-1), 2^e)
  const int exponent = std::max(e - 1, f.min_exponent);
  const T step = std::ldexp(T(1), exponent - f.mantissa_bits);
  const T r = std::fmin(std::nearbyint(a / step) * step, static_cast<T>(f.max));
  return std::copysign(r, v);
}

// float32: the binade exponent comes from the bit pattern (as the kernels do), the function the
// CUDA kernels run (kernels/cuda/fp8_math.h).
template <>
inline float round_element<float>(float v, const ElementFormat& f) {
  return kernels::cuda::fp8::round_element(v, f.mantissa_bits, f.min_exponent,
                                           static_cast<float>(f.max));
}

}  // namespace qat::quant::detail
