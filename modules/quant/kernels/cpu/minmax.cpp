// Observer min / max (kernels.h min_max, min_max_rows): one read of the tensor, NaN skipped by
// strict compares and reported with +-inf.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "modules/quant/kernels/cpu/minmax.cpp"
#include <algorithm>
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

// Whether x holds a -0 and a +0 (bit patterns 0x80000000 and 0), vectorised; stops once both
// are seen. A ReLU's output has a zero minimum, so this runs on most activations.
HWY_INLINE void ZeroSigns(const float* x, std::int64_t n, bool& neg0, bool& pos0) {
  const DF df;
  const DI di;
  const VI minus_zero = hn::Set(di, static_cast<std::int32_t>(0x80000000u)), zero = hn::Zero(di);
  auto neg = hn::FirstN(di, 0), pos = hn::FirstN(di, 0);
  std::int64_t i = 0;
  for (; i + kNF <= n; i += kNF) {
    const VI bits = hn::BitCast(di, hn::LoadU(df, x + i));
    neg = hn::Or(neg, hn::Eq(bits, minus_zero));
    pos = hn::Or(pos, hn::Eq(bits, zero));
    if ((i & 1023) == 0 && !hn::AllFalse(di, neg) && !hn::AllFalse(di, pos)) break;
  }
  neg0 = !hn::AllFalse(di, neg);
  pos0 = !hn::AllFalse(di, pos);
  for (i = std::max<std::int64_t>(i, n / kNF * kNF); i < n && !(neg0 && pos0); ++i) {
    neg0 = neg0 || (x[i] == 0 && std::signbit(x[i]));
    pos0 = pos0 || (x[i] == 0 && !std::signbit(x[i]));
  }
}

// Min / max are exact, so 4 independent accumulators (no serial dependency) give the same value
// in any order, up to the sign of a zero result: that is fixed afterwards, -0 below +0, by a
// second scan for zeros (only when the min or max is zero, e.g. after a ReLU).
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
  for (; i + 4 * kNF <= n; i += 4 * kNF)
    for (int j = 0; j < 4; ++j) Fold(hn::LoadU(df, x + i + j * kNF), lo[j], hi[j], nan);
  for (; i + kNF <= n; i += kNF) Fold(hn::LoadU(df, x + i), lo[0], hi[0], nan);
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
  }
  if (a == 0 || b == 0) {
    bool neg0 = false, pos0 = false;
    ZeroSigns(x, n, neg0, pos0);
    if (a == 0) a = neg0 ? -0.0f : 0.0f;
    if (b == 0) b = pos0 ? 0.0f : -0.0f;
  }
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
    std::int64_t i = 0;
    for (; i + 4 * kNF <= n; i += 4 * kNF) {
      // a weight comes from L3 at the start of a step: fetch 4 KB ahead, across the rows
      for (std::int64_t b = 0; b < 4 * kNF; b += 16)  // a 64-byte line per 16 floats
        if (4 * kNF >= 16 || i % 16 == 0) __builtin_prefetch(xr + i + b + 1024);
      for (int j = 0; j < 4; ++j) Fold(hn::LoadU(df, xr + i + j * kNF), lo[j], hi[j], nan);
    }
    for (; i + kNF <= n; i += kNF) Fold(hn::LoadU(df, xr + i), lo[0], hi[0], nan);
    const VF l = hn::Min(hn::Min(lo[0], lo[1]), hn::Min(lo[2], lo[3]));
    const VF h = hn::Max(hn::Max(hi[0], hi[1]), hn::Max(hi[2], hi[3]));
    float a = hn::GetLane(hn::MinOfLanes(df, l)), b = hn::GetLane(hn::MaxOfLanes(df, h));
    for (; i < n; ++i) {  // the tail
      const float v = xr[i];
      a = v < a ? v : a;
      b = v > b ? v : b;
      any = any || v != v;
    }
    if (a == 0 || b == 0) {
      bool neg0 = false, pos0 = false;
      ZeroSigns(xr, n, neg0, pos0);
      if (a == 0) a = neg0 ? -0.0f : 0.0f;
      if (b == 0) b = pos0 ? 0.0f : -0.0f;
    }
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
