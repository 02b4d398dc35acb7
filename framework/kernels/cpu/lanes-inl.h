// Per-target vector loads and stores of a vector's first n lanes (lanes past n are neither
// read nor written), for the float kernels' row tails (Highway's -inl.h pattern: included once
// per target from inside a kernel file's foreach_target pass, before its own region).
#if defined(QAT_KERNELS_LANES_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef QAT_KERNELS_LANES_INL_H_
#undef QAT_KERNELS_LANES_INL_H_
#else
#define QAT_KERNELS_LANES_INL_H_
#endif

#include <hwy/highway.h>

#include <cstdint>

HWY_BEFORE_NAMESPACE();
namespace qat::kernels::HWY_NAMESPACE {
namespace lanes {
namespace hn = hwy::HWY_NAMESPACE;
using D = hn::ScalableTag<float>;
using V = hn::Vec<D>;
constexpr std::int64_t L = static_cast<std::int64_t>(hn::MaxLanes(D()));  // lanes per vector

#if HWY_TARGET > HWY_AVX2
using LaneMask = int;  // EMU128's MaskedLoad reads the whole vector: copy n lanes instead
inline LaneMask lane_mask(std::int64_t n) { return static_cast<int>(n); }
inline V load_masked(LaneMask n, const float* p) {
  alignas(16) float buf[L] = {};
  for (int i = 0; i < n; ++i) buf[i] = p[i];
  return hn::Load(D(), buf);
}
inline void store_masked(V v, LaneMask n, float* p) {
  alignas(16) float buf[L];
  hn::Store(v, D(), buf);
  for (int i = 0; i < n; ++i) p[i] = buf[i];
}
#else
using LaneMask = hn::Mask<D>;
inline LaneMask lane_mask(std::int64_t n) { return hn::FirstN(D(), static_cast<size_t>(n)); }
inline V load_masked(LaneMask m, const float* p) { return hn::MaskedLoad(m, D(), p); }
#if HWY_TARGET == HWY_AVX2
// vmaskmovps stores are slow on AMD (microcoded): store n < 8 lanes as 4 + 2 + 1.
inline void store_partial(V v, std::int64_t n, float* p) {
  __m128 x = _mm256_castps256_ps128(v.raw);
  if (n & 4) {
    _mm_storeu_ps(p, x);
    x = _mm256_extractf128_ps(v.raw, 1);
    p += 4;
  }
  if (n & 2) {
    _mm_storel_pi(reinterpret_cast<__m64*>(p), x);
    x = _mm_movehl_ps(x, x);
    p += 2;
  }
  if (n & 1) _mm_store_ss(p, x);
}
#endif
inline void store_masked(V v, LaneMask m, float* p) { hn::BlendedStore(v, m, D(), p); }
#endif

}  // namespace lanes
}  // namespace qat::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // include guard
