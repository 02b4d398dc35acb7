#pragma once
// Internal: the per-range math of the observers and of calculate_qparams, host and device, so that
// the CPU tests run the very code the GPU runs against the CPU reference (observer.cpp,
// qparams.cpp, kernels/cpu/minmax.cpp). Every float32 step is the CPU's, in the same order; the
// device side builds with -fmad=false, the host side keeps the multiply of the moving average
// apart from its add.
#include <cmath>
#include <cstdint>

#include "framework/kernels/cuda/host_device.h"

namespace qat::quant::kernels::cuda::obs {

QAT_HOST_DEVICE inline bool sign_bit(float v) {
#ifdef __CUDA_ARCH__
  return signbit(v);
#else
  return std::signbit(v);
#endif
}

/// min(v, lo) with -0 below +0; NaN never enters (compares false). Exact, so any reduction
/// order gives the same bits.
QAT_HOST_DEVICE inline float min_z(float v, float lo) {
  return (v < lo || (v == lo && sign_bit(v) && !sign_bit(lo))) ? v : lo;
}
/// max(v, hi) with +0 above -0; NaN never enters.
QAT_HOST_DEVICE inline float max_z(float v, float hi) {
  return (v > hi || (v == hi && !sign_bit(v) && sign_bit(hi))) ? v : hi;
}

/// a + c (b - a), the product rounded to float32 before the add (PyTorch's moving average).
QAT_HOST_DEVICE inline float moving_average(float a, float b, float c) {
#ifdef __CUDA_ARCH__
  return a + c * (b - a);  // -fmad=false: never contracted
#else
  const volatile float step = c * (b - a);
  return a + step;
#endif
}

/// The running statistics after one batch: MinMaxObserver (averaging_constant 0) keeps
/// min(min_val, batch_min); the moving average starts at the first batch's range, then
/// min_val += c (batch_min - min_val) (MovingAverageMinMaxObserver::update).
QAT_HOST_DEVICE inline void update_range(float* mn, float* mx, float bmin, float bmax,
                                         float averaging_constant) {
  if (averaging_constant == 0.0f) {  // std::min / std::max of MinMaxObserver::update
    *mn = bmin < *mn ? bmin : *mn;
    *mx = *mx < bmax ? bmax : *mx;
  } else if (*mn == INFINITY && *mx == -INFINITY) {
    *mn = bmin;
    *mx = bmax;
  } else {
    *mn = moving_average(*mn, bmin, averaging_constant);
    *mx = moving_average(*mx, bmax, averaging_constant);
  }
}

/// The integer range and zero-point rule of a spec (QuantSpec on the host).
struct QRange {
  std::int64_t qmin = 0, qmax = 255;
  bool symmetric = false;
  std::int32_t symmetric_zero_point = 0;
};

/// calculate_qparams (qparams.cpp) for one range, the same float32 steps: lo = min(min, 0),
/// hi = max(max, 0); affine scale = max((hi - lo) / (qmax - qmin), eps), zero_point =
/// clamp(qmin - rint(lo / scale)); symmetric scale = max(max(-lo, hi) / ((qmax - qmin) / 2), eps).
/// Never observed (+inf, -inf): scale 1, zero point 0.
QAT_HOST_DEVICE inline void qparams_one(float mn, float mx, const QRange& r, float* scale,
                                        std::int32_t* zp) {
  constexpr float eps = 1.1920928955078125e-07f;  // kScaleEps
  if (mn == INFINITY && mx == -INFINITY) {
    *scale = 1.0f;
    *zp = 0;
    return;
  }
  const float lo = 0.0f < mn ? 0.0f : mn, hi = mx < 0.0f ? 0.0f : mx;  // std::min / std::max
  if (r.symmetric) {
    const float half_range = static_cast<float>(static_cast<double>(r.qmax - r.qmin) / 2);
    const float amax = -lo < hi ? hi : -lo;
    const float s = amax / half_range;
    *scale = s < eps ? eps : s;
    *zp = r.symmetric_zero_point;
  } else {
    const float s0 = (hi - lo) / static_cast<float>(r.qmax - r.qmin);
    const float s = s0 < eps ? eps : s0;
    *scale = s;
    // qmin - nearbyint(lo / s) in float (int64 - float), then to int64 and clamped
#ifdef __CUDA_ARCH__
    const float q = rintf(lo / s);
#else
    const float q = std::nearbyint(lo / s);
#endif
    auto z = static_cast<std::int64_t>(static_cast<float>(r.qmin) - q);
    z = z < r.qmin ? r.qmin : (z > r.qmax ? r.qmax : z);
    *zp = static_cast<std::int32_t>(z);
  }
}

/// Fake quantization of one element (kernels/cpu/fake_quant.cpp's steps): q = rint(x inv) + z,
/// *mask = [lo <= q <= hi], y = (clamp(q, lo, hi) - z) s, the clamp as selects so that NaN
/// (failing q > lo) maps to lo. inv = 1 / s, z, lo, hi as floats.
QAT_HOST_DEVICE inline float fake_quant_one(float x, float inv, float s, float z, float lo, float hi,
                                            std::uint8_t* mask) {
#ifdef __CUDA_ARCH__
  const float q = rintf(x * inv) + z;
#else
  const float q = std::nearbyint(x * inv) + z;
#endif
  *mask = static_cast<std::uint8_t>((q >= lo) & (q <= hi));
  float c = q > lo ? q : lo;
  c = c < hi ? c : hi;
  return (c - z) * s;
}

#ifdef __CUDACC__
/// Elements 4j .. 4j + 3 of x (16-byte aligned) fake-quantized with one set of parameters into y
/// and mask, or copied with mask 1 when !on: the kernels' 4-wide steps (launch.h grid_stride4).
__device__ inline void fake_quant4(const float* x, float* y, std::uint8_t* mask, std::int64_t j, bool on,
                                   float inv, float s, float z, float lo, float hi) {
  const float4 v = reinterpret_cast<const float4*>(x)[j];
  float4 r = v;
  uchar4 m = make_uchar4(1, 1, 1, 1);
  if (on) {
    r.x = fake_quant_one(v.x, inv, s, z, lo, hi, &m.x);
    r.y = fake_quant_one(v.y, inv, s, z, lo, hi, &m.y);
    r.z = fake_quant_one(v.z, inv, s, z, lo, hi, &m.z);
    r.w = fake_quant_one(v.w, inv, s, z, lo, hi, &m.w);
  }
  reinterpret_cast<float4*>(y)[j] = r;
  reinterpret_cast<uchar4*>(mask)[j] = m;
}
#endif

}  // namespace qat::quant::kernels::cuda::obs
