// Per-target vector loads and stores of a vector's first n lanes (lanes past n are neither
// read nor written), for the float kernels' row tails, and an L x L transpose of L vectors
// (Highway's -inl.h pattern: included once per target from inside a kernel file's
// foreach_target pass, before its own region).
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

#if HWY_TARGET <= HWY_AVX3 || HWY_TARGET == HWY_AVX2
// r[i][j] <-> r[j][i]: an L x L block of floats in L registers, by the usual unpack / shuffle
// stages (64 shuffles for 16 x 16, 24 for 8 x 8)
#if HWY_TARGET <= HWY_AVX3
HWY_INLINE void transpose(V* r) {
  __m512 t[16], u[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_ps(r[i].raw, r[i + 1].raw);
    t[i + 1] = _mm512_unpackhi_ps(r[i].raw, r[i + 1].raw);
  }
  for (int i = 0; i < 16; i += 4)
    for (int k = 0; k < 2; ++k) {
      const __m512d a = _mm512_castps_pd(t[i + k]), b = _mm512_castps_pd(t[i + k + 2]);
      u[i + 2 * k] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, b));
      u[i + 2 * k + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, b));
    }
  // u[4q + k]: 128-bit block b of it holds rows 4q..4q+3 of column 4b + k
  for (int i = 0; i < 16; i += 8)
    for (int k = 0; k < 4; ++k) {
      t[i + k] = _mm512_shuffle_f32x4(u[i + k], u[i + k + 4], 0x88);      // blocks 0, 2 | 0, 2
      t[i + k + 4] = _mm512_shuffle_f32x4(u[i + k], u[i + k + 4], 0xdd);  // blocks 1, 3 | 1, 3
    }
  for (int k = 0; k < 8; ++k) {
    r[k].raw = _mm512_shuffle_f32x4(t[k], t[k + 8], 0x88);
    r[k + 8].raw = _mm512_shuffle_f32x4(t[k], t[k + 8], 0xdd);
  }
}
#else
HWY_INLINE void transpose(V* r) {
  __m256 t[8], u[8];
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_ps(r[i].raw, r[i + 1].raw);
    t[i + 1] = _mm256_unpackhi_ps(r[i].raw, r[i + 1].raw);
  }
  for (int i = 0; i < 8; i += 4)
    for (int k = 0; k < 2; ++k) {
      u[i + 2 * k] = _mm256_shuffle_ps(t[i + k], t[i + k + 2], 0x44);
      u[i + 2 * k + 1] = _mm256_shuffle_ps(t[i + k], t[i + k + 2], 0xee);
    }
  for (int k = 0; k < 4; ++k) {
    r[k].raw = _mm256_permute2f128_ps(u[k], u[k + 4], 0x20);
    r[k + 4].raw = _mm256_permute2f128_ps(u[k], u[k + 4], 0x31);
  }
}
#endif
#else
HWY_INLINE void transpose(V* r) {  // through memory (EMU128, SCALAR)
  float in[L * L], out[L * L];
  for (std::int64_t i = 0; i < L; ++i) hn::StoreU(r[i], D(), in + i * L);
  for (std::int64_t i = 0; i < L; ++i)
    for (std::int64_t j = 0; j < L; ++j) out[j * L + i] = in[i * L + j];
  for (std::int64_t i = 0; i < L; ++i) r[i] = hn::LoadU(D(), out + i * L);
}
#endif

}  // namespace lanes
}  // namespace qat::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // include guard
