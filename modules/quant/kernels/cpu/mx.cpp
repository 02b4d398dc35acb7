// Microscaling fake quantization (kernels.h mx_fake_quant, nvfp4_fake_quant). Per block: the
// block's amax (non-finite values flagged; in groups of blocks, several blocks' at once), its
// scale exactly as the reference (modules/quant/mx.cpp), then the elements rounded to their grid
// as in fp8.cpp (common-inl.h RoundToGrid). The last block of a row may be shorter (zero
// padding).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "modules/quant/kernels/cpu/mx.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "framework/tensor/simd.h"
#include "modules/quant/kernels/cpu/common-inl.h"
#include "modules/quant/kernels/cpu/kernels.h"

HWY_BEFORE_NAMESPACE();
namespace qat::quant::kernels::HWY_NAMESPACE {

// The bits of |x| for kNF values as integers: their order is the floats' for non-negative
// values, with +inf and then NaN above every finite value (from kNonFinite up), so that an
// integer max, on any of the vector pipes, finds the amax and flags NaN / inf at once.
constexpr std::int32_t kNonFinite = 0x7f800000;
HWY_INLINE VI MagnitudeBits(const float* x) {
  const DI di;
  return hn::And(hn::BitCast(di, hn::LoadU(DF(), x)), hn::Set(di, 0x7fffffff));
}

// max |x| over len <= block values; *bad when one is NaN or +-inf. (The blocks of whole groups
// take WholeGroupAmax.)
HWY_INLINE float BlockAmax(const float* x, std::int64_t len, bool* bad) {
  const DI di;
  VI mx = hn::Zero(di);
  std::int64_t i = 0;
  for (; i + kNF <= len; i += kNF) mx = hn::Max(mx, MagnitudeBits(x + i));
  if (kNF > 1 && i < len) {
    float buf[kNF] = {};
    std::memcpy(buf, x + i, (len - i) * sizeof(float));
    mx = hn::Max(mx, MagnitudeBits(buf));
  }
  const std::int32_t bits = hn::GetLane(hn::MaxOfLanes(di, mx));
  *bad = bits >= kNonFinite;
  float amax;
  std::memcpy(&amax, &bits, sizeof amax);
  return amax;
}

// The lane-wise maxima of MagnitudeBits over a block of kVectors whole vectors (BlockMaxima
// reduces them across lanes).
template <std::int64_t kVectors>
HWY_INLINE VI LaneAmax(const float* x) {
  VI mx = MagnitudeBits(x);
  for (std::int64_t i = 1; i < kVectors; ++i) mx = hn::Max(mx, MagnitudeBits(x + i * kNF));
  return mx;
}

#if HWY_TARGET != HWY_SCALAR
// Lane j of the result: the max of m[j]'s lanes, for kNF = 4, 8 or 16 blocks at once. A tree
// of maxima that transposes as it goes: pairs interleaved by 32 and then 64 bits within each
// 128-bit block (a lane of each source per block after two levels), then the blocks combined.
// A horizontal max per block took ~6 shuffles and maxes, and a scalar store that the scales'
// vector loads then waited on.
HWY_INLINE VI BlockMaxima(const VI (&m)[kNF]) {
  const DI di;
  const hn::Repartition<std::int64_t, DI> d64;
  VI t[kNF / 2], u[kNF / 4];
  for (std::int64_t i = 0; i < kNF / 2; ++i)
    t[i] = hn::Max(hn::InterleaveLower(di, m[2 * i], m[2 * i + 1]),
                   hn::InterleaveUpper(di, m[2 * i], m[2 * i + 1]));
  for (std::int64_t i = 0; i < kNF / 4; ++i) {
    const auto a = hn::BitCast(d64, t[2 * i]), b = hn::BitCast(d64, t[2 * i + 1]);
    u[i] = hn::Max(hn::BitCast(di, hn::InterleaveLower(d64, a, b)),
                   hn::BitCast(di, hn::InterleaveUpper(d64, a, b)));
  }
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL  // four blocks: pairs, then alternates
  const VI w0 = hn::Max(hn::ConcatLowerLower(di, u[1], u[0]), hn::ConcatUpperUpper(di, u[1], u[0]));
  const VI w1 = hn::Max(hn::ConcatLowerLower(di, u[3], u[2]), hn::ConcatUpperUpper(di, u[3], u[2]));
  return hn::Max(VI{_mm512_shuffle_i32x4(w0.raw, w1.raw, 0x88)},
                 VI{_mm512_shuffle_i32x4(w0.raw, w1.raw, 0xDD)});
#else
  if constexpr (kNF == 4) {
    return u[0];
  } else {  // two blocks (AVX2): block b of u[i] holds its sources' maxima over lanes 4b .. 4b + 3
    return hn::Max(hn::ConcatLowerLower(di, u[1], u[0]), hn::ConcatUpperUpper(di, u[1], u[0]));
  }
#endif
}
#endif  // HWY_TARGET != HWY_SCALAR

HWY_INLINE void FillNan(float* y, std::uint8_t* m, std::int64_t len) {
  std::fill(y, y + len, std::numeric_limits<float>::quiet_NaN());
  std::fill(m, m + len, std::uint8_t{0});
}

// The blocks of a row in groups (ScaledBlocks): first their amax, then their scales
// (scales(amax, count, s) fills s[j] = {in_scale, out_scale} of block j < count), then their
// elements. Each block's scale waits on a chain of a reduction and scalar steps; eight
// independent chains side by side overlap, where one per block left the vector units idle
// (2^20 floats, avx2: MXFP8 379 -> 266 us, NVFP4 875 -> 543). A group is two vectors of block
// scales (16 blocks on AVX2, 32 on AVX-512), so that a group's chain of latencies is paid once
// for more elements: 2^20 floats, 8 -> 16 / 32 blocks, NVFP4 avx2 421-423 -> 399-412 us,
// avx512_vnni 350-352 -> 266-291; MX avx512_vnni 203-213 -> 162-181, avx2 269-275 -> 252-264.
constexpr int kGroup = kNF >= 8 ? 2 * static_cast<int>(kNF) : 16;
struct BlockScales {
  float in, out;
};

// A group of whole blocks of kPer (1 or 2) vectors each as one run: vector v with the scales of
// block v / kPer, four vectors' mask bytes per store (MaskedRun's batch). A run per block of one
// or two vectors (NVFP4's 16 floats; MX's 32 on AVX-512) spent more on the loop than on them.
template <bool kDivide, std::int64_t kPer>
HWY_INLINE void GroupRun(const float* x, float* y, std::uint8_t* m, const BlockScales* s,
                         const GridConsts& c) {
  const DF df;
  constexpr std::int64_t kVectors = kGroup * kPer;
  static_assert(kVectors % 4 == 0);
  for (std::int64_t v = 0; v < kVectors; v += 4) {
    VI b[4];
    for (int j = 0; j < 4; ++j) {
      const BlockScales& bs = s[(v + j) / kPer];
      b[j] = GridStep<kDivide>(x + (v + j) * kNF, y + (v + j) * kNF, hn::Set(df, bs.in),
                               hn::Set(df, bs.out), c);
    }
    StoreBytes4(b, m + v * kNF);
  }
}

// A group's blocks: their count, amax (bit j of bad: block j's is NaN or inf) and scales;
// whole: the group is kGroup whole blocks of that many vectors (1 or 2), else 0.
struct Group {
  int count = 0, whole = 0;
  std::uint32_t bad = 0;
  float amax[kGroup] = {};
  BlockScales s[kGroup];
  bool is_bad(int j) const { return (bad >> j) & 1; }
};

// The amax of a group of kGroup whole blocks of kVectors vectors each, kNF blocks at a time:
// their lane-wise maxima reduced by BlockMaxima, stored as vectors (which NVFP4's vector scales
// load whole). 2^20 floats, against a horizontal max and a scalar store per block: NVFP4 avx2
// 344-346 -> 293 us, avx512_vnni 231 -> 198; MXFP4 avx2 260-261 -> 240-241, avx512_vnni
// 170-171 -> 161-162.
template <std::int64_t kVectors>
HWY_INLINE void WholeGroupAmax(const float* x, std::int64_t block, Group& g) {
#if HWY_TARGET != HWY_SCALAR
  const DF df;
  const DI di;
  for (std::int64_t v = 0; v < kGroup / kNF; ++v) {
    VI m[kNF];
    for (std::int64_t j = 0; j < kNF; ++j) m[j] = LaneAmax<kVectors>(x + (v * kNF + j) * block);
    const VI mx = BlockMaxima(m);
    hn::StoreU(hn::BitCast(df, mx), df, g.amax + v * kNF);
    if (HWY_UNLIKELY(!hn::AllFalse(di, hn::Gt(mx, hn::Set(di, kNonFinite - 1)))))
      for (std::int64_t j = 0; j < kNF; ++j)
        if (!(g.amax[v * kNF + j] <= std::numeric_limits<float>::max())) g.bad |= 1u << (v * kNF + j);
  }
#else
  (void)x, (void)block, (void)g;
#endif
}

template <bool kDivide, bool kBatch, class Scales>
void ScaledBlocks(const float* x, float* y, std::uint8_t* mask, std::int64_t n, std::int64_t block,
                  const GridConsts& c, Scales scales) {
  const std::int64_t span = kGroup * block;
  // blocks of one or two vectors (NVFP4's 16 floats): the group's elements as one run
  const int per = block == kNF ? 1 : block == 2 * kNF ? 2 : 0;
  // whole groups of blocks of 1, 2, 4 or 8 vectors: their amax kNF blocks at a time, unrolled
  // (a loop over the block's vectors cost NVFP4 6%)
  using WholeAmax = void (*)(const float*, std::int64_t, Group&);
  constexpr WholeAmax kWholeAmax[9] = {
      nullptr, &WholeGroupAmax<1>, &WholeGroupAmax<2>, nullptr, &WholeGroupAmax<4>, nullptr, nullptr,
      nullptr, &WholeGroupAmax<8>};
  const WholeAmax whole_amax =
      kNF >= 4 && block % kNF == 0 && block / kNF <= 8 ? kWholeAmax[block / kNF] : nullptr;
  const auto prepare = [&](std::int64_t g0, Group& g) {
    g.count = static_cast<int>(std::min<std::int64_t>(kGroup, (n - g0 + block - 1) / block));
    g.whole = g0 + span <= n ? per : 0;
    g.bad = 0;
    if (g0 + span <= n && whole_amax != nullptr) {
      whole_amax(x + g0, block, g);
    } else {
      for (int j = 0; j < g.count; ++j) {
        const std::int64_t b0 = g0 + j * block, len = std::min(block, n - b0);
        bool bad = false;
        g.amax[j] = BlockAmax(x + b0, len, &bad);
        g.bad |= static_cast<std::uint32_t>(bad) << j;
      }
    }
    scales(g.amax, g.count, g.s);
  };
  // The next group's scales come before this group's elements, so that their chain of
  // latencies (the amax reduction, divisions, the rounding) overlaps the element work instead of
  // stalling it. With GroupRun and NVFP4's vector scales, on 2^20 floats: NVFP4 avx2 584-589 ->
  // 443-465 us, avx512_vnni 525-558 -> 354-382; MX on avx512_vnni 223-238 -> 200-225.
  Group groups[2];
  prepare(0, groups[0]);
  for (std::int64_t g0 = 0, t = 0; g0 < n; g0 += span, t ^= 1) {
    if (g0 + span < n) prepare(g0 + span, groups[t ^ 1]);
    const Group& g = groups[t];
    if (g.whole != 0) {
      if (g.whole == 1)
        GroupRun<kDivide, 1>(x + g0, y + g0, mask + g0, g.s, c);
      else
        GroupRun<kDivide, 2>(x + g0, y + g0, mask + g0, g.s, c);
      for (int j = 0; j < g.count; ++j)
        if (g.is_bad(j)) FillNan(y + g0 + j * block, mask + g0 + j * block, block);
      continue;
    }
    for (int j = 0; j < g.count; ++j) {
      const std::int64_t b0 = g0 + j * block, len = std::min(block, n - b0);
      if (g.is_bad(j))
        FillNan(y + b0, mask + b0, len);
      else
        GridRun<kDivide, kBatch>(x + b0, y + b0, mask + b0, len, g.s[j].in, g.s[j].out, c);
    }
  }
}

template <bool kBatch>
void MxBlocks(const float* x, float* y, std::uint8_t* mask, std::int64_t n, std::int64_t block,
              const GridConsts& c, int emax) {
  ScaledBlocks<false, kBatch>(
      x, y, mask, n, block, c, [emax](const float* amax, int count, BlockScales* s) {
        for (int j = 0; j < count; ++j) {
          const int shared = mx_shared_exponent(amax[j], emax);  // amax may be NaN / inf here: unused
          s[j] = BlockScales{pow2f(-shared), pow2f(shared)};
        }
      });
}

void MxFakeQuant(const float* x, float* y, std::uint8_t* mask, std::int64_t n, std::int64_t block,
                 int mantissa_bits, int min_exponent, float max, int emax) {
  const GridConsts c = MakeGrid(mantissa_bits, min_exponent, max);
  if (block >= 4 * kNF)
    MxBlocks<true>(x, y, mask, n, block, c, emax);
  else
    MxBlocks<false>(x, y, mask, n, block, c, emax);
}

// NVFP4 block scales (kernels.h nvfp4_block_scale) of a group of blocks in vector steps, the
// same operations in the same order: clamp((amax / 6) / s_t, 2^-6, 448) rounded to E4M3
// (RoundToGrid, as fp8.cpp; the clamped value is a positive normal, never NaN: amax is finite
// or its block unused) times s_t, where a scalar chain per block was the kernel's longest.
template <bool kBatch>
void Nvfp4Blocks(const float* x, float* y, std::uint8_t* mask, std::int64_t n, std::int64_t block,
                 float per_tensor_scale) {
  const DF df;
  const ElementFormat f = element_format(Format::FP8_E4M3);
  const GridConsts e4m3 = MakeGrid(f.mantissa_bits, f.min_exponent, static_cast<float>(f.max));
  const VF six = hn::Set(df, 6.0f), st = hn::Set(df, per_tensor_scale), lo = hn::Set(df, 0.015625f),
           hi = hn::Set(df, 448.0f);
  static_assert(kGroup % kNF == 0);
  ScaledBlocks<true, kBatch>(x, y, mask, n, block, MakeGrid(1, 0, 6.0f),
                             [&](const float* amax, int, BlockScales* s) {
                               float t[kGroup];  // lanes past the group's count: stale amax, unused
                               for (std::int64_t v = 0; v < kGroup / kNF; ++v) {
                                 VF scaled = hn::Div(hn::Div(hn::LoadU(df, amax + v * kNF), six), st);
                                 scaled = LtOr(GtOr(scaled, lo), hi);  // std::clamp for non-NaN
                                 hn::StoreU(hn::Mul(st, RoundToGrid(scaled, e4m3)), df, t + v * kNF);
                               }
                               for (int j = 0; j < kGroup; ++j) s[j] = BlockScales{t[j], t[j]};
                             });
}

void Nvfp4FakeQuant(const float* x, float* y, std::uint8_t* mask, std::int64_t n, std::int64_t block,
                    float per_tensor_scale) {
  if (block >= 4 * kNF)
    Nvfp4Blocks<true>(x, y, mask, n, block, per_tensor_scale);
  else
    Nvfp4Blocks<false>(x, y, mask, n, block, per_tensor_scale);
}

}  // namespace qat::quant::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace qat::quant::kernels {

HWY_EXPORT(MxFakeQuant);
HWY_EXPORT(Nvfp4FakeQuant);

void mx_fake_quant(const float* x, float* y, std::uint8_t* mask, std::int64_t n, std::int64_t block,
                   int mantissa_bits, int min_exponent, float max, int emax) {
  QAT_DISPATCH(MxFakeQuant)(x, y, mask, n, block, mantissa_bits, min_exponent, max, emax);
}

void nvfp4_fake_quant(const float* x, float* y, std::uint8_t* mask, std::int64_t n, std::int64_t block,
                      float per_tensor_scale) {
  QAT_DISPATCH(Nvfp4FakeQuant)(x, y, mask, n, block, per_tensor_scale);
}

}  // namespace qat::quant::kernels
#endif  // HWY_ONCE
