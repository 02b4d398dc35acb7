// FP8 fake quantization (kernels.h fp8_fake_quant). The binade exponent e = max(floor(log2 |v|),
// emin) comes from the bit pattern; values there are spaced 2^(e - m), so with up = 2^(m - e),
// down = 2^(e - m) (exact powers of two): r = round_half_even(|v| up) down.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "modules/quant/kernels/cpu/fp8.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include "framework/tensor/simd.h"
#include "modules/quant/kernels/cpu/common-inl.h"
#include "modules/quant/kernels/cpu/kernels.h"

HWY_BEFORE_NAMESPACE();
namespace qat::quant::kernels::HWY_NAMESPACE {

struct Fp8Consts {
  VF s, max;
  VI mbits, emin;
};

// v = x / s; mask = [|v| <= max]; y = copysign(min(r, max), v) s, NaN kept
HWY_INLINE void Fp8Step(const float* x, float* y, std::uint8_t* m, const Fp8Consts& c) {
  const DF df;
  const DI di;
  const VF v = hn::Div(hn::LoadU(df, x), c.s), a = hn::Abs(v);
  StoreMaskBytes(hn::Le(a, c.max), m);
  const VI bias = hn::Set(di, 127);
  const VI e = hn::Max(hn::Sub(hn::ShiftRight<23>(hn::BitCast(di, a)), bias), c.emin);
  const VI k = hn::Sub(c.mbits, e);
  const VF up = hn::BitCast(df, hn::ShiftLeft<23>(hn::Add(bias, k)));
  const VF down = hn::BitCast(df, hn::ShiftLeft<23>(hn::Sub(bias, k)));
  VF r = hn::Mul(RoundEven(hn::Mul(a, up)), down);
  r = hn::IfThenElse(hn::Lt(r, c.max), r, c.max);  // saturate (also +inf)
  r = hn::IfThenElse(IsNan(a), a, r);              // NaN stays NaN
  hn::StoreU(hn::Mul(hn::CopySign(r, v), c.s), df, y);
}

void Fp8FakeQuant(const float* x, float* y, std::uint8_t* mask, std::int64_t n, float scale,
                  int mantissa_bits, int min_exponent, float max) {
  const DF df;
  const DI di;
  Fp8Consts c;
  c.s = hn::Set(df, scale);
  c.max = hn::Set(df, max);
  c.mbits = hn::Set(di, mantissa_bits);
  c.emin = hn::Set(di, min_exponent);
  std::int64_t i = 0;
  for (; i + kNF <= n; i += kNF) Fp8Step(x + i, y + i, mask + i, c);
  if (kNF == 1 || i == n) return;
  float xb[kNF] = {}, yb[kNF];
  std::uint8_t mb[kNF];
  std::memcpy(xb, x + i, (n - i) * sizeof(float));
  Fp8Step(xb, yb, mb, c);
  std::memcpy(y + i, yb, (n - i) * sizeof(float));
  std::memcpy(mask + i, mb, n - i);
}

}  // namespace qat::quant::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace qat::quant::kernels {

HWY_EXPORT(Fp8FakeQuant);

void fp8_fake_quant(const float* x, float* y, std::uint8_t* mask, std::int64_t n, float scale,
                    int mantissa_bits, int min_exponent, float max) {
  QAT_DISPATCH(Fp8FakeQuant)(x, y, mask, n, scale, mantissa_bits, min_exponent, max);
}

}  // namespace qat::quant::kernels
#endif  // HWY_ONCE
