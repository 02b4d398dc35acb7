// Direct convolution forward (conv_direct.h), compiled once per instruction set (tensor/simd.h):
// a block of OB output channels x NV vectors of one output row in registers; per tap, NV row
// loads and OB broadcast weights feed OB x NV fused multiply-adds.
// (A direct weight gradient, OB channels x KB taps of vector accumulators summed over the
// images, was measured slower than the GEMM over the gathered im2col matrix on both paths,
// 616 against 540 us for the Fashion-MNIST conv1 on AVX-512, so dW stays a GEMM.)
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "framework/kernels/cpu/conv_direct.cpp"
#include "framework/kernels/cpu/conv_direct.h"

// clang-format off
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>
// clang-format on

#include "framework/kernels/cpu/lanes-inl.h"
#include "framework/tensor/simd.h"

// No std:: templates below this point (ODR: they would be compiled with each target's flags).
HWY_BEFORE_NAMESPACE();
namespace qat::kernels::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
namespace {

using i64 = std::int64_t;
using lanes::D;
using lanes::L;
using lanes::lane_mask;
using lanes::LaneMask;
using lanes::load_masked;
using lanes::store_masked;
using lanes::V;

// Accumulators a block may hold: 32 vector registers on AVX-512, 16 elsewhere (the rest hold
// the row loads and the broadcast).
#if HWY_TARGET <= HWY_AVX3
constexpr int kAcc = 16;
#else
constexpr int kAcc = 8;
#endif
constexpr int kMaxNV = 4;  // vectors of a row per block
constexpr int kMaxOB = 8;  // channels per block

inline i64 imin(i64 a, i64 b) { return a < b ? a : b; }

template <bool Tail>
HWY_INLINE V load_row(const float* p, LaneMask m) {
  if constexpr (Tail) return load_masked(m, p);
  return hn::LoadU(D(), p);
}

// y[o][col + v L + l] for o < OB, v < NV (the last vector masked when Tail): bias, then every tap.
template <int OB, int NV, bool Tail>
HWY_NOINLINE void forward_block(const DirectConvGeom& a, const float* x, const float* w, const float* b,
                                float* y, LaneMask m) {
  const D d;
  V acc[OB][NV];
#pragma GCC unroll 16
  for (int o = 0; o < OB; ++o)
#pragma GCC unroll 16
    for (int v = 0; v < NV; ++v) acc[o][v] = hn::Set(d, b != nullptr ? b[o] : 0.0f);
  for (i64 k = 0; k < a.K; ++k) {
    V xv[NV];
#pragma GCC unroll 16
    for (int v = 0; v < NV - 1; ++v) xv[v] = hn::LoadU(d, x + a.tap[k] + v * L);
    xv[NV - 1] = load_row<Tail>(x + a.tap[k] + (NV - 1) * L, m);
#pragma GCC unroll 16
    for (int o = 0; o < OB; ++o) {
      const V wv = hn::Set(d, w[o * a.K + k]);
#pragma GCC unroll 16
      for (int v = 0; v < NV; ++v) acc[o][v] = hn::MulAdd(wv, xv[v], acc[o][v]);
    }
  }
  const i64 P = a.Ho * a.Wo;
#pragma GCC unroll 16
  for (int o = 0; o < OB; ++o)
#pragma GCC unroll 16
    for (int v = 0; v < NV; ++v) {
      float* p = y + o * P + v * L;
      if (Tail && v == NV - 1)
        store_masked(acc[o][v], m, p);
      else
        hn::StoreU(acc[o][v], d, p);
    }
}

using ForwardFn = void (*)(const DirectConvGeom&, const float*, const float*, const float*, float*,
                           LaneMask);

template <int OB, bool Tail>
ForwardFn forward_for(int nv) {
  switch (nv) {
    case 1:
      return &forward_block<(OB < kAcc ? OB : kAcc), 1, Tail>;
    case 2:
      return &forward_block<(OB < kAcc / 2 ? OB : kAcc / 2), 2, Tail>;
    case 3:
      return &forward_block<(OB < kAcc / 3 ? OB : kAcc / 3), 3, Tail>;
    default:
      return &forward_block<(OB < kAcc / 4 ? OB : kAcc / 4), 4, Tail>;
  }
}
// channels per block for nv vectors (as forward_for instantiates them)
constexpr i64 block_channels(int nv) {
  const int ob = kAcc / nv;
  return ob < kMaxOB ? ob : kMaxOB;
}

}  // namespace

void ConvDirectForward(const float* xp, const DirectConvGeom& a, const float* w, const float* b, i64 O,
                       float* y) {
  const i64 P = a.Ho * a.Wo, chunk = kMaxNV * L;
  for (i64 h = 0; h < a.Ho; ++h) {
    const float* xr = xp + h * a.sh * a.Wp;
    for (i64 c0 = 0; c0 < a.Wo; c0 += chunk) {
      const i64 n = imin(chunk, a.Wo - c0);
      const int nv = static_cast<int>((n + L - 1) / L);
      const bool tail = n % L != 0;
      const LaneMask m = lane_mask(tail ? n % L : L);
      const i64 ob = block_channels(nv);
      const ForwardFn full = tail ? forward_for<kMaxOB, true>(nv) : forward_for<kMaxOB, false>(nv);
      const ForwardFn one = tail ? forward_for<1, true>(nv) : forward_for<1, false>(nv);
      i64 o = 0;
      for (; o + ob <= O; o += ob)
        full(a, xr + c0, w + o * a.K, b != nullptr ? b + o : nullptr, y + o * P + h * a.Wo + c0, m);
      for (; o < O; ++o)
        one(a, xr + c0, w + o * a.K, b != nullptr ? b + o : nullptr, y + o * P + h * a.Wo + c0, m);
    }
  }
}

}  // namespace qat::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace qat::kernels {

HWY_EXPORT(ConvDirectForward);

void conv_direct_forward(const float* xp, const DirectConvGeom& g, const float* w, const float* b,
                         std::int64_t O, float* y) {
  QAT_DISPATCH(ConvDirectForward)(xp, g, w, b, O, y);
}

}  // namespace qat::kernels
#endif
