// Pooling kernels, compiled once per instruction set (see tensor/simd.h). The 2x2 max pool
// splits each row pair into even and odd columns (LoadInterleaved2), so one vector step pools
// Lanes windows; the backward interleaves them again (StoreInterleaved2).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "framework/kernels/cpu/pool.cpp"
#include "framework/kernels/cpu/pool.h"

#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <algorithm>

#include "framework/tensor/simd.h"

HWY_BEFORE_NAMESPACE();
namespace qat::kernels::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using i64 = std::int64_t;

// relu(v) = v > 0 ? v : 0 (NaN -> 0), as ops/activation.cpp's relu
inline float relu(float v) { return v > 0 ? v : 0.0f; }

// One window, scalar: the vector loop's tail and its reference. kRelu: the window of relu(r),
// and kNowhere where its maximum is 0.
template <bool kRelu>
inline void max_window(const float* r, i64 W, i64 ow, float* out, std::uint8_t* at) {
  float v[4] = {r[2 * ow], r[2 * ow + 1], r[W + 2 * ow], r[W + 2 * ow + 1]};
  if (kRelu)
    for (float& e : v) e = relu(e);
  float best = v[0];
  std::uint8_t arg = kTopLeft;
  for (std::uint8_t k = 1; k < 4; ++k) {
    if (v[k] > best || v[k] != v[k]) best = v[k], arg = k;
  }
  out[ow] = best;
  at[ow] = kRelu && !(best > 0) ? std::uint8_t{kNowhere} : arg;
}

// Windows [ow, ow + Lanes(d)) of the row pair r, r + W (kRelu: as max_window).
template <bool kRelu, class D>
HWY_INLINE void max_step(D d, const float* r, i64 W, i64 ow, float* out, std::uint8_t* at) {
  const hn::RebindToSigned<D> di;
  const hn::Rebind<std::uint8_t, decltype(di)> d8;
  hn::Vec<D> tl, tr, bl, br;
  hn::LoadInterleaved2(d, r + 2 * ow, tl, tr);
  hn::LoadInterleaved2(d, r + W + 2 * ow, bl, br);
  if (kRelu) {  // v > 0 ? v : 0, NaN included
    const auto zero = hn::Zero(d);
    tl = hn::IfThenElseZero(hn::Gt(tl, zero), tl), tr = hn::IfThenElseZero(hn::Gt(tr, zero), tr);
    bl = hn::IfThenElseZero(hn::Gt(bl, zero), bl), br = hn::IfThenElseZero(hn::Gt(br, zero), br);
  }
  auto best = tl;
  auto arg = hn::Zero(di);
  auto visit = [&](hn::Vec<D> v, int pos) {  // take v if v > best or v is NaN
    const auto take = kRelu ? hn::Gt(v, best) : hn::Or(hn::Gt(v, best), hn::IsNaN(v));
    best = hn::IfThenElse(take, v, best);
    arg = hn::IfThenElse(hn::RebindMask(di, take), hn::Set(di, pos), arg);
  };
  visit(tr, kTopRight);
  visit(bl, kBottomLeft);
  visit(br, kBottomRight);
  if (kRelu)
    arg = hn::IfThenElse(hn::RebindMask(di, hn::Gt(best, hn::Zero(d))), arg, hn::Set(di, kNowhere));
  hn::StoreU(best, d, out + ow);
  hn::StoreU(hn::DemoteTo(d8, arg), d8, at + ow);
}

// The adjoint of max_step: rows d, d + W of windows [ow, ow + Lanes(d)).
template <class D>
HWY_INLINE void max_step_backward(D d, const float* g, const std::uint8_t* at, i64 W, i64 ow, float* r) {
  const hn::RebindToSigned<D> di;
  const hn::Rebind<std::uint8_t, decltype(di)> d8;
  const auto gv = hn::LoadU(d, g + ow);
  const auto arg = hn::PromoteTo(di, hn::LoadU(d8, at + ow));
  auto where = [&](int pos) {  // g where the argmax is `pos`, else 0
    return hn::IfThenElseZero(hn::RebindMask(d, hn::Eq(arg, hn::Set(di, pos))), gv);
  };
  hn::StoreInterleaved2(where(kTopLeft), where(kTopRight), d, r + 2 * ow);
  hn::StoreInterleaved2(where(kBottomLeft), where(kBottomRight), d, r + W + 2 * ow);
}

// Calls step(d, ow) over windows [0, Wo) with the widest of the full, 8- and 4-lane vectors
// that fits in Wo; the last step overlaps the one before (the steps are idempotent), so there
// is no scalar tail unless Wo < 4. Returns the windows done.
template <class Step>
HWY_INLINE i64 for_windows(i64 Wo, Step step) {
  auto run = [&](auto d) {
    const i64 N = static_cast<i64>(hn::Lanes(d));
    for (i64 ow = 0; ow < Wo; ow += N) step(d, std::min(ow, Wo - N));
    return Wo;
  };
  const hn::ScalableTag<float> full;
  if (Wo >= static_cast<i64>(hn::Lanes(full))) return run(full);
  if (Wo >= 8 && hn::Lanes(hn::CappedTag<float, 8>()) == 8) return run(hn::CappedTag<float, 8>());
  if (Wo >= 4 && hn::Lanes(hn::CappedTag<float, 4>()) == 4) return run(hn::CappedTag<float, 4>());
  return 0;
}

template <bool kRelu>
void max_pool_plane(const float* in, i64 H, i64 W, float* out, std::uint8_t* at) {
  const i64 Ho = H / 2, Wo = W / 2;
  for (i64 oh = 0; oh < Ho; ++oh) {
    const float* r = in + 2 * oh * W;
    float* o = out + oh * Wo;
    std::uint8_t* a = at + oh * Wo;
    const i64 done = for_windows(Wo, [&](auto d, i64 ow) { max_step<kRelu>(d, r, W, ow, o, a); });
    for (i64 ow = done; ow < Wo; ++ow) max_window<kRelu>(r, W, ow, o, a);
  }
}

// Planes narrower than a full AVX-512 vector (Wo < 16; a CNN's 28 and 14) take 8- and 4-lane
// vectors, and there Zen 5 ran the AVX-512 targets' code (compares into mask registers, korb,
// masked moves) 1.3-1.4x slower than AVX2's: 64 x 16 planes of 28 x 28, forward 93 vs 70 us,
// backward 57 vs 50 (14 x 14: 159 vs 111 and 104 vs 97). So the AVX-512 targets hand them to the
// AVX2 code, compiled before them in this file (hwy/foreach_target.h). Wider planes stay:
// 64 x 64 and up ran 5-10% faster on AVX-512.
#if (HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL) && (HWY_TARGETS & HWY_AVX2)
#define QAT_NARROW_PLANES_TO_AVX2 1
inline bool narrow(i64 W) { return W / 2 < static_cast<i64>(hn::Lanes(hn::ScalableTag<float>())); }
#endif

void MaxPool2x2(const float* in, i64 H, i64 W, float* out, std::uint8_t* at) {
#ifdef QAT_NARROW_PLANES_TO_AVX2
  if (narrow(W)) return N_AVX2::MaxPool2x2(in, H, W, out, at);
#endif
  max_pool_plane<false>(in, H, W, out, at);
}
void MaxPool2x2Relu(const float* in, i64 H, i64 W, float* out, std::uint8_t* at) {
#ifdef QAT_NARROW_PLANES_TO_AVX2
  if (narrow(W)) return N_AVX2::MaxPool2x2Relu(in, H, W, out, at);
#endif
  max_pool_plane<true>(in, H, W, out, at);
}

void MaxPool2x2Backward(const float* g, const std::uint8_t* at, i64 H, i64 W, float* dx) {
#ifdef QAT_NARROW_PLANES_TO_AVX2
  if (narrow(W)) return N_AVX2::MaxPool2x2Backward(g, at, H, W, dx);
#endif
  const i64 Ho = H / 2, Wo = W / 2;
  for (i64 oh = 0; oh < Ho; ++oh) {
    float* r = dx + 2 * oh * W;
    const float* gr = g + oh * Wo;
    const std::uint8_t* a = at + oh * Wo;
    const i64 done = for_windows(Wo, [&](auto d, i64 ow) { max_step_backward(d, gr, a, W, ow, r); });
    for (i64 ow = done; ow < Wo; ++ow) {
      const float v = gr[ow];
      r[2 * ow] = a[ow] == kTopLeft ? v : 0.0f;
      r[2 * ow + 1] = a[ow] == kTopRight ? v : 0.0f;
      r[W + 2 * ow] = a[ow] == kBottomLeft ? v : 0.0f;
      r[W + 2 * ow + 1] = a[ow] == kBottomRight ? v : 0.0f;
    }
  }
}

#undef QAT_NARROW_PLANES_TO_AVX2
}  // namespace qat::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace qat::kernels {

HWY_EXPORT(MaxPool2x2);
HWY_EXPORT(MaxPool2x2Relu);
HWY_EXPORT(MaxPool2x2Backward);

void max_pool_2x2(const float* in, std::int64_t H, std::int64_t W, float* out, std::uint8_t* at) {
  QAT_DISPATCH(MaxPool2x2)(in, H, W, out, at);
}
void max_pool_2x2_relu(const float* in, std::int64_t H, std::int64_t W, float* out, std::uint8_t* at) {
  QAT_DISPATCH(MaxPool2x2Relu)(in, H, W, out, at);
}
void max_pool_2x2_backward(const float* g, const std::uint8_t* at, std::int64_t H, std::int64_t W,
                           float* d) {
  QAT_DISPATCH(MaxPool2x2Backward)(g, at, H, W, d);
}

}  // namespace qat::kernels
#endif  // HWY_ONCE
