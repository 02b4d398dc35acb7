// LSQ backward (kernels.h lsq_backward): dx and the per-run scale / zero-point gradient sums in
// one pass, three float32 terms per element summed by chunk256 (kernels.h). Blocks of 16 whose x
// all lie inside the range skip the masks and outside terms (a branch per block), unless outside
// elements have been frequent lately; then every block is masked (Mode). The same bits either way.
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
  VF inv, zp, s, lo, hi, gf, small, big, neg_s, x_lo, x_hi;
};

// q = round(fma(x, inv, zp)) and r = fma(q - zp, s, -x), one rounding each as in PyTorch's
// kernel on AVX2 / AVX-512 (kernels.h), NaN below. Terms (kernels.h): a += dy r inside, as
// fma(dy, r, a); outside b = (dy (qmin|qmax - zp)) gf and z = (dy (-s)) gf, which equals
// ((-dy) s) gf. The float lanes are locals of the loop, so that they stay in registers
// (chunk256's double lanes go to memory once per chunk).
using Lanes = VF[kLanesV];

// Floats in their order as integers (-0 and +0 both 0; -inf .. +inf = -0x7f800000 .. 0x7f800000).
HWY_INLINE std::int64_t FloatOrder(float f) {
  std::int32_t b;
  std::memcpy(&b, &f, 4);
  return b >= 0 ? b : -(b & 0x7fffffff);
}
HWY_INLINE float FloatOfOrder(std::int64_t o) {
  const std::uint32_t b =
      o >= 0 ? static_cast<std::uint32_t>(o) : 0x80000000u | static_cast<std::uint32_t>(-o);
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}

// c.x_lo, c.x_hi: an interval of x whose q is inside (q is monotone in x, and q(0) = zp is inside
// for the ops' zero points; else the interval is empty). The ends are estimated as
// (qmin|qmax -+ 1/2 - zp) s, moved 4 floats inward, checked with this path's q and moved further
// in (doubling) until the check holds: two evaluations of q as a rule. An inner interval, not the
// exact one: a block with an x in the sliver left out takes the masked path, the same bits.
void SetInsideRange(LsqConsts& c, float s, float zp, float qmin, float qmax) {
  const auto q = [&](std::int64_t o) {
    return hn::GetLane(RoundEven(Fma(hn::Set(DF(), FloatOfOrder(o)), c.inv, c.zp)));
  };
  const std::int64_t lo0 = FloatOrder((qmin - 0.5f - zp) * s), hi0 = FloatOrder((qmax + 0.5f - zp) * s);
  std::int64_t lo = lo0, hi = hi0;
  for (std::int64_t step = 4; (lo = std::min<std::int64_t>(lo0 + step, 0)) < 0 && !(q(lo) >= qmin);
       step *= 2) {
  }
  for (std::int64_t step = 4; (hi = std::max<std::int64_t>(hi0 - step, 0)) > 0 && !(q(hi) <= qmax);
       step *= 2) {
  }
  const bool checked = q(lo) >= qmin && q(hi) <= qmax;  // else zp is outside: no interval
  c.x_lo = hn::Set(DF(), checked ? FloatOfOrder(lo) : __builtin_inff());
  c.x_hi = hn::Set(DF(), checked ? FloatOfOrder(hi) : -__builtin_inff());
}

// Every x of the block in [c.x_lo, c.x_hi], the x whose q is inside (SetInsideRange), NaN
// not; on x, so that a branch on it does not wait for the rounding. Two vectors (AVX2): a min /
// max of the two and two compares; LtOr / GtOr return their second operand for NaN, so a NaN in
// x[1] reaches `mx` and a NaN in x[0] reaches `mn`. Otherwise two compares per vector.
HWY_INLINE bool AllInside(const VF (&x)[kLanesV], const LsqConsts& c) {
  const DF df;
  if constexpr (kLanesV == 2) {
    const VF mn = LtOr(x[1], x[0]), mx = GtOr(x[0], x[1]);
    return hn::AllTrue(df, hn::And(hn::Ge(mn, c.x_lo), hn::Le(mx, c.x_hi)));
  } else {
    MF ok = hn::And(hn::Ge(x[0], c.x_lo), hn::Le(x[0], c.x_hi));
    for (std::int64_t k = 1; k < kLanesV; ++k)
      ok = hn::And(ok, hn::And(hn::Ge(x[k], c.x_lo), hn::Le(x[k], c.x_hi)));
    return hn::AllTrue(df, ok);
  }
}

// A block with every element inside: no masks, no outside terms (b / z would get +0, and +0
// added to a float lane, which is never -0, changes nothing).
HWY_INLINE void InsideBlock(const VF (&xv)[kLanesV], const float* dy, float* dx, const LsqConsts& c,
                            Lanes& a) {
  const DF df;
  for (std::int64_t k = 0; k < kLanesV; ++k) {
    const VF g = hn::LoadU(df, dy + k * kNF);
    hn::StoreU(g, df, dx + k * kNF);
    const VF q = RoundEven(Fma(xv[k], c.inv, c.zp));
    a[k] = Fma(g, Fms(hn::Sub(q, c.zp), c.s, xv[k]), a[k]);
  }
}

// Vector k of a block (lanes k * kNF ..), every term masked; the same bits as InsideBlock where
// all are inside. Returns whether some element was outside. The masked path takes vector k of
// every block of a chunk, then the next k: three float lanes live at a time, where all six and
// the constants would not fit AVX2's 16 registers (spilled, they made this path 1.11x slower:
// 285 us against 257 on 2^20 floats, 10% outside, AVX2).
HWY_INLINE bool MaskedPart(VF x, const float* dy, float* dx, const LsqConsts& c, VF& a, VF& b, VF& z) {
  const DF df;
  const VF q = RoundEven(Fma(x, c.inv, c.zp));
  const MF not_below = hn::Ge(q, c.lo), inside = hn::And(not_below, hn::Le(q, c.hi));
  const VF g = hn::LoadU(df, dy);
  const VF gm = hn::IfThenElseZero(inside, g);
  hn::StoreU(gm, df, dx);
  const VF r = Fms(hn::Sub(q, c.zp), c.s, x);
  a = Fma(gm, hn::IfThenElseZero(inside, r), a);  // r is NaN at x = +-inf: masked; 0 0 adds +0
  const VF e_out = hn::Mul(hn::Mul(g, hn::IfThenElse(not_below, c.big, c.small)), c.gf);
  b = hn::Add(b, hn::IfThenZeroElse(inside, e_out));
  z = hn::Add(z, hn::IfThenZeroElse(inside, hn::Mul(hn::Mul(g, c.neg_s), c.gf)));
  return !hn::AllTrue(df, inside);
}

// Any block, every term masked (MaskedPart for each vector).
HWY_INLINE bool MaskedBlock(const float* x, const float* dy, float* dx, const LsqConsts& c, Lanes& a,
                            Lanes& b, Lanes& z) {
  bool outside = false;
  for (std::int64_t k = 0; k < kLanesV; ++k)
    outside |= MaskedPart(hn::LoadU(DF(), x + k * kNF), dy + k * kNF, dx + k * kNF, c, a[k], b[k], z[k]);
  return outside;
}

// Which blocks take InsideBlock: a branch per block is fastest while outside elements are rare
// (a learned scale), but each such block mispredicts, and from ~1.6% of elements outside (a
// quarter of the blocks) that costs more than masking every block (the CPU here: 2x more at 6%).
// So each step of 128 elements picks, by a moving average over ~8 steps of the blocks per step
// that had an element outside: per-block branches, or every block masked. The same bits.
struct Mode {
  std::int32_t avg64 = 0;  // 64 x that average
  bool masked = false;
  void update(std::int32_t outside_blocks) {
    avg64 += 8 * outside_blocks - avg64 / 8;
    masked = masked ? avg64 >= kBackBelow : avg64 > kMaskAbove;
  }
  static constexpr std::int32_t kMaskAbove = 144, kBackBelow = 120;  // 2.25 and 1.9 blocks
};

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
  SetInsideRange(c, s, zp, static_cast<float>(qmin), static_cast<float>(qmax));
  double da[16] = {}, db[16] = {}, dz[16] = {};  // chunk256's double lanes
  Lanes a, b, z;
  for (std::int64_t k = 0; k < kLanesV; ++k) a[k] = b[k] = z[k] = hn::Zero(df);
  Mode mode;
  bool any_outside = false;                             // in the chunk (256 elements) so far
  for (std::int64_t step = 0; step < n; step += 128) {  // the mode's steps, two per chunk
    const std::int64_t end = std::min(n, step + 128);
    std::int32_t outside = 0;  // blocks with an element outside
    std::int64_t i = step;
    VF xv[kLanesV];
    if (mode.masked) {
      const std::int64_t full = step + (end - step) / 16 * 16;
      std::uint32_t blocks = 0;  // bit t: block t has an element outside
      for (std::int64_t k = 0; k < kLanesV; ++k)
        for (std::int64_t t = 0; step + 16 * t < full; ++t) {
          const std::int64_t at = step + 16 * t + k * kNF;
          blocks |= static_cast<std::uint32_t>(
                        MaskedPart(hn::LoadU(df, x + at), dy + at, dx + at, c, a[k], b[k], z[k]))
                    << t;
        }
      outside = __builtin_popcount(blocks);
      i = full;
    } else {
      for (; i + 16 <= end; i += 16) {
        for (std::int64_t k = 0; k < kLanesV; ++k) xv[k] = hn::LoadU(df, x + i + k * kNF);
        if (HWY_LIKELY(AllInside(xv, c))) {
          InsideBlock(xv, dy + i, dx + i, c, a);
        } else {
          MaskedBlock(x + i, dy + i, dx + i, c, a, b, z);
          ++outside;
        }
      }
    }
    if (i < end) {  // padded: x = dy = 0 gives +0 terms
      float xp[16] = {}, gp[16] = {}, dxp[16];
      std::memcpy(xp, x + i, (end - i) * sizeof(float));
      std::memcpy(gp, dy + i, (end - i) * sizeof(float));
      outside += MaskedBlock(xp, gp, dxp, c, a, b, z);
      std::memcpy(dx + i, dxp, (end - i) * sizeof(float));
    }
    any_outside |= outside > 0;
    mode.update(outside);
    if (step % 256 == 128 || end == n) {  // the chunk's end
      FlushLanes(a, da);
      if (any_outside) {  // else their float lanes are all +0
        FlushLanes(b, db);
        FlushLanes(z, dz);
      }
      any_outside = false;
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
