// Observer min / max (kernels.h min_max, min_max_rows): one read of the tensor, NaN skipped by
// strict compares and reported with +-inf.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "modules/quant/kernels/cpu/minmax.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "framework/tensor/simd.h"
#include "modules/quant/kernels/cpu/common-inl.h"
#include "modules/quant/kernels/cpu/kernels.h"

HWY_BEFORE_NAMESPACE();
namespace qat::quant::kernels::HWY_NAMESPACE {

using DU = hn::RebindToUnsigned<DF>;

// lo = v < lo ? v : lo, hi = v > hi ? v : hi (so NaN never enters): Min(v, lo) / Max(v, hi) in
// this operand order are exactly that on every target (x86 minps / maxps return the second
// operand when unordered or equal; Highway's scalar Min / Max return the non-NaN one)
HWY_INLINE void Fold(VF v, VF& lo, VF& hi, MF& nan) {
  lo = hn::Min(v, lo);
  hi = hn::Max(v, hi);
  nan = hn::Or(nan, IsNan(v));
}

// x[0, n) in whole vectors, four a step into two accumulator sets: add(v, set); returns how
// many elements that was. `prefetch`: a weight comes from L3 at the start of a step, so fetch
// 4 KB ahead, across the rows (a 64-byte line per 16 floats).
template <class Add>
HWY_INLINE std::int64_t ScanVectors(const float* x, std::int64_t n, bool prefetch, const Add& add) {
  const DF df;
  std::int64_t i = 0;
  for (; i + 4 * kNF <= n; i += 4 * kNF) {
    for (std::int64_t b = 0; prefetch && b < 4 * kNF; b += 16)
      if (4 * kNF >= 16 || i % 16 == 0) __builtin_prefetch(x + i + b + 1024);
    for (int j = 0; j < 4; ++j) add(hn::LoadU(df, x + i + j * kNF), j & 1);
  }
  for (; i + kNF <= n; i += kNF) add(hn::LoadU(df, x + i), 0);
  return i;
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
// has a zero minimum). One Ranges per tensor (MinMax) or per run (MinMaxRuns).
struct Ranges {
  VF lo[4], hi[4];
  MF nan;
  Signs signs;
  HWY_INLINE Ranges() : nan(hn::FirstN(DF(), 0)) {
    for (int j = 0; j < 4; ++j) lo[j] = hn::Set(DF(), __builtin_inff()), hi[j] = hn::Set(DF(), -__builtin_inff());
  }
  // x[0, n) in whole vectors (ScanVectors); returns how many elements that was
  HWY_INLINE std::int64_t Scan(const float* x, std::int64_t n, bool prefetch) {
    return ScanVectors(x, n, prefetch, [this](VF v, int j) { Add(v, j); });
  }
  // The range of everything scanned and of the scalar tail t[0, n) (n < a vector); `bad` gets
  // a NaN or an infinite end.
  HWY_INLINE void Finish(const float* t, std::int64_t n, float& a, float& b, bool& bad) {
    const DF df;
    const VF l = hn::Min(hn::Min(lo[0], lo[1]), hn::Min(lo[2], lo[3]));
    const VF h = hn::Max(hn::Max(hi[0], hi[1]), hn::Max(hi[2], hi[3]));
#if HWY_TARGET == HWY_EMU128
    // Highway 1.0.3's EMU128 MinOfLanes / MaxOfLanes start from the highest / lowest finite
    // float, which turns lanes that are all +inf (-inf) into +FLT_MAX (-FLT_MAX): the lanes
    // reduced here instead (a clang build, or GCC from 12.3, has EMU128 as its generic target)
    HWY_ALIGN float ls[kNF], hs[kNF];
    hn::Store(l, df, ls);
    hn::Store(h, df, hs);
    a = ls[0], b = hs[0];
    for (std::int64_t i = 1; i < kNF; ++i) a = ls[i] < a ? ls[i] : a, b = hs[i] > b ? hs[i] : b;
#else
    a = hn::GetLane(hn::MinOfLanes(df, l)), b = hn::GetLane(hn::MaxOfLanes(df, h));
#endif
    bool any = !hn::AllFalse(df, nan);
    for (std::int64_t i = 0; i < n; ++i) {
      const float v = t[i];
      a = v < a ? v : a;
      b = v > b ? v : b;
      any = any || v != v;
      signs.Fold(v);
    }
    signs.Fix(a, b);
    bad = bad || any || a == -__builtin_inff() || b == __builtin_inff();
  }

 private:
  HWY_INLINE void Add(VF v, int j) {
    Fold(v, lo[j], hi[j], nan);
    signs.Fold(v);
  }
};

// The fast scan: min and max in the integer order of the float bits, three integer ops per
// vector and no NaN or sign bookkeeping. With u the bits as uint32 and s as int32:
//   some sign bit set (umax >= 2^31): min = the negative of largest magnitude = umax, else umin;
//   some sign bit clear (umin < 2^31): max = the positive of largest magnitude = smax, else umin.
// This is the order -NaN < -inf < ... < -0 < +0 < ... < +inf < +NaN: -0 below +0 as Ranges
// counts them, and a NaN always wins an end, so a NaN end means "rescan with Ranges" (which
// skips NaN) and is the only case that needs it.
struct BitRanges {
  hn::Vec<DU> umax[2], umin[2];  // two sets: AVX2's 16 registers hold them and the loads
  hn::Vec<DI> smax[2];
  HWY_INLINE BitRanges() {
    for (int j = 0; j < 2; ++j)
      umax[j] = hn::Zero(DU()), umin[j] = hn::Set(DU(), ~0u), smax[j] = hn::Set(DI(), INT32_MIN);
  }
  HWY_INLINE void Add(VF v, int j) {
    const auto u = hn::BitCast(DU(), v);
    umax[j] = hn::Max(umax[j], u);
    umin[j] = hn::Min(umin[j], u);
    smax[j] = hn::Max(smax[j], hn::BitCast(DI(), v));
  }
  // x[0, n) in whole vectors; returns how many elements that was (`prefetch` as Ranges::Scan)
  HWY_INLINE std::int64_t Scan(const float* x, std::int64_t n, bool prefetch) {
    return ScanVectors(x, n, prefetch, [this](VF v, int j) { Add(v, j); });
  }
  // The ends of everything scanned and of the tail t[0, n); false where a NaN is an end.
  HWY_INLINE bool Finish(const float* t, std::int64_t n, float& a, float& b) const {
    HWY_ALIGN std::uint32_t hi_u[kNF], lo_u[kNF];
    HWY_ALIGN std::int32_t hi_s[kNF];
    hn::Store(hn::Max(umax[0], umax[1]), DU(), hi_u);
    hn::Store(hn::Min(umin[0], umin[1]), DU(), lo_u);
    hn::Store(hn::Max(smax[0], smax[1]), DI(), hi_s);
    std::uint32_t umx = 0, umn = ~0u;
    std::int32_t smx = INT32_MIN;
    for (std::int64_t i = 0; i < kNF; ++i)
      umx = std::max(umx, hi_u[i]), umn = std::min(umn, lo_u[i]), smx = std::max(smx, hi_s[i]);
    for (std::int64_t i = 0; i < n; ++i) {
      std::uint32_t u;
      std::memcpy(&u, t + i, sizeof u);
      umx = std::max(umx, u), umn = std::min(umn, u), smx = std::max(smx, static_cast<std::int32_t>(u));
    }
    const std::uint32_t lo = umx >> 31 ? umx : umn,
                        hi = umn >> 31 ? umn : static_cast<std::uint32_t>(smx);
    std::memcpy(&a, &lo, sizeof a);
    std::memcpy(&b, &hi, sizeof b);
    return !std::isnan(a) && !std::isnan(b);
  }
};

// One run: the fast scan, then Ranges' NaN-skipping scan where a NaN was found (bad anyway).
// AVX-512 runs Ranges alone: on this Zen 5 its float ops take 0.036 ns an element in L1, the
// 512-bit integer min / max 0.051 (AVX2's integer scan: 0.039, against Ranges' 0.065).
HWY_INLINE void MinMaxRun(const float* x, std::int64_t n, bool prefetch, float& a, float& b, bool& bad) {
#if HWY_TARGET > HWY_AVX3
  BitRanges fast;
  const std::int64_t i = fast.Scan(x, n, prefetch);
  if (fast.Finish(x + i, n - i, a, b)) {
    bad = bad || a == -__builtin_inff() || b == __builtin_inff();
    return;
  }
  prefetch = false;
#endif
  Ranges r;
  const std::int64_t j = r.Scan(x, n, prefetch);
  r.Finish(x + j, n - j, a, b, bad);
}

void MinMax(const float* x, std::int64_t n, float* mn, float* mx, bool* bad) {
  MinMaxRun(x, n, false, *mn, *mx, *bad);
}

// Each of `runs` runs of n: MinMax's ranges, the weight's rows prefetched ahead.
void MinMaxRuns(const float* x, std::int64_t runs, std::int64_t n, float* mn, float* mx, bool* bad) {
  for (std::int64_t r = 0; r < runs; ++r) MinMaxRun(x + r * n, n, true, mn[r], mx[r], *bad);
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
