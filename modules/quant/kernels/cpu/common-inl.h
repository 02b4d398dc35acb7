// Per-target helpers shared by the quantization kernels (Highway's -inl.h pattern: included
// once per target from inside a kernel file's foreach_target pass, before its own region).
#if defined(QAT_QUANT_KERNELS_COMMON_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef QAT_QUANT_KERNELS_COMMON_INL_H_
#undef QAT_QUANT_KERNELS_COMMON_INL_H_
#else
#define QAT_QUANT_KERNELS_COMMON_INL_H_
#endif

#include <hwy/highway.h>

#include <cmath>
#include <cstdint>
#include <cstring>

HWY_BEFORE_NAMESPACE();
namespace qat::quant::kernels::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::ScalableTag<float>;
using DI = hn::RebindToSigned<DF>;
using DU8 = hn::Rebind<std::uint8_t, DF>;
using VF = hn::Vec<DF>;
using VI = hn::Vec<DI>;
using MF = hn::Mask<DF>;

// The generic path is Highway's SCALAR (1 lane; GCC < 12.3 disables EMU128), else 8 or 16.
constexpr std::int64_t kNF = static_cast<std::int64_t>(hn::MaxLanes(DF()));
static_assert(16 % kNF == 0, "chunk256 needs vectors of at most 16 floats");
#if HWY_TARGET == HWY_SCALAR
using DD = hn::Rebind<double, DF>;  // one double per float
constexpr std::int64_t kND = 1;
#else
using DD = hn::Repartition<double, DF>;  // a float vector's halves promote to two of these
constexpr std::int64_t kND = kNF / 2;
#endif
using VD = hn::Vec<DD>;

/// round half to even (nearbyint). EMU128's / SCALAR's Round adds 0.5 first, which rounds
/// 0.49999997 up; there: |v| < 2^23 -> copysign((|v| + 2^23) - 2^23, v), exact in round-to-nearest-even.
HWY_INLINE VF RoundEven(VF v) {
#if HWY_TARGET == HWY_EMU128 || HWY_TARGET == HWY_SCALAR
  const DF df;
  const VF big = hn::Set(df, 8388608.0f), a = hn::Abs(v);
  return hn::IfThenElse(hn::Lt(a, big), hn::CopySign(hn::Sub(hn::Add(a, big), big), v), v);
#else
  return hn::Round(v);
#endif
}

/// M = 1.5 * 2^23, the magic number of rounding by addition: fl(y + M) = M + round_half_even(y)
/// for |y| < 2^22 (the float's ulp is 1 there, and M is even), in the current rounding mode.
/// Integers added to that stay exact, and a code in [0, 255] is the float's low byte.
constexpr float kMagic = 12582912.0f;

/// a * b + c rounded once (EMU128's / SCALAR's MulAdd round twice).
HWY_INLINE VF Fma(VF a, VF b, VF c) {
#if HWY_TARGET == HWY_SCALAR
  return VF(std::fma(a.raw, b.raw, c.raw));
#elif HWY_TARGET == HWY_EMU128
  for (std::size_t i = 0; i < sizeof(a.raw) / sizeof(a.raw[0]); ++i)
    a.raw[i] = std::fma(a.raw[i], b.raw[i], c.raw[i]);
  return a;
#else
  return hn::MulAdd(a, b, c);
#endif
}

/// a * b - c rounded once.
HWY_INLINE VF Fms(VF a, VF b, VF c) {
#if HWY_TARGET == HWY_SCALAR
  return VF(std::fma(a.raw, b.raw, -c.raw));
#elif HWY_TARGET == HWY_EMU128
  for (std::size_t i = 0; i < sizeof(a.raw) / sizeof(a.raw[0]); ++i)
    a.raw[i] = std::fma(a.raw[i], b.raw[i], -c.raw[i]);
  return a;
#else
  return hn::MulSub(a, b, c);
#endif
}

/// a > b ? a : b and a < b ? a : b (NaN a or b: b; of +0 and -0: b), the semantics of x86's
/// maxps / minps (one instruction); the other targets spell them out.
#if HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
HWY_INLINE VF GtOr(VF a, VF b) { return hn::Max(a, b); }
HWY_INLINE VF LtOr(VF a, VF b) { return hn::Min(a, b); }
#else
HWY_INLINE VF GtOr(VF a, VF b) { return hn::IfThenElse(hn::Gt(a, b), a, b); }
HWY_INLINE VF LtOr(VF a, VF b) { return hn::IfThenElse(hn::Lt(a, b), a, b); }
#endif

/// The element grid of a float format (FP8, MX elements, NVFP4's E2M1) with m mantissa bits,
/// smallest normal exponent emin and largest value max: RoundToGrid(a) is a = |v| rounded to it,
/// ties to even, saturated at max. With E = max(exponent field of a, emin + 127), in place in the
/// float's bits, values there are spaced 2^(e - m): up = 2^(m - e) has exponent field
/// 254 + m - E and down = 2^(e - m) has E - m (NaN / inf: E = 255, both still normal), and
/// r = round(a up) down, exact. min(max, r) saturates (+inf too) and keeps NaN (LtOr below).
struct GridConsts {
  VF max;
  VI emin_bits, up_bits, down_bits;
};
HWY_INLINE GridConsts MakeGrid(int mantissa_bits, int min_exponent, float max) {
  const DI di;
  return {hn::Set(DF(), max), hn::Set(di, (min_exponent + 127) << 23),
          hn::Set(di, (254 + mantissa_bits) << 23), hn::Set(di, mantissa_bits << 23)};
}
HWY_INLINE VF RoundToGrid(VF a, const GridConsts& c) {
  const DF df;
  const DI di;
  const VI e = hn::Max(hn::And(hn::BitCast(di, a), hn::Set(di, 0x7f800000)), c.emin_bits);
  const VF up = hn::BitCast(df, hn::Sub(c.up_bits, e)), down = hn::BitCast(df, hn::Sub(e, c.down_bits));
  return LtOr(c.max, hn::Mul(RoundEven(hn::Mul(a, up)), down));
}

/// v is NaN (one unordered compare on x86; Highway's Ne there is ordered: false for NaN != NaN).
HWY_INLINE MF IsNan(VF v) { return hn::IsNaN(v); }

/// Four vectors of int32 lanes 0 .. 255 as 4 kNF bytes, in one store on x86 (two packs within
/// 128-bit blocks, the second unsigned, then the 4-byte groups back in order): a byte store per
/// vector made the stores the bottleneck of kernels that write a float and a mask byte per
/// element.
HWY_INLINE void StoreBytes4(const VI (&b)[4], std::uint8_t* p) {
#if HWY_TARGET == HWY_AVX2
  const __m256i v = _mm256_packus_epi16(_mm256_packs_epi32(b[0].raw, b[1].raw),
                                        _mm256_packs_epi32(b[2].raw, b[3].raw));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p),
                      _mm256_permutevar8x32_epi32(v, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
#elif HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
  // block L of v holds elements 4L .. 4L + 3 of b[0], b[1], b[2], b[3]
  const __m512i v = _mm512_packus_epi16(_mm512_packs_epi32(b[0].raw, b[1].raw),
                                        _mm512_packs_epi32(b[2].raw, b[3].raw));
  const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  _mm512_storeu_si512(p, _mm512_permutexvar_epi32(order, v));
#else
  for (int j = 0; j < 4; ++j) hn::StoreU(hn::DemoteTo(DU8(), b[j]), DU8(), p + j * kNF);
#endif
}
/// y = copysign(RoundToGrid(|v|), v) * out_scale with v = x * in_scale, or x / in_scale (kDivide:
/// FP8, NVFP4); returns mask = [|v| <= max] as int32 lanes 0 / 1.
template <bool kDivide>
HWY_INLINE VI GridStep(const float* x, float* y, VF in_scale, VF out_scale, const GridConsts& c) {
  const DF df;
  const DI di;
  const VF xv = hn::LoadU(df, x);
  const VF v = kDivide ? hn::Div(xv, in_scale) : hn::Mul(xv, in_scale), a = hn::Abs(v);
  hn::StoreU(hn::Mul(hn::CopySignToAbs(RoundToGrid(a, c), v), out_scale), df, y);
  return hn::And(hn::VecFromMask(di, hn::RebindMask(di, hn::Le(a, c.max))), hn::Set(di, 1));
}

/// Step over len elements: step(x, y) does kNF of them and returns their mask as int32 lanes
/// 0 .. 127. Whole vectors (kBatch: four at a time, their mask bytes in one store, StoreBytes4),
/// then the last partial one through buffers.
template <bool kBatch, class Step>
HWY_INLINE void MaskedRun(const float* x, float* y, std::uint8_t* m, std::int64_t len, Step step) {
  const DU8 du8;
  std::int64_t i = 0;
  for (; kBatch && i + 4 * kNF <= len; i += 4 * kNF) {
    VI b[4];
    for (int j = 0; j < 4; ++j) b[j] = step(x + i + j * kNF, y + i + j * kNF);
    StoreBytes4(b, m + i);
  }
  for (; i + kNF <= len; i += kNF) hn::StoreU(hn::DemoteTo(du8, step(x + i, y + i)), du8, m + i);
  if (kNF == 1 || i == len) return;
  float xb[kNF] = {}, yb[kNF];
  std::uint8_t mb[kNF];
  std::memcpy(xb, x + i, (len - i) * sizeof(float));
  hn::StoreU(hn::DemoteTo(du8, step(xb, yb)), du8, mb);
  std::memcpy(y + i, yb, (len - i) * sizeof(float));
  std::memcpy(m + i, mb, len - i);
}

/// GridStep over len elements (MaskedRun).
template <bool kDivide, bool kBatch>
HWY_INLINE void GridRun(const float* x, float* y, std::uint8_t* m, std::int64_t len, float in_scale,
                        float out_scale, const GridConsts& c) {
  const VF vin = hn::Set(DF(), in_scale), vout = hn::Set(DF(), out_scale);
  MaskedRun<kBatch>(x, y, m, len,
                    [&](const float* xs, float* ys) { return GridStep<kDivide>(xs, ys, vin, vout, c); });
}

/// kNF mask bytes as int32 lanes.
HWY_INLINE VI LoadBytes(const std::uint8_t* p) { return hn::PromoteTo(DI(), hn::LoadU(DU8(), p)); }

/// chunk256 (kernels.h): term j of each 16-term block goes to float32 lane j (the block's
/// kLanesV vectors); FlushLanes (once per chunk) adds the float lanes to double lanes d[j] and
/// clears them; FoldLanes combines d (l[j] += l[j + w] for w = 8, 4, 2, 1) and returns l[0].
/// The float lanes are locals of the caller's loop, so that they stay in registers.
constexpr std::int64_t kLanesV = 16 / kNF;
HWY_INLINE void FlushLanes(VF (&f)[kLanesV], double (&d)[16]) {
  for (std::int64_t k = 0; k < kLanesV; ++k) {
#if HWY_TARGET == HWY_SCALAR
    d[k] += static_cast<double>(hn::GetLane(f[k]));
#else
    const DD dd;
    const hn::Half<DF> dh;
    double* p = d + k * kNF;
    hn::StoreU(hn::Add(hn::LoadU(dd, p), hn::PromoteTo(dd, hn::LowerHalf(dh, f[k]))), dd, p);
    hn::StoreU(hn::Add(hn::LoadU(dd, p + kND), hn::PromoteTo(dd, hn::UpperHalf(dh, f[k]))), dd, p + kND);
#endif
    f[k] = hn::Zero(DF());
  }
}
inline double FoldLanes(double (&d)[16]) {
  for (int w = 8; w >= 1; w /= 2)
    for (int j = 0; j < w; ++j) d[j] += d[j + w];
  return d[0];
}

}  // namespace qat::quant::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // include guard
