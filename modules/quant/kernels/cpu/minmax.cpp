// Observer min / max (kernels.h min_max, min_max_rows): one read of the tensor, NaN skipped by
// strict compares and reported with +-inf.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "modules/quant/kernels/cpu/minmax.cpp"
#include <algorithm>
#include <cmath>
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include "framework/tensor/simd.h"
#include "modules/quant/kernels/cpu/common-inl.h"
#include "modules/quant/kernels/cpu/kernels.h"

HWY_BEFORE_NAMESPACE();
namespace qat::quant::kernels::HWY_NAMESPACE {

// lo = v < lo ? v : lo, hi = v > hi ? v : hi (so NaN never enters): Min(v, lo) / Max(v, hi) in
// this operand order are exactly that on every target (x86 minps / maxps return the second
// operand when unordered or equal; Highway's scalar Min / Max return the non-NaN one)
HWY_INLINE void Fold(VF v, VF& lo, VF& hi, MF& nan) {
  lo = hn::Min(v, lo);
  hi = hn::Max(v, hi);
  nan = hn::Or(nan, IsNan(v));
}

// The signs of a zero minimum or maximum, from the same read: with min == 0 no value is below
// zero, so a set sign bit anywhere (the OR of all bits) is a -0; with max == 0 a clear sign bit
// anywhere (the AND of all bits) is a +0. (A NaN's sign bit may answer wrongly; a NaN is
// reported as bad anyway.)
struct Signs {
  VF any, all;                     // the OR and the AND of all bits
  bool neg = false, pos = false;  // the scalar tail's sign bits
  HWY_INLINE Signs() : any(hn::Zero(DF())), all(hn::BitCast(DF(), hn::Set(DI(), -1))) {}
  HWY_INLINE void Fold(VF v) { any = hn::Or(any, v), all = hn::And(all, v); }
  HWY_INLINE void Fold(float v) { (std::signbit(v) ? neg : pos) = true; }
  // a = the minimum, b = the maximum: a zero one gets its sign
  HWY_INLINE void Fix(float& a, float& b) const {
    const DI di;
    if (a == 0) a = neg || !hn::AllFalse(di, hn::Lt(hn::BitCast(di, any), hn::Zero(di))) ? -0.0f : 0.0f;
    if (b == 0) b = pos || !hn::AllTrue(di, hn::Lt(hn::BitCast(di, all), hn::Zero(di))) ? 0.0f : -0.0f;
  }
};

// Min / max are exact, so 4 independent accumulators (no serial dependency) give the same value
// in any order, up to the sign of a zero result: Signs fixes that, -0 below +0 (a ReLU's output
// has a zero minimum).
void MinMax(const float* x, std::int64_t n, float* mn, float* mx, bool* bad) {
  const DF df;
  constexpr float inf = __builtin_inff();
  VF lo[4], hi[4];
  MF nan = hn::FirstN(df, 0);
  for (int j = 0; j < 4; ++j) {
    lo[j] = hn::Set(df, inf);
    hi[j] = hn::Set(df, -inf);
  }
  std::int64_t i = 0;
  Signs signs;
  for (; i + 4 * kNF <= n; i += 4 * kNF)
    for (int j = 0; j < 4; ++j) {
      const VF v = hn::LoadU(df, x + i + j * kNF);
      Fold(v, lo[j], hi[j], nan);
      signs.Fold(v);
    }
  for (; i + kNF <= n; i += kNF) {
    const VF v = hn::LoadU(df, x + i);
    Fold(v, lo[0], hi[0], nan);
    signs.Fold(v);
  }
  for (int j = 1; j < 4; ++j) {
    lo[0] = hn::IfThenElse(hn::Lt(lo[j], lo[0]), lo[j], lo[0]);
    hi[0] = hn::IfThenElse(hn::Gt(hi[j], hi[0]), hi[j], hi[0]);
  }
  float l[kNF], h[kNF];
  hn::StoreU(lo[0], df, l);
  hn::StoreU(hi[0], df, h);
  bool any = !hn::AllFalse(df, nan);
  float a = inf, b = -inf;
  for (std::int64_t j = 0; j < kNF; ++j) {
    a = l[j] < a ? l[j] : a;
    b = h[j] > b ? h[j] : b;
  }
  for (; i < n; ++i) {  // the tail
    const float v = x[i];
    a = v < a ? v : a;
    b = v > b ? v : b;
    any = any || v != v;
    signs.Fold(v);
  }
  signs.Fix(a, b);
  *mn = a;
  *mx = b;
  *bad = *bad || any || a == -inf || b == inf;
}

// Each of `runs` runs of n: MinMax with the lanes reduced in registers (no NaN reaches the
// accumulators, so any order gives the same value; a zero's sign is fixed as in MinMax).
void MinMaxRuns(const float* x, std::int64_t runs, std::int64_t n, float* mn, float* mx, bool* bad) {
  const DF df;
  constexpr float inf = __builtin_inff();
  MF nan = hn::FirstN(df, 0);
  bool any = false;
  for (std::int64_t r = 0; r < runs; ++r) {
    const float* xr = x + r * n;
    VF lo[4], hi[4];
    for (int j = 0; j < 4; ++j) {
      lo[j] = hn::Set(df, inf);
      hi[j] = hn::Set(df, -inf);
    }
    Signs signs;
    std::int64_t i = 0;
    for (; i + 4 * kNF <= n; i += 4 * kNF) {
      // a weight comes from L3 at the start of a step: fetch 4 KB ahead, across the rows
      for (std::int64_t b = 0; b < 4 * kNF; b += 16)  // a 64-byte line per 16 floats
        if (4 * kNF >= 16 || i % 16 == 0) __builtin_prefetch(xr + i + b + 1024);
      for (int j = 0; j < 4; ++j) {
        const VF v = hn::LoadU(df, xr + i + j * kNF);
        Fold(v, lo[j], hi[j], nan);
        signs.Fold(v);
      }
    }
    for (; i + kNF <= n; i += kNF) {
      const VF v = hn::LoadU(df, xr + i);
      Fold(v, lo[0], hi[0], nan);
      signs.Fold(v);
    }
    const VF l = hn::Min(hn::Min(lo[0], lo[1]), hn::Min(lo[2], lo[3]));
    const VF h = hn::Max(hn::Max(hi[0], hi[1]), hn::Max(hi[2], hi[3]));
    float a = hn::GetLane(hn::MinOfLanes(df, l)), b = hn::GetLane(hn::MaxOfLanes(df, h));
    for (; i < n; ++i) {  // the tail
      const float v = xr[i];
      a = v < a ? v : a;
      b = v > b ? v : b;
      any = any || v != v;
      signs.Fold(v);
    }
    signs.Fix(a, b);
    mn[r] = a;
    mx[r] = b;
    any = any || a == -inf || b == inf;
  }
  *bad = *bad || any || !hn::AllFalse(df, nan);
}

void MinMaxRows(const float* x, std::int64_t rows, std::int64_t cols, float* mn, float* mx, bool* bad) {
  const DF df;
  constexpr float inf = __builtin_inff();
  MF nan = hn::FirstN(df, 0);
  bool any = false;
  const std::int64_t full = cols / kNF * kNF;
  // columns in blocks of 4 vectors held in registers over all rows, then single vectors
  std::int64_t c = 0;
  for (; c + 4 * kNF <= full; c += 4 * kNF) {
    VF lo[4], hi[4];
    for (int j = 0; j < 4; ++j) {
      lo[j] = hn::LoadU(df, mn + c + j * kNF);
      hi[j] = hn::LoadU(df, mx + c + j * kNF);
    }
    for (std::int64_t r = 0; r < rows; ++r)
      for (int j = 0; j < 4; ++j) Fold(hn::LoadU(df, x + r * cols + c + j * kNF), lo[j], hi[j], nan);
    for (int j = 0; j < 4; ++j) {
      hn::StoreU(lo[j], df, mn + c + j * kNF);
      hn::StoreU(hi[j], df, mx + c + j * kNF);
    }
  }
  for (; c < full; c += kNF) {
    VF lo = hn::LoadU(df, mn + c), hi = hn::LoadU(df, mx + c);
    for (std::int64_t r = 0; r < rows; ++r) Fold(hn::LoadU(df, x + r * cols + c), lo, hi, nan);
    hn::StoreU(lo, df, mn + c);
    hn::StoreU(hi, df, mx + c);
  }
  for (std::int64_t r = 0; r < rows; ++r)
    for (c = full; c < cols; ++c) {
      const float v = x[r * cols + c];
      mn[c] = v < mn[c] ? v : mn[c];
      mx[c] = v > mx[c] ? v : mx[c];
      any = any || v != v;
    }
  any = any || !hn::AllFalse(df, nan);
  for (c = 0; c < cols; ++c) any = any || mn[c] == -inf || mx[c] == inf;
  *bad = *bad || any;
}

}  // namespace qat::quant::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace qat::quant::kernels {

HWY_EXPORT(MinMax);
HWY_EXPORT(MinMaxRows);
HWY_EXPORT(MinMaxRuns);

void min_max(const float* x, std::int64_t n, float* mn, float* mx, bool* bad) {
  QAT_DISPATCH(MinMax)(x, n, mn, mx, bad);
}
void min_max_rows(const float* x, std::int64_t rows, std::int64_t cols, float* mn, float* mx,
                  bool* bad) {
  QAT_DISPATCH(MinMaxRows)(x, rows, cols, mn, mx, bad);
}
void min_max_runs(const float* x, std::int64_t runs, std::int64_t n, float* mn, float* mx, bool* bad) {
  QAT_DISPATCH(MinMaxRuns)(x, runs, n, mn, mx, bad);
}

}  // namespace qat::quant::kernels
#endif  // HWY_ONCE
