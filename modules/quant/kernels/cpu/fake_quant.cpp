// Fake quantization kernels (kernels.h): fixed qparams per tensor / per innermost channel, the
// straight-through backward and the learnable-amax (PACT-style) forward and backward.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "modules/quant/kernels/cpu/fake_quant.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include "framework/tensor/simd.h"
#include "modules/quant/kernels/cpu/common-inl.h"
#include "modules/quant/kernels/cpu/kernels.h"

HWY_BEFORE_NAMESPACE();
namespace qat::quant::kernels::HWY_NAMESPACE {

// q = round(x inv) + z;  c = clamp(q, lo, hi);  mask = [lo <= q <= hi] = [c == q];
// y = (c - z) s. The clamp is Max(q, lo) then Min(., hi): q > lo ? q : lo, c < hi ? c : hi on
// every target (see minmax.cpp Fold), so NaN maps to lo as in PyTorch, with mask 0.
HWY_INLINE void FqStep(const float* x, float* y, std::uint8_t* m, VF inv, VF s, VF z, VF lo, VF hi) {
  const DF df;
  const VF q = hn::Add(RoundEven(hn::Mul(hn::LoadU(df, x), inv)), z);
  const VF c = hn::Min(hn::Max(q, lo), hi);
  if (m != nullptr) StoreMaskBytes(hn::Eq(c, q), m);
  hn::StoreU(hn::Mul(hn::Sub(c, z), s), df, y);
}

void FakeQuant(const float* x, float* y, std::uint8_t* mask, std::int64_t n, float scale,
               std::int32_t zp, std::int64_t qmin, std::int64_t qmax) {
  const DF df;
  const VF inv = hn::Set(df, 1.0f / scale), s = hn::Set(df, scale),
           z = hn::Set(df, static_cast<float>(zp));
  const VF lo = hn::Set(df, static_cast<float>(qmin)), hi = hn::Set(df, static_cast<float>(qmax));
  std::int64_t i = 0;
  for (; i + kNF <= n; i += kNF) FqStep(x + i, y + i, mask ? mask + i : nullptr, inv, s, z, lo, hi);
  if (kNF == 1 || i == n) return;
  float xb[kNF] = {}, yb[kNF];
  std::uint8_t mb[kNF];
  std::memcpy(xb, x + i, (n - i) * sizeof(float));
  FqStep(xb, yb, mb, inv, s, z, lo, hi);
  std::memcpy(y + i, yb, (n - i) * sizeof(float));
  if (mask != nullptr) std::memcpy(mask + i, mb, n - i);
}

void FakeQuantRows(const float* x, float* y, std::uint8_t* mask, std::int64_t rows, std::int64_t cols,
                   const float* inv, const float* scale, const float* zp, std::int64_t qmin,
                   std::int64_t qmax) {
  const DF df;
  const VF lo = hn::Set(df, static_cast<float>(qmin)), hi = hn::Set(df, static_cast<float>(qmax));
  const std::int64_t full = cols / kNF * kNF;
  float ib[kNF] = {}, sb[kNF] = {}, zb[kNF] = {}, xb[kNF] = {}, yb[kNF];
  std::uint8_t mb[kNF];
  std::memcpy(ib, inv + full, (cols - full) * sizeof(float));
  std::memcpy(sb, scale + full, (cols - full) * sizeof(float));
  std::memcpy(zb, zp + full, (cols - full) * sizeof(float));
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * cols;
    float* yr = y + r * cols;
    std::uint8_t* mr = mask ? mask + r * cols : nullptr;
    for (std::int64_t c = 0; c < full; c += kNF)
      FqStep(xr + c, yr + c, mr ? mr + c : nullptr, hn::LoadU(df, inv + c), hn::LoadU(df, scale + c),
             hn::LoadU(df, zp + c), lo, hi);
    if (kNF == 1 || full == cols) continue;
    std::memcpy(xb, xr + full, (cols - full) * sizeof(float));
    FqStep(xb, yb, mb, hn::LoadU(df, ib), hn::LoadU(df, sb), hn::LoadU(df, zb), lo, hi);
    std::memcpy(yr + full, yb, (cols - full) * sizeof(float));
    if (mr != nullptr) std::memcpy(mr + full, mb, cols - full);
  }
}

HWY_INLINE void MaskedCopyStep(const float* dy, const std::uint8_t* m, float* dx) {
  const DF df;
  const DI di;
  const MF keep = hn::RebindMask(df, hn::Ne(LoadBytes(m), hn::Zero(di)));
  hn::StoreU(hn::IfThenElseZero(keep, hn::LoadU(df, dy)), df, dx);
}

void MaskedCopy(const float* dy, const std::uint8_t* mask, float* dx, std::int64_t n) {
  std::int64_t i = 0;
  for (; i + kNF <= n; i += kNF) MaskedCopyStep(dy + i, mask + i, dx + i);
  if (kNF == 1 || i == n) return;
  float gb[kNF] = {}, db[kNF];
  std::uint8_t mb[kNF] = {};
  std::memcpy(gb, dy + i, (n - i) * sizeof(float));
  std::memcpy(mb, mask + i, n - i);
  MaskedCopyStep(gb, mb, db);
  std::memcpy(dx + i, db, (n - i) * sizeof(float));
}

// g = mask ? g : 0 in place; runs of mask bytes that are all nonzero are only read.
void MaskedZero(float* g, const std::uint8_t* mask, std::int64_t n) {
  const hn::ScalableTag<std::uint8_t> d8;
  const auto n8 = static_cast<std::int64_t>(hn::Lanes(d8));
  std::int64_t i = 0;
  for (; i + n8 <= n; i += n8) {
    if (hn::AllFalse(d8, hn::Eq(hn::LoadU(d8, mask + i), hn::Zero(d8)))) continue;
    for (std::int64_t j = i; j < i + n8; j += kNF) MaskedCopyStep(g + j, mask + j, g + j);
  }
  for (; i < n; ++i)
    if (mask[i] == 0) g[i] = 0.0f;
}

struct AmaxConsts {
  VF inv, s, hi_x, lo_x, lo_cmp, lo, hi;
};

// bits: 1 = outside [lo_x, hi_x] or NaN, 2 = x >= hi_x, 4 = x <= lo_cmp (NaN when unsigned);
// y = clamp(round(clamp(x, lo_x, hi_x) inv), lo, hi) s
HWY_INLINE void AmaxStep(const float* x, float* y, std::uint8_t* m, const AmaxConsts& k) {
  const DF df;
  const DI di;
  const DU8 du8;
  const VF v = hn::LoadU(df, x);
  const MF in = hn::And(hn::Ge(v, k.lo_x), hn::Le(v, k.hi_x));
  const VI bits =
      hn::Or(hn::Or(hn::IfThenZeroElse(hn::RebindMask(di, in), hn::Set(di, 1)),
                    hn::IfThenElseZero(hn::RebindMask(di, hn::Ge(v, k.hi_x)), hn::Set(di, 2))),
             hn::IfThenElseZero(hn::RebindMask(di, hn::Le(v, k.lo_cmp)), hn::Set(di, 4)));
  hn::StoreU(hn::DemoteTo(du8, bits), du8, m);
  VF c = hn::IfThenElse(hn::Gt(v, k.lo_x), v, k.lo_x);
  c = hn::IfThenElse(hn::Lt(c, k.hi_x), c, k.hi_x);
  const VF q = RoundEven(hn::Mul(c, k.inv));
  VF qc = hn::IfThenElse(hn::Gt(q, k.lo), q, k.lo);
  qc = hn::IfThenElse(hn::Lt(qc, k.hi), qc, k.hi);
  hn::StoreU(hn::Mul(qc, k.s), df, y);
}

void AmaxForward(const float* x, float* y, std::uint8_t* mask, std::int64_t n, float amax,
                 bool is_signed, std::int64_t qmin, std::int64_t qmax) {
  const DF df;
  const float scale = amax / static_cast<float>(qmax);
  AmaxConsts k;
  k.inv = hn::Set(df, 1.0f / scale);
  k.s = hn::Set(df, scale);
  k.hi_x = hn::Set(df, amax);
  k.lo_x = hn::Set(df, is_signed ? -amax : 0.0f);
  k.lo_cmp = is_signed ? k.lo_x : hn::Set(df, __builtin_nanf(""));
  k.lo = hn::Set(df, static_cast<float>(qmin));
  k.hi = hn::Set(df, static_cast<float>(qmax));
  std::int64_t i = 0;
  for (; i + kNF <= n; i += kNF) AmaxStep(x + i, y + i, mask + i, k);
  if (kNF == 1 || i == n) return;
  float xb[kNF] = {}, yb[kNF];
  std::uint8_t mb[kNF];
  std::memcpy(xb, x + i, (n - i) * sizeof(float));
  AmaxStep(xb, yb, mb, k);
  std::memcpy(y + i, yb, (n - i) * sizeof(float));
  std::memcpy(mask + i, mb, n - i);
}

// 16 elements: dx = bit 1 ? 0 : dy; terms bit 2 ? dy : bit 4 ? -dy : 0
HWY_INLINE void AmaxBackStep16(const float* dy, const std::uint8_t* m, float* dx, Sum16& sum) {
  const DF df;
  const DI di;
  for (std::int64_t k = 0; k < 16 / kNF; ++k) {
    const VI bits = LoadBytes(m + k * kNF);
    const VF g = hn::LoadU(df, dy + k * kNF);
    const auto bit = [&](int b) {
      return hn::RebindMask(df, hn::Ne(hn::And(bits, hn::Set(di, b)), hn::Zero(di)));
    };
    hn::StoreU(hn::IfThenZeroElse(bit(1), g), df, dx + k * kNF);
    sum.Add(k, hn::IfThenElse(bit(2), g, hn::IfThenElseZero(bit(4), hn::Neg(g))));
  }
}

double AmaxBackward(const float* dy, const std::uint8_t* mask, float* dx, std::int64_t n) {
  Sum16 sum;
  std::int64_t i = 0;
  for (; i + 16 <= n; i += 16) AmaxBackStep16(dy + i, mask + i, dx + i, sum);
  if (i < n) {  // padded with zero terms
    float gb[16] = {}, db[16];
    std::uint8_t mb[16] = {};
    std::memcpy(gb, dy + i, (n - i) * sizeof(float));
    std::memcpy(mb, mask + i, n - i);
    AmaxBackStep16(gb, mb, db, sum);
    std::memcpy(dx + i, db, (n - i) * sizeof(float));
  }
  return sum.Total();
}

}  // namespace qat::quant::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace qat::quant::kernels {

HWY_EXPORT(FakeQuant);
HWY_EXPORT(FakeQuantRows);
HWY_EXPORT(MaskedCopy);
HWY_EXPORT(MaskedZero);
HWY_EXPORT(AmaxForward);
HWY_EXPORT(AmaxBackward);

void fake_quant(const float* x, float* y, std::uint8_t* mask, std::int64_t n, float scale,
                std::int32_t zp, std::int64_t qmin, std::int64_t qmax) {
  QAT_DISPATCH(FakeQuant)(x, y, mask, n, scale, zp, qmin, qmax);
}
void fake_quant_rows(const float* x, float* y, std::uint8_t* mask, std::int64_t rows, std::int64_t cols,
                     const float* inv_scale, const float* scale, const float* zp, std::int64_t qmin,
                     std::int64_t qmax) {
  QAT_DISPATCH(FakeQuantRows)(x, y, mask, rows, cols, inv_scale, scale, zp, qmin, qmax);
}
void masked_copy(const float* dy, const std::uint8_t* mask, float* dx, std::int64_t n) {
  QAT_DISPATCH(MaskedCopy)(dy, mask, dx, n);
}
void masked_zero(float* g, const std::uint8_t* mask, std::int64_t n) {
  QAT_DISPATCH(MaskedZero)(g, mask, n);
}
void amax_forward(const float* x, float* y, std::uint8_t* mask, std::int64_t n, float amax,
                  bool is_signed, std::int64_t qmin, std::int64_t qmax) {
  QAT_DISPATCH(AmaxForward)(x, y, mask, n, amax, is_signed, qmin, qmax);
}
double amax_backward(const float* dy, const std::uint8_t* mask, float* dx, std::int64_t n) {
  return QAT_DISPATCH(AmaxBackward)(dy, mask, dx, n);
}

}  // namespace qat::quant::kernels
#endif  // HWY_ONCE
