// The grouped int8 GEMM of int8_dynamic.h, compiled once per instruction set (-ffp-contract=off).
// A tile is MR rows x NB blocks of 16 output channels. Per group the int32 accumulators start
// at 0 and add (x - zp) w products of int16 pairs (the int8 weight pairs sign-extended as loaded)
// (vpmaddwd on AVX2 / AVX-512, vpdpwssd on AVX-VNNI and AVX-512 VNNI: exact, |x - zp| <= 255 and |w| <=
// 128); at the group's end they are converted to float and added, times the group's weight scales, to
// the tile's float sums. The float part is one plain loop shared by every path, so the bits do not
// depend on the path.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "modules/quant/kernels/cpu/int8_dynamic.cpp"
#include "modules/quant/int8_dynamic.h"

#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <algorithm>

#include "framework/tensor/cpu.h"
#include "framework/tensor/simd.h"
#include "modules/quant/kernels/cpu/x86-inl.h"  // QAT_INT8_X86

#ifndef QAT_INT8_DYNAMIC_ARGS
#define QAT_INT8_DYNAMIC_ARGS
namespace qat::quant::int8::detail {
// One call's operands as raw pointers (no std:: types cross into per-target code).
struct DynArgs {
  const std::uint8_t* x;
  std::int64_t M, K, ldx;
  const std::int32_t* zp;
  const float* rs;
  const std::int8_t* w;  // packed (GroupedWeights::data)
  const float* ws;       // packed (GroupedWeights::scales)
  std::int64_t O, group, groups, steps;
  const float* bias;
  bool relu;
  float* y;
  std::int64_t ldy;
};
constexpr std::int64_t kBlock = 16;  // output channels per packed block
}  // namespace qat::quant::int8::detail
#endif

HWY_BEFORE_NAMESPACE();
namespace qat::quant::int8::HWY_NAMESPACE {
using detail::DynArgs;
using detail::kBlock;

#if QAT_INT8_X86
#if HWY_TARGET == HWY_AVX2
using Vec = __m256i;
constexpr int kVecs = 2;  // vectors per block of 16 channels
constexpr std::int64_t kMR = 6;
constexpr int kNB = 1;
HWY_INLINE Vec zero() { return _mm256_setzero_si256(); }
constexpr std::int64_t kWeightBytes = 16;  // int8 weights per vector (8 channels x 2)
// 8 channels x 2 int8 weights, sign-extended to int16 pairs
HWY_INLINE Vec load_w(const std::int8_t* p) {
  return _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
HWY_INLINE void store(void* p, Vec v) { _mm256_storeu_si256(static_cast<__m256i*>(p), v); }
HWY_INLINE Vec bcast(const std::int16_t* p) {
  std::int32_t v;
  __builtin_memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}
HWY_INLINE Vec dot(Vec acc, Vec a, Vec b) { return _mm256_add_epi32(acc, _mm256_madd_epi16(a, b)); }
#else  // AVX3 / AVX3_DL
using Vec = __m512i;
constexpr int kVecs = 1;
constexpr std::int64_t kMR = 8;
constexpr int kNB = 2;
HWY_INLINE Vec zero() { return _mm512_setzero_si512(); }
constexpr std::int64_t kWeightBytes = 32;  // int8 weights per vector (16 channels x 2)
HWY_INLINE Vec load_w(const std::int8_t* p) {
  return _mm512_cvtepi8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}
HWY_INLINE void store(void* p, Vec v) { _mm512_storeu_si512(p, v); }
HWY_INLINE Vec bcast(const std::int16_t* p) {
  std::int32_t v;
  __builtin_memcpy(&v, p, 4);
  return _mm512_set1_epi32(v);
}
#if HWY_TARGET == HWY_AVX3_DL
// Highway 1.0.3's AVX3_DL target string lacks avx512vnni (its CPU check requires it).
#pragma GCC target("avx512vnni")
#undef QAT_TILE_TARGET
#define QAT_TILE_TARGET QAT_VNNI_TARGET("avx512vnni")
HWY_INLINE QAT_TILE_TARGET Vec dot(Vec acc, Vec a, Vec b) { return _mm512_dpwssd_epi32(acc, a, b); }
#else
HWY_INLINE Vec dot(Vec acc, Vec a, Vec b) { return _mm512_add_epi32(acc, _mm512_madd_epi16(a, b)); }
#endif
#endif
#else
constexpr std::int64_t kMR = 4;
constexpr int kNB = 1;
#endif

// Rows [r, r + rows) of x as int16 (x - zp), group by group, each padded with zeros to `steps`
// pairs; rows up to `height` (the tile's) are zero.
HWY_INLINE void fill_rows(const DynArgs& a, std::int64_t r, std::int64_t rows, std::int64_t height,
                          std::int16_t* __restrict s) {
  const std::int64_t stride = a.groups * a.steps * 2;
  for (std::int64_t i = 0; i < height; ++i) {
    std::int16_t* __restrict d = s + i * stride;
    if (i >= rows) {
      for (std::int64_t j = 0; j < stride; ++j) d[j] = 0;
      continue;
    }
    const std::uint8_t* __restrict x = a.x + (r + i) * a.ldx;
    const auto z = static_cast<std::int16_t>(a.zp[r + i]);
    for (std::int64_t g = 0; g < a.groups; ++g) {
      const std::int64_t k0 = g * a.group, len = std::min(a.group, a.K - k0);
      std::int16_t* __restrict dg = d + g * a.steps * 2;
      for (std::int64_t j = 0; j < len; ++j) dg[j] = static_cast<std::int16_t>(x[k0 + j] - z);
      for (std::int64_t j = len; j < a.steps * 2; ++j) dg[j] = 0;
    }
  }
}

// sum[i][c] = sum[i][c] + float(acc[i][c]) * ws[c] for the tile's `height` rows (the group's
// end; same loop on every path)
HWY_INLINE void add_group(const std::int32_t* __restrict acc, const float* __restrict ws,
                          std::int64_t height, std::int64_t width, float* __restrict sum) {
  for (std::int64_t i = 0; i < height; ++i)
    for (std::int64_t c = 0; c < width; ++c)
      sum[i * width + c] = sum[i * width + c] + static_cast<float>(acc[i * width + c]) * ws[c];
}

// y = relu?(sum * row_scale + bias) for the tile's real rows and channels
HWY_INLINE void store_tile(const DynArgs& a, std::int64_t r, std::int64_t rows, std::int64_t o0,
                           std::int64_t width, const float* __restrict sum) {
  const std::int64_t n = std::min(width, a.O - o0);
  for (std::int64_t i = 0; i < rows; ++i) {
    float* __restrict y = a.y + (r + i) * a.ldy + o0;
    const float s = a.rs[r + i];
    for (std::int64_t c = 0; c < n; ++c) {
      const float v = sum[i * width + c] * s + (a.bias ? a.bias[o0 + c] : 0.0f);
      y[c] = a.relu && !(v > 0.0f) ? 0.0f : v;
    }
  }
}

#include "modules/quant/kernels/cpu/int8_dynamic_tile-inl.h"  // tile, dyn_range

#if HWY_TARGET == HWY_AVX2
// AVX-VNNI (the avx2_vnni path): the same tile, the int16 pairs multiplied and added by the VEX
// vpdpwssd on ymm (one instruction for vpmaddwd + vpaddd, the same int32 sums).
#pragma GCC push_options
#pragma GCC target("avxvnni")
#undef QAT_TILE_TARGET
#define QAT_TILE_TARGET QAT_VNNI_TARGET("avxvnni")
namespace avx_vnni {
HWY_INLINE QAT_TILE_TARGET Vec dot(Vec acc, Vec a, Vec b) { return _mm256_dpwssd_avx_epi32(acc, a, b); }
#include "modules/quant/kernels/cpu/int8_dynamic_tile-inl.h"  // IWYU pragma: keep
}  // namespace avx_vnni
#undef QAT_TILE_TARGET
#define QAT_TILE_TARGET
#pragma GCC pop_options
#endif

void DynRangeImpl(const DynArgs& a, std::int64_t r0, std::int64_t r1, std::int16_t* scratch) {
#if HWY_TARGET == HWY_AVX2
  if (cpu::int8_avx_vnni()) return avx_vnni::dyn_range(a, r0, r1, scratch);
#endif
  dyn_range(a, r0, r1, scratch);
}

std::int64_t RowTileImpl() { return kMR; }

}  // namespace qat::quant::int8::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include "framework/tensor/error.h"
#include "framework/tensor/parallel.h"

namespace qat::quant::int8 {

HWY_EXPORT(DynRangeImpl);
HWY_EXPORT(RowTileImpl);

namespace {
// |x - zp| <= 255 and |w| <= 128: a group of n products stays within n * 32640 of zero.
constexpr std::int64_t kMaxGroup = 2147483647LL / (255 * 128);
}  // namespace

GroupedWeights pack_grouped(const std::int8_t* w, const float* scale, std::int64_t O, std::int64_t K,
                            std::int64_t group) {
  QAT_REQUIRE(O >= 1 && K >= 1, "int8::pack_grouped", "weight (", O, ", ", K, ") is empty");
  QAT_REQUIRE(group >= 1 && group <= K && group <= kMaxGroup, "int8::pack_grouped", "group ", group,
              " is not in [1, min(K = ", K, ", ", kMaxGroup, ")]");
  GroupedWeights p;
  p.O = O, p.K = K, p.group = group, p.groups = (K + group - 1) / group, p.steps = (group + 1) / 2;
  const std::int64_t blocks = (O + detail::kBlock - 1) / detail::kBlock;
  p.data.assign(static_cast<std::size_t>(blocks * p.groups * p.steps * detail::kBlock * 2), 0);
  p.scales.assign(static_cast<std::size_t>(blocks * p.groups * detail::kBlock), 0.0f);
  for (std::int64_t o = 0; o < O; ++o) {
    const std::int64_t b = o / detail::kBlock, c = o % detail::kBlock;
    for (std::int64_t g = 0; g < p.groups; ++g) {
      p.scales[static_cast<std::size_t>((b * p.groups + g) * detail::kBlock + c)] =
          scale[o * p.groups + g];
      const std::int64_t k0 = g * group, len = std::min(group, K - k0);
      for (std::int64_t j = 0; j < len; ++j) {
        const std::int64_t step = (b * p.groups + g) * p.steps + j / 2;
        p.data[static_cast<std::size_t>((step * detail::kBlock + c) * 2 + j % 2)] = w[o * K + k0 + j];
      }
    }
  }
  return p;
}

void linear_dynamic(const std::uint8_t* x, std::int64_t M, std::int64_t ldx, const std::int32_t* row_zp,
                    const float* row_scale, const GroupedWeights& w, const float* bias, bool relu,
                    float* y, std::int64_t ldy) {
  if (M <= 0) return;
  const detail::DynArgs a{
      x,        M,       w.K,  ldx,  row_zp, row_scale, w.data.data(), w.scales.data(), w.O, w.group,
      w.groups, w.steps, bias, relu, y,      ldy};
  const std::int64_t mr = QAT_DISPATCH(RowTileImpl)();
  const std::int64_t tiles = (M + mr - 1) / mr, per_row = w.groups * w.steps * 2;
  const int slots = parallel_slots(tiles);
  thread_local std::vector<std::int16_t> scratch;
  if (slots <= 1) {
    scratch.resize(static_cast<std::size_t>(mr * per_row));
    QAT_DISPATCH(DynRangeImpl)(a, 0, M, scratch.data());
    return;
  }
  std::vector<std::int16_t> shared(static_cast<std::size_t>(slots * mr * per_row));
  parallel_for_each(tiles, slots, [&](std::int64_t t, int slot) {
    QAT_DISPATCH(DynRangeImpl)
    (a, t * mr, std::min(M, (t + 1) * mr), shared.data() + slot * mr * per_row);
  });
}

void linear_dynamic_reference(const std::uint8_t* x, std::int64_t M, std::int64_t K, std::int64_t ldx,
                              const std::int32_t* row_zp, const float* row_scale, const std::int8_t* w,
                              const float* scale, std::int64_t O, std::int64_t group, const float* bias,
                              bool relu, float* y, std::int64_t ldy) {
  const std::int64_t groups = (K + group - 1) / group;
  for (std::int64_t m = 0; m < M; ++m)
    for (std::int64_t o = 0; o < O; ++o) {
      float sum = 0.0f;
      for (std::int64_t g = 0; g < groups; ++g) {
        std::int32_t acc = 0;
        for (std::int64_t k = g * group; k < std::min(K, (g + 1) * group); ++k)
          acc += (static_cast<std::int32_t>(x[m * ldx + k]) - row_zp[m]) * w[o * K + k];
        sum = sum + static_cast<float>(acc) * scale[o * groups + g];
      }
      const float v = sum * row_scale[m] + (bias ? bias[o] : 0.0f);
      y[m * ldy + o] = relu && !(v > 0.0f) ? 0.0f : v;
    }
}

}  // namespace qat::quant::int8
#endif  // HWY_ONCE
