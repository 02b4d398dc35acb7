// FP8 fake quantization (kernels.h fp8_fake_quant): v = x / s rounded to the format's grid
// (common-inl.h RoundToGrid), mask = [|v| <= max].
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "modules/quant/kernels/cpu/fp8.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include "framework/tensor/simd.h"
#include "modules/quant/kernels/cpu/common-inl.h"
#include "modules/quant/kernels/cpu/kernels.h"

HWY_BEFORE_NAMESPACE();
namespace qat::quant::kernels::HWY_NAMESPACE {

// v = x / s; mask = [|v| <= max]; y = copysign(min(r, max), v) s, NaN kept. Returns the mask
// as int32 lanes 0 / 1.
HWY_INLINE VI Fp8Step(const float* x, float* y, VF s, const GridConsts& c) {
  const DF df;
  const DI di;
  const VF v = hn::Div(hn::LoadU(df, x), s), a = hn::Abs(v);
  hn::StoreU(hn::Mul(hn::CopySignToAbs(RoundToGrid(a, c), v), s), df, y);
  return hn::And(hn::VecFromMask(di, hn::RebindMask(di, hn::Le(a, c.max))), hn::Set(di, 1));
}

void Fp8FakeQuant(const float* x, float* y, std::uint8_t* mask, std::int64_t n, float scale,
                  int mantissa_bits, int min_exponent, float max) {
  const VF s = hn::Set(DF(), scale);
  const GridConsts c = MakeGrid(mantissa_bits, min_exponent, max);
  std::int64_t i = 0;
  for (; i + 4 * kNF <= n; i += 4 * kNF) {  // the mask bytes of 4 vectors in one store
    VI b[4];
    for (int j = 0; j < 4; ++j) b[j] = Fp8Step(x + i + j * kNF, y + i + j * kNF, s, c);
    StoreBytes4(b, mask + i);
  }
  for (; i + kNF <= n; i += kNF)
    hn::StoreU(hn::DemoteTo(DU8(), Fp8Step(x + i, y + i, s, c)), DU8(), mask + i);
  if (kNF == 1 || i == n) return;
  float xb[kNF] = {}, yb[kNF];
  std::uint8_t mb[kNF];
  std::memcpy(xb, x + i, (n - i) * sizeof(float));
  hn::StoreU(hn::DemoteTo(DU8(), Fp8Step(xb, yb, s, c)), DU8(), mb);
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
