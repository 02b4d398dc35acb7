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

// max |x| over len <= block values; *bad when one is NaN or +-inf.
HWY_INLINE float BlockAmax(const float* x, std::int64_t len, bool* bad) {
  const DF df;
  const VF inf = hn::Set(df, std::numeric_limits<float>::infinity());
  VF mx = hn::Zero(df), nonfinite = hn::Zero(df);
  auto step = [&](VF v) {
    const VF a = hn::Abs(v);
    nonfinite = hn::Or(nonfinite, hn::VecFromMask(df, hn::Not(hn::Lt(a, inf))));
    mx = hn::Max(mx, a);
  };
  std::int64_t i = 0;
  for (; i + kNF <= len; i += kNF) step(hn::LoadU(df, x + i));
  if (kNF > 1 && i < len) {
    float buf[kNF] = {};
    std::memcpy(buf, x + i, (len - i) * sizeof(float));
    step(hn::LoadU(df, buf));
  }
  *bad = !hn::AllFalse(df, hn::MaskFromVec(nonfinite));
  return hn::GetLane(hn::MaxOfLanes(df, mx));
}

HWY_INLINE void FillNan(float* y, std::uint8_t* m, std::int64_t len) {
  std::fill(y, y + len, std::numeric_limits<float>::quiet_NaN());
  std::fill(m, m + len, std::uint8_t{0});
}

template <bool kBatch>
void MxBlocks(const float* x, float* y, std::uint8_t* mask, std::int64_t n, std::int64_t block,
              const GridConsts& c, int emax) {
  for (std::int64_t b0 = 0; b0 < n; b0 += block) {
    const std::int64_t len = std::min(block, n - b0);
    bool bad = false;
    const float amax = BlockAmax(x + b0, len, &bad);
    if (bad) {
      FillNan(y + b0, mask + b0, len);
      continue;
    }
    const int shared = mx_shared_exponent(amax, emax);
    GridRun<false, kBatch>(x + b0, y + b0, mask + b0, len, pow2f(-shared), pow2f(shared), c);
  }
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
  const GridConsts c = MakeGrid(1, 0, 6.0f);
  const ElementFormat e4m3 = element_format(Format::FP8_E4M3);
  for (std::int64_t b0 = 0; b0 < n; b0 += block) {
    const std::int64_t len = std::min(block, n - b0);
    bool bad = false;
    const float amax = BlockAmax(x + b0, len, &bad);
    if (bad) {
      FillNan(y + b0, mask + b0, len);
      continue;
    }
    const float total = nvfp4_block_scale(amax, per_tensor_scale, e4m3);
    GridRun<true, kBatch>(x + b0, y + b0, mask + b0, len, total, total, c);
  }
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
