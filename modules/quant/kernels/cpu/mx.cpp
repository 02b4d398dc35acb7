// Microscaling fake quantization (kernels.h mx_fake_quant, nvfp4_fake_quant). Per block: the
// block's amax in one vector pass (non-finite values flagged), its scale in scalar code exactly
// as the reference (modules/quant/mx.cpp), then the elements rounded to their grid as in fp8.cpp
// (common-inl.h RoundToGrid). The last block of a row may be shorter (zero padding).
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

// max |x| over len <= block values; *bad when one is NaN or +-inf. On the bits of |x| as
// integers (their order for non-negative floats, with +inf and then NaN above every finite
// value): one integer max per vector, on any of the vector pipes, and the check on the result.
HWY_INLINE float BlockAmax(const float* x, std::int64_t len, bool* bad) {
  const DF df;
  const DI di;
  const VI magnitude = hn::Set(di, 0x7fffffff);
  VI mx = hn::Zero(di);
  std::int64_t i = 0;
  for (; i + kNF <= len; i += kNF)
    mx = hn::Max(mx, hn::And(hn::BitCast(di, hn::LoadU(df, x + i)), magnitude));
  if (kNF > 1 && i < len) {
    float buf[kNF] = {};
    std::memcpy(buf, x + i, (len - i) * sizeof(float));
    mx = hn::Max(mx, hn::And(hn::BitCast(di, hn::LoadU(df, buf)), magnitude));
  }
  const std::int32_t bits = hn::GetLane(hn::MaxOfLanes(di, mx));
  *bad = bits >= 0x7f800000;
  float amax;
  std::memcpy(&amax, &bits, sizeof amax);
  return amax;
}

HWY_INLINE void FillNan(float* y, std::uint8_t* m, std::int64_t len) {
  std::fill(y, y + len, std::numeric_limits<float>::quiet_NaN());
  std::fill(m, m + len, std::uint8_t{0});
}

// The blocks of a row, 8 at a time: first their amax and scales (scalar: Scales(amax) returns
// {in_scale, out_scale}), then their elements (GridRun). Each block's scale waits on a chain of
// a horizontal max and scalar steps; eight independent chains side by side overlap, where one
// per block left the vector units idle (2^20 floats, avx2: MXFP8 379 -> 266 us, NVFP4 875 -> 543).
struct BlockScales {
  float in, out;
};
template <bool kDivide, bool kBatch, class Scales>
void ScaledBlocks(const float* x, float* y, std::uint8_t* mask, std::int64_t n, std::int64_t block,
                  const GridConsts& c, Scales scales) {
  constexpr int kGroup = 8;
  for (std::int64_t g0 = 0; g0 < n; g0 += kGroup * block) {
    const int count = static_cast<int>(std::min<std::int64_t>(kGroup, (n - g0 + block - 1) / block));
    BlockScales s[kGroup];
    bool bad[kGroup];
    for (int j = 0; j < count; ++j) {
      const std::int64_t b0 = g0 + j * block;
      const float amax = BlockAmax(x + b0, std::min(block, n - b0), &bad[j]);
      s[j] = scales(amax);
    }
    for (int j = 0; j < count; ++j) {
      const std::int64_t b0 = g0 + j * block, len = std::min(block, n - b0);
      if (bad[j])
        FillNan(y + b0, mask + b0, len);
      else
        GridRun<kDivide, kBatch>(x + b0, y + b0, mask + b0, len, s[j].in, s[j].out, c);
    }
  }
}

template <bool kBatch>
void MxBlocks(const float* x, float* y, std::uint8_t* mask, std::int64_t n, std::int64_t block,
              const GridConsts& c, int emax) {
  ScaledBlocks<false, kBatch>(x, y, mask, n, block, c, [emax](float amax) {
    const int shared = mx_shared_exponent(amax, emax);  // amax may be NaN / inf here: unused
    return BlockScales{pow2f(-shared), pow2f(shared)};
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

template <bool kBatch>
void Nvfp4Blocks(const float* x, float* y, std::uint8_t* mask, std::int64_t n, std::int64_t block,
                 float per_tensor_scale) {
  const ElementFormat e4m3 = element_format(Format::FP8_E4M3);
  ScaledBlocks<true, kBatch>(x, y, mask, n, block, MakeGrid(1, 0, 6.0f), [&](float amax) {
    const float total = nvfp4_block_scale(amax, per_tensor_scale, e4m3);
    return BlockScales{total, total};
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
