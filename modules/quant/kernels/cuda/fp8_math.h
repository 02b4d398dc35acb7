#pragma once
// Internal: rounding a float32 to a floating element format (FP8 E4M3 / E5M2 and the MX element
// grids) by exact bit manipulation, host and device. The CPU's scalar float32 path
// (detail/float_round.h) is this function; the vectorised CPU kernel (kernels/cpu/fp8.cpp) and
// the CUDA kernel (fp8.cu) take the same steps, and the host tests hold them to the same bits.
#include <cmath>
#include <cstdint>
#include <cstring>

#include "framework/kernels/cuda/host_device.h"

namespace qat::quant::kernels::cuda::fp8 {

QAT_HOST_DEVICE inline std::uint32_t bits_of(float v) {
#ifdef __CUDA_ARCH__
  return __float_as_uint(v);
#else
  std::uint32_t b;
  std::memcpy(&b, &v, sizeof b);
  return b;
#endif
}

QAT_HOST_DEVICE inline float float_of(std::uint32_t b) {
#ifdef __CUDA_ARCH__
  return __uint_as_float(b);
#else
  float v;
  std::memcpy(&v, &b, sizeof v);
  return v;
#endif
}

/// The nearest value with `mantissa_bits` and smallest normal exponent `min_exponent`, ties to
/// even, saturating at +-max (also +-inf), NaN kept. With a = |v|, the binade exponent
/// e = max(floor(log2 a), emin) read from the bit pattern (float32 subnormals: emin); values
/// there are spaced 2^(e - m), so with the exact powers of two up = 2^(m - e), down = 2^(e - m):
/// r = min(rint(a up) down, max), y = copysign(r, v).
QAT_HOST_DEVICE inline float round_element(float v, int mantissa_bits, int min_exponent, float max) {
  const std::uint32_t a_bits = bits_of(v) & 0x7fffffffu;
  const float a = float_of(a_bits);
  int e = static_cast<int>(a_bits >> 23) - 127;  // floor(log2 a)
  e = e > min_exponent ? e : min_exponent;
  const int k = mantissa_bits - e;  // 1 / step = 2^k
  const float up = float_of(static_cast<std::uint32_t>(127 + k) << 23);
  const float down = float_of(static_cast<std::uint32_t>(127 - k) << 23);
#ifdef __CUDA_ARCH__
  float r = rintf(a * up) * down;
#else
  float r = std::nearbyint(a * up) * down;
#endif
  r = r < max ? r : max;  // saturate (also +inf)
  r = a != a ? a : r;     // NaN stays NaN
#ifdef __CUDA_ARCH__
  return copysignf(r, v);
#else
  return std::copysign(r, v);
#endif
}

/// FP8 fake quantization of one element (kernels/cpu/fp8.cpp Fp8Step): v = x / s,
/// *mask = [|v| <= max], y = round_element(v) s.
QAT_HOST_DEVICE inline float fake_quant_one(float x, float s, int mantissa_bits, int min_exponent,
                                            float max, std::uint8_t* mask) {
  const float v = x / s;
  const float a = float_of(bits_of(v) & 0x7fffffffu);
  *mask = static_cast<std::uint8_t>(a <= max);
  return round_element(v, mantissa_bits, min_exponent, max) * s;
}

}  // namespace qat::quant::kernels::cuda::fp8
