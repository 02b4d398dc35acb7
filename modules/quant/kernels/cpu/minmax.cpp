// Observer min / max (kernels.h min_max, min_max_rows): one read of the tensor, NaN skipped by
// strict compares and reported with +-inf.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "modules/quant/kernels/cpu/minmax.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include "framework/tensor/simd.h"
#include "modules/quant/kernels/cpu/common-inl.h"
#include "modules/quant/kernels/cpu/kernels.h"

HWY_BEFORE_NAMESPACE();
namespace qat::quant::kernels::HWY_NAMESPACE {

// lo = v < lo ? v : lo, hi = v > hi ? v : hi (so NaN never enters)
HWY_INLINE void Fold(VF v, VF& lo, VF& hi, MF& nan) {
  lo = hn::IfThenElse(hn::Lt(v, lo), v, lo);
  hi = hn::IfThenElse(hn::Gt(v, hi), v, hi);
  nan = hn::Or(nan, IsNan(v));
}

void MinMax(const float* x, std::int64_t n, float* mn, float* mx, bool* bad) {
  const DF df;
  constexpr float inf = __builtin_inff();
  VF lo[16 / kNF], hi[16 / kNF];
  for (std::int64_t k = 0; k < 16 / kNF; ++k) {
    lo[k] = hn::Set(df, inf);
    hi[k] = hn::Set(df, -inf);
  }
  MF nan = hn::FirstN(df, 0);
  std::int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (std::int64_t k = 0; k < 16 / kNF; ++k) Fold(hn::LoadU(df, x + i + k * kNF), lo[k], hi[k], nan);
  float l[16], h[16];
  for (std::int64_t k = 0; k < 16 / kNF; ++k) {
    hn::StoreU(lo[k], df, l + k * kNF);
    hn::StoreU(hi[k], df, h + k * kNF);
  }
  bool any = !hn::AllFalse(df, nan);
  for (std::int64_t j = 0; i + j < n; ++j) {  // the tail, to lanes 0, 1, ...
    const float v = x[i + j];
    l[j] = v < l[j] ? v : l[j];
    h[j] = v > h[j] ? v : h[j];
    any = any || v != v;
  }
  float a = inf, b = -inf;
  for (int j = 0; j < 16; ++j) {
    a = l[j] < a ? l[j] : a;
    b = h[j] > b ? h[j] : b;
  }
  *mn = a;
  *mx = b;
  *bad = *bad || any || a == -inf || b == inf;
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

void min_max(const float* x, std::int64_t n, float* mn, float* mx, bool* bad) {
  QAT_DISPATCH(MinMax)(x, n, mn, mx, bad);
}
void min_max_rows(const float* x, std::int64_t rows, std::int64_t cols, float* mn, float* mx,
                  bool* bad) {
  QAT_DISPATCH(MinMaxRows)(x, rows, cols, mn, mx, bad);
}

}  // namespace qat::quant::kernels
#endif  // HWY_ONCE
