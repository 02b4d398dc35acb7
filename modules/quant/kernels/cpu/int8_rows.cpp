// int8::linear_u8s8_rows (int8_kernels.h): a few rows of uint8 activations times the int8
// weights as a layer stores them, (O, K) row-major, with nothing packed. Each output is a dot
// product of two contiguous rows,
//   acc(m, o) = sum_k (x(m, k) - zx) w(o, k)
// in int16 pairs: the rows of x minus their zero point (|x - zx| <= 255) once per call, the
// weights sign-extended as loaded (vpmovsxbw), multiplied and added pairwise into int32 lanes
// (vpmaddwd + vpaddd on AVX2 / AVX-512, vpdpwssd on AVX-VNNI and AVX-512 VNNI), the lanes added
// at the end. The sums are exact, so the order does not matter: the same int32 as the packed
// GEMM, then the same output stage (requantize, int8_kernels.h; float32, no contraction).
// A tile is RA rows of x by RW rows of w, RA * RW accumulators; w is read once per 4 rows of x.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "modules/quant/kernels/cpu/int8_rows.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include "framework/tensor/cpu.h"
#include "framework/tensor/simd.h"
#include "modules/quant/int8_kernels.h"
#include "modules/quant/kernels/cpu/x86-inl.h"  // QAT_INT8_X86

#ifndef QAT_INT8_ROWS_ARGS
#define QAT_INT8_ROWS_ARGS
namespace qat::quant::int8::detail {
// One call's operands as raw pointers (no std:: types cross into per-target code).
struct RowsArgs {
  const std::int16_t* xs;  // rows of x - zx, xs_ld apart, zero from K to xs_ld (>= K + 32)
  std::int64_t M, xs_ld, K;
  std::int64_t O;
  const Requant* rq;
  std::uint8_t* y;
  std::int64_t ldy;
};
}  // namespace qat::quant::int8::detail
#endif

HWY_BEFORE_NAMESPACE();
namespace qat::quant::int8::HWY_NAMESPACE {
using detail::RowsArgs;

#if QAT_INT8_X86
#if HWY_TARGET == HWY_AVX2
using Vec = __m256i;
constexpr std::int64_t kStep = 16;  // k per vector (int16 lanes)
// RA * RW accumulators + RA rows of x + a weight vector + a product: more spill (GCC 12)
constexpr int kRowsW[5] = {0, 8, 4, 3, 2};
HWY_INLINE Vec zero() { return _mm256_setzero_si256(); }
HWY_INLINE Vec load_x(const std::int16_t* p) {
  return _mm256_loadu_si256(reinterpret_cast<const Vec*>(p));
}
HWY_INLINE Vec load_w(const std::int8_t* p) {
  return _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
HWY_INLINE std::int32_t lanes_sum(Vec v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
  return _mm_cvtsi128_si32(s);
}
HWY_INLINE Vec dot(Vec acc, Vec a, Vec b) { return _mm256_add_epi32(acc, _mm256_madd_epi16(a, b)); }
#else  // AVX3 / AVX3_DL
using Vec = __m512i;
constexpr std::int64_t kStep = 32;
constexpr int kRowsW[5] = {0, 8, 8, 6, 6};
HWY_INLINE Vec zero() { return _mm512_setzero_si512(); }
HWY_INLINE Vec load_x(const std::int16_t* p) { return _mm512_loadu_si512(p); }
HWY_INLINE Vec load_w(const std::int8_t* p) {
  return _mm512_cvtepi8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}
HWY_INLINE std::int32_t lanes_sum(Vec v) { return _mm512_reduce_add_epi32(v); }
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
#else  // the portable path: plain loops (the compiler's vectors)
constexpr int kRowsW[5] = {0, 4, 4, 2, 2};
#endif

namespace {

// The W rows of a tile for RA rows of x: the full width, or 4, 2, 1 for the last ones.
HWY_INLINE std::int64_t tile_rows(std::int64_t ra, std::int64_t left) {
  const std::int64_t full = kRowsW[ra];
  return left >= full ? full : left >= 4 ? 4 : left >= 2 ? 2 : 1;
}

#include "modules/quant/kernels/cpu/int8_rows_tile-inl.h"  // dot_tile, sweep, sweep_rows

#if HWY_TARGET == HWY_AVX2
// AVX-VNNI (the avx2_vnni path): the same tiles, vpmaddwd + vpaddd as one vpdpwssd.
#pragma GCC push_options
#pragma GCC target("avxvnni")
#undef QAT_TILE_TARGET
#define QAT_TILE_TARGET QAT_VNNI_TARGET("avxvnni")
namespace avx_vnni {
HWY_INLINE QAT_TILE_TARGET Vec dot(Vec acc, Vec a, Vec b) { return _mm256_dpwssd_avx_epi32(acc, a, b); }
#include "modules/quant/kernels/cpu/int8_rows_tile-inl.h"  // IWYU pragma: keep
}  // namespace avx_vnni
#undef QAT_TILE_TARGET
#define QAT_TILE_TARGET
#pragma GCC pop_options
#endif

}  // namespace

// Outputs [o0, o1) of every row (w: the weight row of o0, rows K apart): the int32 sums into
// acc (M x O), then the output stage.
void RowsRangeImpl(const RowsArgs& a, const std::int8_t* w, std::int64_t o0, std::int64_t o1,
                   std::int32_t* acc) {
#if HWY_TARGET == HWY_AVX2
  if (cpu::int8_avx_vnni())
    avx_vnni::sweep_rows(a, w, o0, o1, acc);
  else
#endif
    sweep_rows(a, w, o0, o1, acc);
  // the output stage of int8_kernels.h's requantize in vectors: the same float32 operations
  // (no contraction), Max / Min in the order that sends a NaN to lo, round half to even
  namespace hn = hwy::HWY_NAMESPACE;
  const hn::ScalableTag<float> df;
  const hn::RebindToSigned<decltype(df)> di;
  const hn::Rebind<std::uint8_t, decltype(di)> du8;
  const Requant& rq = *a.rq;
  const std::int64_t L = static_cast<std::int64_t>(hn::Lanes(df));
  const auto inv = hn::Set(df, rq.inv_scale);
  const auto lo = hn::Set(df, static_cast<float>(rq.lo - rq.zero_point));
  const auto hi = hn::Set(df, static_cast<float>(rq.hi - rq.zero_point));
  const auto zp = hn::Set(di, rq.zero_point);
  for (std::int64_t m = 0; m < a.M; ++m) {
    const std::int32_t* am = acc + m * a.O;
    std::uint8_t* ym = a.y + m * a.ldy;
    std::int64_t o = o0;
    for (; o + L <= o1; o += L) {
      const auto s = hn::Mul(hn::ConvertTo(df, hn::LoadU(di, am + o)), hn::LoadU(df, rq.scale + o));
      auto v = hn::Mul(rq.bias ? hn::Add(s, hn::LoadU(df, rq.bias + o)) : hn::Add(s, hn::Zero(df)), inv);
      v = hn::Min(hn::Max(v, lo), hi);
      hn::StoreU(hn::DemoteTo(du8, hn::Add(hn::NearestInt(v), zp)), du8, ym + o);
    }
    for (; o < o1; ++o) ym[o] = requantize(am[o], rq, o);
  }
}

}  // namespace qat::quant::int8::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include <algorithm>
#include <vector>

#include "framework/tensor/error.h"
#include "framework/tensor/parallel.h"

namespace qat::quant::int8 {

HWY_EXPORT(RowsRangeImpl);

void linear_u8s8_rows(const std::uint8_t* x, std::int64_t M, std::int64_t ldx, std::int32_t zx,
                      const std::int8_t* w, std::int64_t O, std::int64_t K, const Requant& rq,
                      std::uint8_t* y, std::int64_t ldy) {
  // |x - zx| <= 255, |w| <= 128: K products stay within K * 32640 of zero
  constexpr std::int64_t kMaxK = 2147483647LL / (255 * 128);
  QAT_REQUIRE(K >= 1 && K <= kMaxK, "int8::linear_u8s8_rows", "K = ", K, " is not in [1, ", kMaxK, "]");
  QAT_REQUIRE(zx >= 0 && zx <= 255, "int8::linear_u8s8_rows", "zero point ", zx, " is not in [0, 255]");
  if (M <= 0 || O <= 0) return;
  // xs: the rows of x - zx, zero-padded by a widest vector's k (32) and more. The kernels read
  // whole vectors: a weight row's last one runs up to 31 bytes past the row, times these
  // zeros. Past a row come the next rows; the last `tail` rows, which have fewer than 31 bytes
  // after them, run from a copy padded with zeros instead.
  constexpr std::int64_t kPad = 32;
  const std::int64_t ld = (K + 2 * kPad - 1) / kPad * kPad;
  std::vector<std::int16_t> xs(static_cast<std::size_t>(M * ld), 0);
  for (std::int64_t m = 0; m < M; ++m)
    for (std::int64_t k = 0; k < K; ++k)
      xs[static_cast<std::size_t>(m * ld + k)] = static_cast<std::int16_t>(x[m * ldx + k] - zx);
  const std::int64_t tail = K % kPad == 0 ? 0 : std::min(O, (K + kPad - 2) / K), first_tail = O - tail;
  std::vector<std::int8_t> copy(static_cast<std::size_t>(tail > 0 ? tail * K + kPad : 0), 0);
  std::copy_n(w + first_tail * K, tail * K, copy.data());
  std::vector<std::int32_t> acc(static_cast<std::size_t>(M * O));
  const detail::RowsArgs a{xs.data(), M, ld, K, O, &rq, y, ldy};
  auto range = [&](std::int64_t o0, std::int64_t o1) {
    const std::int64_t end = std::min(o1, std::max(o0, first_tail));
    if (o0 < end) QAT_DISPATCH(RowsRangeImpl)(a, w + o0 * K, o0, end, acc.data());
    if (end < o1)
      QAT_DISPATCH(RowsRangeImpl)(a, copy.data() + (end - first_tail) * K, end, o1, acc.data());
  };
  // blocks of 64 outputs on threads when the call is large enough (each sum is exact: the
  // bytes do not depend on the thread count)
  constexpr std::int64_t kBlock = 64;
  const std::int64_t blocks = (O + kBlock - 1) / kBlock;
  const int slots = M * O * K >= (1 << 21) ? parallel_slots(blocks) : 1;
  if (slots <= 1) return range(0, O);
  parallel_for_each(blocks, slots,
                    [&](std::int64_t b, int) { range(b * kBlock, std::min(O, (b + 1) * kBlock)); });
}

}  // namespace qat::quant::int8
#endif  // HWY_ONCE
