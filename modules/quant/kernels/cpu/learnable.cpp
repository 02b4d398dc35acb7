// LSQ backward (kernels.h lsq_backward): dx and the per-run scale / zero-point gradient sums in
// one pass, the per-element values in float32 in PyTorch's order, summed by pair16 (kernels.h).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "modules/quant/kernels/cpu/learnable.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include "framework/tensor/simd.h"
#include "modules/quant/kernels/cpu/common-inl.h"
#include "modules/quant/kernels/cpu/kernels.h"

HWY_BEFORE_NAMESPACE();
namespace qat::quant::kernels::HWY_NAMESPACE {

struct LsqConsts {
  VF inv, zp, s, gf, lo, hi, small, big, neg_s;
};

// q = round(fma(x, inv, zp)) (one rounding: PyTorch's vectorised kernel fuses it); NaN counts
// as below. inside: e_s = ((dy (xfq - x)) inv) gf with xfq = (q - zp) s;
// outside: e_s = (dy (qmin|qmax - zp)) gf, e_z = (dy (-s)) gf, which equals ((-dy) s) gf.
HWY_INLINE void LsqStep16(const float* x, const float* dy, float* dx, const LsqConsts& c, Pair16& ss,
                          Pair16& sz) {
  const DF df;
  VF es[16 / kNF], ez[16 / kNF];
  for (std::int64_t k = 0; k < 16 / kNF; ++k) {
    const VF xv = hn::LoadU(df, x + k * kNF), g = hn::LoadU(df, dy + k * kNF);
    const VF q = RoundEven(Fma(xv, c.inv, c.zp));
    const MF not_below = hn::Ge(q, c.lo), above = hn::Gt(q, c.hi);
    const MF inside = hn::AndNot(above, not_below);
    hn::StoreU(hn::IfThenElseZero(inside, g), df, dx + k * kNF);
    const VF xfq = hn::Mul(hn::Sub(q, c.zp), c.s);
    const VF e_in = hn::Mul(hn::Mul(hn::Mul(g, hn::Sub(xfq, xv)), c.inv), c.gf);
    const VF e_out = hn::Mul(hn::Mul(g, hn::IfThenElse(not_below, c.big, c.small)), c.gf);
    es[k] = hn::IfThenElse(inside, e_in, e_out);
    ez[k] = hn::IfThenZeroElse(inside, hn::Mul(hn::Mul(g, c.neg_s), c.gf));
  }
  ss.Add(es);
  sz.Add(ez);
}

void LsqBackward(const float* x, const float* dy, float* dx, std::int64_t n, float s, float zp,
                 std::int64_t qmin, std::int64_t qmax, float gf, double* dscale, double* dzp) {
  const DF df;
  LsqConsts c;
  c.inv = hn::Set(df, 1.0f / s);
  c.zp = hn::Set(df, zp);
  c.s = hn::Set(df, s);
  c.gf = hn::Set(df, gf);
  c.lo = hn::Set(df, static_cast<float>(qmin));
  c.hi = hn::Set(df, static_cast<float>(qmax));
  c.small = hn::Set(df, static_cast<float>(qmin) - zp);
  c.big = hn::Set(df, static_cast<float>(qmax) - zp);
  c.neg_s = hn::Set(df, -1.0f * s);
  Pair16 ss, sz;
  std::int64_t i = 0;
  for (; i + 16 <= n; i += 16) LsqStep16(x + i, dy + i, dx + i, c, ss, sz);
  if (i < n) {  // padded: x = dy = 0 gives +0 terms, which leave the (never -0) lane sums as they are
    float xb[16] = {}, gb[16] = {}, db[16];
    std::memcpy(xb, x + i, (n - i) * sizeof(float));
    std::memcpy(gb, dy + i, (n - i) * sizeof(float));
    LsqStep16(xb, gb, db, c, ss, sz);
    std::memcpy(dx + i, db, (n - i) * sizeof(float));
  }
  *dscale += ss.Total();
  *dzp += sz.Total();
}

}  // namespace qat::quant::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace qat::quant::kernels {

HWY_EXPORT(LsqBackward);

void lsq_backward(const float* x, const float* dy, float* dx, std::int64_t n, float s, float zp,
                  std::int64_t qmin, std::int64_t qmax, float gf, double* dscale, double* dzp) {
  QAT_DISPATCH(LsqBackward)(x, dy, dx, n, s, zp, qmin, qmax, gf, dscale, dzp);
}

}  // namespace qat::quant::kernels
#endif  // HWY_ONCE
