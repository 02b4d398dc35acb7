// Microscaling fake quantization (kernels.h mx_fake_quant, nvfp4_fake_quant). Per block: the
// block's amax in one vector pass (non-finite values flagged), its scale in scalar code exactly
// as the reference (modules/quant/mx.cpp), then the elements rounded as in fp8.cpp: binade
// exponent e = max(floor(log2 |v|), emin) from the bit pattern, r = round_half_even(|v| 2^(m-e))
// 2^(e-m), saturated at max. The last block of a row may be shorter (zero padding).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "modules/quant/kernels/cpu/mx.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "framework/tensor/simd.h"
#include "modules/quant/kernels/cpu/common-inl.h"
#include "modules/quant/kernels/cpu/kernels.h"

HWY_BEFORE_NAMESPACE();
namespace qat::quant::kernels::HWY_NAMESPACE {

struct ElemConsts {
  VF max;
  VI mbits, emin;
};

HWY_INLINE ElemConsts MakeElem(int mantissa_bits, int min_exponent, float max) {
  return {hn::Set(DF(), max), hn::Set(DI(), mantissa_bits), hn::Set(DI(), min_exponent)};
}

// |v| rounded to the element grid, saturated at max (NaN-free input).
HWY_INLINE VF RoundElem(VF a, const ElemConsts& c) {
  const DF df;
  const DI di;
  const VI bias = hn::Set(di, 127);
  const VI e = hn::Max(hn::Sub(hn::ShiftRight<23>(hn::BitCast(di, a)), bias), c.emin);
  const VI k = hn::Sub(c.mbits, e);
  const VF up = hn::BitCast(df, hn::ShiftLeft<23>(hn::Add(bias, k)));
  const VF down = hn::BitCast(df, hn::ShiftLeft<23>(hn::Sub(bias, k)));
  const VF r = hn::Mul(RoundEven(hn::Mul(a, up)), down);
  return hn::IfThenElse(hn::Lt(r, c.max), r, c.max);
}

// max |x| over len <= block values; *bad when one is NaN or +-inf.
HWY_INLINE float BlockAmax(const float* x, std::int64_t len, bool* bad) {
  const DF df;
  const VF inf = hn::Set(df, std::numeric_limits<float>::infinity());
  VF mx = hn::Zero(df), nonfinite = hn::Zero(df);
  auto step = [&](VF v) {
    const VF a = hn::Abs(v);
    nonfinite = hn::Or(nonfinite, hn::VecFromMask(df, hn::Not(hn::Lt(a, inf))));
    mx = hn::Max(mx, a);
  };
  std::int64_t i = 0;
  for (; i + kNF <= len; i += kNF) step(hn::LoadU(df, x + i));
  if (kNF > 1 && i < len) {
    float buf[kNF] = {};
    std::memcpy(buf, x + i, (len - i) * sizeof(float));
    step(hn::LoadU(df, buf));
  }
  *bad = !hn::AllFalse(df, hn::MaskFromVec(nonfinite));
  return hn::GetLane(hn::MaxOfLanes(df, mx));
}

// y = copysign(round(|v|), v) * out_scale with v = x * in_scale (MX) or x / in_scale (NVFP4);
// mask = [|v| <= max].
template <bool kDivide>
HWY_INLINE void QuantStep(const float* x, float* y, std::uint8_t* m, VF in_scale, VF out_scale,
                          const ElemConsts& c) {
  const DF df;
  const VF xv = hn::LoadU(df, x);
  const VF v = kDivide ? hn::Div(xv, in_scale) : hn::Mul(xv, in_scale), a = hn::Abs(v);
  StoreMaskBytes(hn::Le(a, c.max), m);
  hn::StoreU(hn::Mul(hn::CopySign(RoundElem(a, c), v), out_scale), df, y);
}

template <bool kDivide>
HWY_INLINE void QuantRun(const float* x, float* y, std::uint8_t* m, std::int64_t len, float in_scale,
                         float out_scale, const ElemConsts& c) {
  const DF df;
  const VF vin = hn::Set(df, in_scale), vout = hn::Set(df, out_scale);
  std::int64_t i = 0;
  for (; i + kNF <= len; i += kNF) QuantStep<kDivide>(x + i, y + i, m + i, vin, vout, c);
  if (kNF == 1 || i == len) return;
  float xb[kNF] = {}, yb[kNF];
  std::uint8_t mb[kNF];
  std::memcpy(xb, x + i, (len - i) * sizeof(float));
  QuantStep<kDivide>(xb, yb, mb, vin, vout, c);
  std::memcpy(y + i, yb, (len - i) * sizeof(float));
  std::memcpy(m + i, mb, len - i);
}

HWY_INLINE void FillNan(float* y, std::uint8_t* m, std::int64_t len) {
  std::fill(y, y + len, std::numeric_limits<float>::quiet_NaN());
  std::fill(m, m + len, std::uint8_t{0});
}

void MxFakeQuant(const float* x, float* y, std::uint8_t* mask, std::int64_t n, std::int64_t block,
                 int mantissa_bits, int min_exponent, float max, int emax) {
  const ElemConsts c = MakeElem(mantissa_bits, min_exponent, max);
  for (std::int64_t b0 = 0; b0 < n; b0 += block) {
    const std::int64_t len = std::min(block, n - b0);
    bool bad = false;
    const float amax = BlockAmax(x + b0, len, &bad);
    if (bad) {
      FillNan(y + b0, mask + b0, len);
      continue;
    }
    const int shared = mx_shared_exponent(amax, emax);
    QuantRun<false>(x + b0, y + b0, mask + b0, len, std::ldexp(1.0f, -shared), std::ldexp(1.0f, shared),
                    c);
  }
}

void Nvfp4FakeQuant(const float* x, float* y, std::uint8_t* mask, std::int64_t n, std::int64_t block,
                    float per_tensor_scale) {
  const ElemConsts c = MakeElem(1, 0, 6.0f);
  for (std::int64_t b0 = 0; b0 < n; b0 += block) {
    const std::int64_t len = std::min(block, n - b0);
    bool bad = false;
    const float amax = BlockAmax(x + b0, len, &bad);
    if (bad) {
      FillNan(y + b0, mask + b0, len);
      continue;
    }
    const float total = nvfp4_block_scale(amax, per_tensor_scale);
    QuantRun<true>(x + b0, y + b0, mask + b0, len, total, total, c);
  }
}

}  // namespace qat::quant::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace qat::quant::kernels {

HWY_EXPORT(MxFakeQuant);
HWY_EXPORT(Nvfp4FakeQuant);

void mx_fake_quant(const float* x, float* y, std::uint8_t* mask, std::int64_t n, std::int64_t block,
                   int mantissa_bits, int min_exponent, float max, int emax) {
  QAT_DISPATCH(MxFakeQuant)(x, y, mask, n, block, mantissa_bits, min_exponent, max, emax);
}

void nvfp4_fake_quant(const float* x, float* y, std::uint8_t* mask, std::int64_t n, std::int64_t block,
                      float per_tensor_scale) {
  QAT_DISPATCH(Nvfp4FakeQuant)(x, y, mask, n, block, per_tensor_scale);
}

}  // namespace qat::quant::kernels
#endif  // HWY_ONCE
