#pragma once
// Internal: rounding to a floating element format (FP8, FP6, FP4, MXINT8's fixed point), round
// half to even, saturating at +-max, NaN kept. Shared by fp8.cpp and mx.cpp; the kernels
// (kernels/cpu/fp8.cpp, mx.cpp) vectorise the float32 version step for step.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

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

// float32: the binade exponent comes from the bit pattern (as the kernels do).
template <>
inline float round_element<float>(float v, const ElementFormat& f) {
  const float a = std::fabs(v);
  std::uint32_t bits;
  std::memcpy(&bits, &a, sizeof bits);
  const int e = std::max(static_cast<int>(bits >> 23) - 127, f.min_exponent);  // floor(log2 a)
  const int k = f.mantissa_bits - e;                                           // 1/step = 2^k
  const std::uint32_t up_bits = static_cast<std::uint32_t>(127 + k) << 23;
  const std::uint32_t down_bits = static_cast<std::uint32_t>(127 - k) << 23;
  float up, down;
  std::memcpy(&up, &up_bits, sizeof up);
  std::memcpy(&down, &down_bits, sizeof down);
  const float max = static_cast<float>(f.max);
  float r = std::nearbyint(a * up) * down;
  r = r < max ? r : max;  // saturate (also +inf)
  r = a != a ? a : r;     // NaN stays NaN
  return std::copysign(r, v);
}

}  // namespace qat::quant::detail
