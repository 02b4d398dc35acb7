// LSQ backward (kernels.h lsq_backward): dx and the per-run scale / zero-point gradient sums in
// one pass, three float32 terms per element summed by chunk128 (kernels.h).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "modules/quant/kernels/cpu/learnable.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <algorithm>

#include "framework/tensor/simd.h"
#include "modules/quant/kernels/cpu/common-inl.h"
#include "modules/quant/kernels/cpu/kernels.h"

HWY_BEFORE_NAMESPACE();
namespace qat::quant::kernels::HWY_NAMESPACE {

struct LsqConsts {
  VF inv, zp, s, lo, hi, gf, small, big, neg_s;
};

// q = round(fma(x, inv, zp)) (one rounding: PyTorch's vectorised kernel fuses it), NaN below.
// Terms (kernels.h): a = dy ((q - zp) s - x) inside; outside b = (dy (qmin|qmax - zp)) gf and
// z = (dy (-s)) gf, which equals ((-dy) s) gf. A block with every q inside (the common case
// once the scale has been learned) skips the outside terms and adds no b / z (+0 to a float
// lane, which is never -0, changes nothing). The float lanes are locals of the loop, so that
// they stay in registers (chunk128's double lanes go to memory once per chunk).
using Lanes = VF[kLanesV];

HWY_INLINE void LsqStep16(const float* x, const float* dy, float* dx, const LsqConsts& c, Lanes& a,
                          Lanes& b, Lanes& z, bool& outside) {
  constexpr std::int64_t kV = kLanesV;
  const DF df;
  VF q[kV], ta[kV];
  MF all_inside, not_below[kV], inside[kV];
  for (std::int64_t k = 0; k < kV; ++k) {
    q[k] = RoundEven(Fma(hn::LoadU(df, x + k * kNF), c.inv, c.zp));
    not_below[k] = hn::Ge(q[k], c.lo);
    inside[k] = hn::And(not_below[k], hn::Le(q[k], c.hi));
    all_inside = k == 0 ? inside[k] : hn::And(all_inside, inside[k]);
  }
  if (hn::AllTrue(df, all_inside)) {
    for (std::int64_t k = 0; k < kV; ++k) {
      const VF g = hn::LoadU(df, dy + k * kNF);
      hn::StoreU(g, df, dx + k * kNF);
      const VF r = hn::Sub(hn::Mul(hn::Sub(q[k], c.zp), c.s), hn::LoadU(df, x + k * kNF));
      ta[k] = hn::Mul(g, r);
    }
    for (std::int64_t k = 0; k < kV; ++k) a[k] = hn::Add(a[k], ta[k]);
    return;
  }
  VF tb[kV], tz[kV];
  for (std::int64_t k = 0; k < kV; ++k) {
    const VF g = hn::LoadU(df, dy + k * kNF);
    hn::StoreU(hn::IfThenElseZero(inside[k], g), df, dx + k * kNF);
    const VF r = hn::Sub(hn::Mul(hn::Sub(q[k], c.zp), c.s), hn::LoadU(df, x + k * kNF));
    ta[k] = hn::IfThenElseZero(inside[k], hn::Mul(g, r));  // r is NaN at x = +-inf: masked
    const VF e_out = hn::Mul(hn::Mul(g, hn::IfThenElse(not_below[k], c.big, c.small)), c.gf);
    tb[k] = hn::IfThenZeroElse(inside[k], e_out);
    tz[k] = hn::IfThenZeroElse(inside[k], hn::Mul(hn::Mul(g, c.neg_s), c.gf));
  }
  for (std::int64_t k = 0; k < kV; ++k) {
    a[k] = hn::Add(a[k], ta[k]);
    b[k] = hn::Add(b[k], tb[k]);
    z[k] = hn::Add(z[k], tz[k]);
  }
  outside = true;
}

void LsqBackward(const float* x, const float* dy, float* dx, std::int64_t n, float s, float zp,
                 std::int64_t qmin, std::int64_t qmax, float gf, double* dscale, double* dzp) {
  const DF df;
  LsqConsts c;
  c.inv = hn::Set(df, 1.0f / s);
  c.zp = hn::Set(df, zp);
  c.s = hn::Set(df, s);
  c.lo = hn::Set(df, static_cast<float>(qmin));
  c.hi = hn::Set(df, static_cast<float>(qmax));
  c.gf = hn::Set(df, gf);
  c.small = hn::Set(df, static_cast<float>(qmin) - zp);
  c.big = hn::Set(df, static_cast<float>(qmax) - zp);
  c.neg_s = hn::Set(df, -1.0f * s);
  double da[16] = {}, db[16] = {}, dz[16] = {};  // chunk128's double lanes
  Lanes a, b, z;
  for (std::int64_t k = 0; k < kLanesV; ++k) a[k] = b[k] = z[k] = hn::Zero(df);
  for (std::int64_t chunk = 0; chunk < n; chunk += 128) {
    const std::int64_t end = std::min(n, chunk + 128);
    bool outside = false;
    std::int64_t i = chunk;
    for (; i + 16 <= end; i += 16) LsqStep16(x + i, dy + i, dx + i, c, a, b, z, outside);
    if (i < end) {  // padded: x = dy = 0 gives +0 terms
      float xp[16] = {}, gp[16] = {}, dxp[16];
      std::memcpy(xp, x + i, (end - i) * sizeof(float));
      std::memcpy(gp, dy + i, (end - i) * sizeof(float));
      LsqStep16(xp, gp, dxp, c, a, b, z, outside);
      std::memcpy(dx + i, dxp, (end - i) * sizeof(float));
    }
    FlushLanes(a, da);
    if (outside) {  // else their float lanes are all +0
      FlushLanes(b, db);
      FlushLanes(z, dz);
    }
  }
  lsq_combine(FoldLanes(da), FoldLanes(db), FoldLanes(dz), s, gf, dscale, dzp);
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
