// The transforms of the int8 row Winograd (int8_winograd.h), compiled once per instruction set:
// the input transform and the integer part of the output one as plain loops over channels, which
// the compiler vectorises for each target (integer arithmetic: the same values on every path),
// the requantization in float32 as int8::requantize (AVX2 intrinsics on x86, built without
// contraction, so every path gives the same bits).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "modules/quant/kernels/cpu/int8_winograd.cpp"
#include "modules/quant/kernels/cpu/int8_winograd.h"

#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "framework/tensor/simd.h"
#include "modules/quant/kernels/cpu/x86-inl.h"  // QAT_INT8_X86

#ifndef QAT_INT8_WINOGRAD_TABLES
#define QAT_INT8_WINOGRAD_TABLES
namespace qat::quant::int8::kernels::detail {

// q^-1 modulo 2^32 for odd q (Newton: each step doubles the correct low bits, from 3 for q q = 1
// modulo 8).
constexpr std::uint32_t odd_inverse(std::uint32_t q) {
  std::uint32_t x = q;
  for (int i = 0; i < 5; ++i) x *= 2u - q * x;
  return x;
}

// scripts/winograd_matrices.py derives and checks these (its integer F(4, r) section).
// F(4, 3), points 0, 1, -1, 2, -2, infinity; L = 24 = 8 * 3.
inline constexpr RowTransform kF43{
    3,
    6,
    {{4, 0, -5, 0, 1, 0},
     {0, -4, -4, 1, 1, 0},
     {0, 4, -4, -1, 1, 0},
     {0, -2, -1, 2, 1, 0},
     {0, 2, -1, -2, 1, 0},
     {0, 4, 0, -5, 0, 1}},
    {{1, 0, 0}, {-1, -1, -1}, {-1, 1, -1}, {1, 2, 4}, {1, -2, 4}, {0, 0, 1}},
    {{6, 4, 4, 1, 1, 0}, {0, 4, -4, 2, -2, 0}, {0, 4, 4, 4, 4, 0}, {0, 4, -4, 8, -8, 24}},
    3,
    odd_inverse(3)};
// F(4, 5), points 0, 1, -1, 2, -2, 1/2, -1/2, infinity; L = 360 = 8 * 45.
inline constexpr RowTransform kF45{5,
                                   8,
                                   {{4, 0, -21, 0, 21, 0, -4, 0},
                                    {0, 4, 4, -17, -17, 4, 4, 0},
                                    {0, -4, 4, 17, -17, -4, 4, 0},
                                    {0, 2, 1, -10, -5, 8, 4, 0},
                                    {0, -2, 1, 10, -5, -8, 4, 0},
                                    {0, 4, 8, -5, -10, 1, 2, 0},
                                    {0, -4, 8, 5, -10, -1, 2, 0},
                                    {0, -4, 0, 21, 0, -21, 0, 4}},
                                   {{1, 0, 0, 0, 0},
                                    {-1, -1, -1, -1, -1},
                                    {-1, 1, -1, 1, -1},
                                    {1, 2, 4, 8, 16},
                                    {1, -2, 4, -8, 16},
                                    {16, 8, 4, 2, 1},
                                    {16, -8, 4, -2, 1},
                                    {0, 0, 0, 0, 1}},
                                   {{90, 20, 20, 1, 1, 8, 8, 0},
                                    {0, 20, -20, 2, -2, 4, -4, 0},
                                    {0, 20, 20, 4, 4, 2, 2, 0},
                                    {0, 20, -20, 8, -8, 1, -1, 90}},
                                   3,
                                   odd_inverse(45)};
static_assert(kF43.odd_inverse * 3u == 1u && kF45.odd_inverse * 45u == 1u);

}  // namespace qat::quant::int8::kernels::detail
#endif  // QAT_INT8_WINOGRAD_TABLES

HWY_BEFORE_NAMESPACE();
namespace qat::quant::int8::kernels::HWY_NAMESPACE {

template <int R>
constexpr const RowTransform& table() {
  if constexpr (R == 3)
    return detail::kF43;
  else
    return detail::kF45;
}

// Points 1, 2 / 3, 4 / 5, 6 are +-p: their rows of B agree on even s and are opposite on odd s,
// and their columns of A agree on even k and are opposite on odd k. The transforms compute each
// pair's even and odd parts once (E + O, E - O), half the terms.
template <int R>
constexpr bool plus_minus_pairs() {
  constexpr const RowTransform& T = table<R>();
  for (int p = 1; p + 1 < T.n - 1; p += 2) {
    for (int s = 0; s < T.n; ++s)
      if (T.B[p + 1][s] != (s % 2 ? -T.B[p][s] : T.B[p][s])) return false;
    for (int k = 0; k < kRowOut; ++k)
      if (T.A[k][p + 1] != (k % 2 ? -T.A[k][p] : T.A[k][p])) return false;
  }
  return true;
}
static_assert(plus_minus_pairs<3>() && plus_minus_pairs<5>());

// ---- scalar forms (the generic targets, and the channels past the vectors' multiples) ---------

// V_xi (h, t, c) = sum_s B[xi][s] x(h, 4 t + s, c), channels [c0, C): |V| <= 12750 (int16; sums
// of products of B's small integers and bytes, exact in int).
template <int R>
void input_rows_scalar(const std::uint8_t* __restrict x, std::int64_t rows, std::int64_t ld,
                       std::int64_t C, std::int64_t c0, std::int64_t tiles, std::int16_t* __restrict v,
                       std::int64_t plane) {
  constexpr const RowTransform& T = table<R>();
  constexpr int N = R + 3;
  const std::int64_t Cp = (C + 1) & ~std::int64_t{1};
  for (std::int64_t h = 0; h < rows; ++h)
    for (std::int64_t t = 0; t < tiles; ++t) {
      const std::uint8_t* d = x + h * ld + kRowOut * t * C;
      std::int16_t* out = v + (h * tiles + t) * Cp;
      for (std::int64_t c = c0; c < C; ++c)
        for (int xi = 0; xi < N; ++xi) {
          int sum = 0;
          for (int s = 0; s < N; ++s) sum += T.B[xi][s] * d[s * C + c];
          out[xi * plane + c] = static_cast<std::int16_t>(sum);
        }
      if (C != Cp)
        for (int xi = 0; xi < N; ++xi) out[xi * plane + C] = 0;
    }
}

// acc (k, o) for the 4 outputs of a tile, channels [o0, O): S_k = sum_xi A[k][xi] M_xi (wrapping),
// y = (S >> e) q^-1 sign-extended from 32 - e bits (int8_winograd.h), plus acc0.
template <int R>
void tile_sums_scalar(const RowOutput& g, const std::int32_t* m, std::int64_t o0, std::int32_t* acc) {
  constexpr const RowTransform& T = table<R>();
  constexpr int N = R + 3, e = T.shift;
  for (std::int64_t o = o0; o < g.O; ++o)
    for (int k = 0; k < kRowOut; ++k) {
      std::uint32_t s = 0;
      for (int xi = 0; xi < N; ++xi)
        s += static_cast<std::uint32_t>(T.A[k][xi]) * static_cast<std::uint32_t>(m[xi * g.mplane + o]);
      const std::uint32_t yq =
          static_cast<std::uint32_t>(static_cast<std::int32_t>(s) >> e) * T.odd_inverse;
      const std::int32_t y = static_cast<std::int32_t>(yq << e) >> e;
      acc[k * g.O + o] = static_cast<std::int32_t>(static_cast<std::uint32_t>(y) +
                                                   static_cast<std::uint32_t>(g.acc0[o]));
    }
}

// channels [o0, O) of acc requantized into y: int8::requantize's float32 operations
HWY_INLINE void requant_scalar(const std::int32_t* acc, const RowOutput& g, std::int64_t o0,
                               std::uint8_t* y) {
  for (std::int64_t o = o0; o < g.O; ++o) {
    float v = (static_cast<float>(acc[o]) * g.scale[o] + g.bias[o]) * g.inv_scale;
    v = v > g.lo ? v : g.lo;
    v = v < g.hi ? v : g.hi;
    y[o] = static_cast<std::uint8_t>(static_cast<std::int32_t>(std::nearbyint(v)) + g.zp);
  }
}

#if QAT_INT8_X86
// ---- x86: 16 channels of int16 (input) / 8 of int32 (output) per AVX2 vector -----------------
using V256 = __m256i;

// b x, b a compile-time integer: shifts for powers of two, vpmullw otherwise
template <int b>
HWY_INLINE V256 times16(V256 x) {
  if constexpr (b == 1)
    return x;
  else if constexpr ((b & (b - 1)) == 0)
    return _mm256_slli_epi16(x, __builtin_ctz(b));
  else
    return _mm256_mullo_epi16(x, _mm256_set1_epi16(b));
}
template <int b>
HWY_INLINE V256 times32(V256 x) {
  if constexpr (b == 1)
    return x;
  else if constexpr ((b & (b - 1)) == 0)
    return _mm256_slli_epi32(x, __builtin_ctz(b));
  else
    return _mm256_mullo_epi32(x, _mm256_set1_epi32(b));
}

// acc + sum over the s of parity `par` (0 even, 1 odd, 2 every s) of B[xi][s] d[s]
template <int R, int XI, int Par, int S = 0>
HWY_INLINE V256 b_terms(const V256* d, V256 acc) {
  constexpr const RowTransform& T = table<R>();
  if constexpr (S == T.n) {
    return acc;
  } else {
    constexpr int b = T.B[XI][S];
    if constexpr (b > 0 && (Par == 2 || S % 2 == Par)) acc = _mm256_add_epi16(acc, times16<b>(d[S]));
    if constexpr (b < 0 && (Par == 2 || S % 2 == Par)) acc = _mm256_sub_epi16(acc, times16<-b>(d[S]));
    return b_terms<R, XI, Par, S + 1>(d, acc);
  }
}

template <int R, int P = 1>
HWY_INLINE void b_pairs(const V256* d, std::int16_t* out, std::int64_t plane) {
  if constexpr (P + 1 < R + 2) {
    const V256 z = _mm256_setzero_si256();
    const V256 even = b_terms<R, P, 0>(d, z), odd = b_terms<R, P, 1>(d, z);
    _mm256_storeu_si256(reinterpret_cast<V256*>(out + P * plane), _mm256_add_epi16(even, odd));
    _mm256_storeu_si256(reinterpret_cast<V256*>(out + (P + 1) * plane), _mm256_sub_epi16(even, odd));
    b_pairs<R, P + 2>(d, out, plane);
  }
}

template <int R>
void input_rows(const std::uint8_t* __restrict x, std::int64_t rows, std::int64_t ld, std::int64_t C,
                std::int64_t tiles, std::int16_t* __restrict v, std::int64_t plane) {
  constexpr int N = R + 3;
  const std::int64_t Cp = (C + 1) & ~std::int64_t{1}, C16 = C / 16 * 16;
  for (std::int64_t h = 0; h < rows; ++h)
    for (std::int64_t t = 0; t < tiles; ++t) {
      const std::uint8_t* src = x + h * ld + kRowOut * t * C;
      std::int16_t* out = v + (h * tiles + t) * Cp;
      for (std::int64_t c = 0; c < C16; c += 16) {
        V256 d[N];
        for (int s = 0; s < N; ++s)
          d[s] =
              _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + s * C + c)));
        const V256 z = _mm256_setzero_si256();
        _mm256_storeu_si256(reinterpret_cast<V256*>(out + c), b_terms<R, 0, 2>(d, z));
        b_pairs<R>(d, out + c, plane);
        _mm256_storeu_si256(reinterpret_cast<V256*>(out + (N - 1) * plane + c),
                            b_terms<R, N - 1, 2>(d, z));
      }
    }
  if (C16 < C) input_rows_scalar<R>(x, rows, ld, C, C16, tiles, v, plane);
}

// S_k of 8 channels: A[k][0] M_0 + sum over the pairs of A[k][p] (k even: M_p + M_p+1, odd:
// M_p - M_p+1) + A[k][n-1] M_n-1, then y and acc0 (tile_sums_scalar)
template <int R, int K, int P = 1>
HWY_INLINE V256 a_pairs(const V256* sum, const V256* diff, V256 acc) {
  if constexpr (P + 1 < R + 2) {
    constexpr int a = table<R>().A[K][P];
    const V256 x = K % 2 ? diff[P / 2] : sum[P / 2];
    if constexpr (a > 0) acc = _mm256_add_epi32(acc, times32<a>(x));
    if constexpr (a < 0) acc = _mm256_sub_epi32(acc, times32<-a>(x));
    return a_pairs<R, K, P + 2>(sum, diff, acc);
  } else {
    return acc;
  }
}

template <int R, int K>
HWY_INLINE V256 a_row(const V256* mv, const V256* sum, const V256* diff, V256 acc0) {
  constexpr const RowTransform& T = table<R>();
  constexpr int N = R + 3, e = T.shift, a0 = T.A[K][0], an = T.A[K][N - 1];
  V256 s = a_pairs<R, K>(sum, diff, _mm256_setzero_si256());
  if constexpr (a0 != 0) s = _mm256_add_epi32(s, times32<a0>(mv[0]));
  if constexpr (an != 0) s = _mm256_add_epi32(s, times32<an>(mv[N - 1]));
  const V256 yq =
      _mm256_mullo_epi32(_mm256_srai_epi32(s, e), _mm256_set1_epi32(static_cast<int>(T.odd_inverse)));
  return _mm256_add_epi32(_mm256_srai_epi32(_mm256_slli_epi32(yq, e), e), acc0);
}

template <int R>
HWY_INLINE void tile_sums8(const RowOutput& g, const std::int32_t* m, std::int64_t o,
                           V256 (&acc)[kRowOut]) {
  constexpr int N = R + 3;
  V256 mv[N], sum[(N - 2) / 2], diff[(N - 2) / 2];
  for (int xi = 0; xi < N; ++xi)
    mv[xi] = _mm256_loadu_si256(reinterpret_cast<const V256*>(m + xi * g.mplane + o));
  for (int p = 0; p < (N - 2) / 2; ++p) {
    sum[p] = _mm256_add_epi32(mv[1 + 2 * p], mv[2 + 2 * p]);
    diff[p] = _mm256_sub_epi32(mv[1 + 2 * p], mv[2 + 2 * p]);
  }
  const V256 a0 = _mm256_loadu_si256(reinterpret_cast<const V256*>(g.acc0 + o));
  acc[0] = a_row<R, 0>(mv, sum, diff, a0);
  acc[1] = a_row<R, 1>(mv, sum, diff, a0);
  acc[2] = a_row<R, 2>(mv, sum, diff, a0);
  acc[3] = a_row<R, 3>(mv, sum, diff, a0);
}

// 8 accumulators requantized into 8 bytes (requant_scalar's operations; max first, so that a NaN
// maps to lo as there; cvtps rounds half to even under the default MXCSR)
HWY_INLINE void requant8(V256 a, const RowOutput& g, std::int64_t o, std::uint8_t* y) {
  __m256 v = _mm256_mul_ps(_mm256_cvtepi32_ps(a), _mm256_loadu_ps(g.scale + o));
  v = _mm256_mul_ps(_mm256_add_ps(v, _mm256_loadu_ps(g.bias + o)), _mm256_set1_ps(g.inv_scale));
  v = _mm256_min_ps(_mm256_max_ps(v, _mm256_set1_ps(g.lo)), _mm256_set1_ps(g.hi));
  const V256 q = _mm256_add_epi32(_mm256_cvtps_epi32(v), _mm256_set1_epi32(g.zp));
  const __m128i p16 = _mm_packs_epi32(_mm256_castsi256_si128(q), _mm256_extracti128_si256(q, 1));
  _mm_storel_epi64(reinterpret_cast<__m128i*>(y + o), _mm_packus_epi16(p16, p16));
}
constexpr std::int64_t kOutLanes = 8;
#else
constexpr std::int64_t kOutLanes = 0;  // (scalar only)
template <int R>
void input_rows(const std::uint8_t* x, std::int64_t rows, std::int64_t ld, std::int64_t C,
                std::int64_t tiles, std::int16_t* v, std::int64_t plane) {
  input_rows_scalar<R>(x, rows, ld, C, 0, tiles, v, plane);
}
#endif

void RowInputImpl(int r, const std::uint8_t* x, std::int64_t rows, std::int64_t ld, std::int64_t C,
                  std::int64_t tiles, std::int16_t* v, std::int64_t plane) {
  if (r == 3) return input_rows<3>(x, rows, ld, C, tiles, v, plane);
  input_rows<5>(x, rows, ld, C, tiles, v, plane);
}

template <int R>
void output_rows(const RowOutput& g) {
  const std::int64_t O = g.O, tiles = g.tiles, Ov = O / (kOutLanes > 0 ? kOutLanes : 1) * kOutLanes;
  thread_local std::vector<std::int32_t> buf;  // the scalar channels: (row of the pair, k, o)
  buf.resize(static_cast<std::size_t>(3 * kRowOut * O));
  std::int32_t* acc = buf.data();
  std::int32_t* best = acc + 2 * kRowOut * O;  // a pooled output's max
  const auto tile = [&](std::int64_t row) { return g.m + row * g.ldm; };
  if (!g.pool) {
    for (std::int64_t oh = 0; oh < g.Ho; ++oh)
      for (std::int64_t t = 0; t < tiles; ++t) {
        const std::int64_t outs = std::min<std::int64_t>(kRowOut, g.Wo - kRowOut * t);
        std::uint8_t* y = g.out + (oh * g.Wo + kRowOut * t) * O;
#if QAT_INT8_X86
        for (std::int64_t o = 0; o < Ov; o += kOutLanes) {
          V256 a[kRowOut];
          tile_sums8<R>(g, tile(oh * tiles + t), o, a);
          for (std::int64_t k = 0; k < outs; ++k) requant8(a[k], g, o, y + k * O);
        }
#endif
        if (Ov == O) continue;
        tile_sums_scalar<R>(g, tile(oh * tiles + t), Ov, acc);
        for (std::int64_t k = 0; k < outs; ++k) requant_scalar(acc + k * O, g, Ov, y + k * O);
      }
    return;
  }
  const std::int64_t Hq = g.Ho / 2, Wq = g.Wo / 2;
  for (std::int64_t qh = 0; qh < Hq; ++qh)
    for (std::int64_t t = 0; t < tiles; ++t) {
      // pooled columns 2 t + q: the max of outputs 4 t + 2 q, 4 t + 2 q + 1 of both rows
      const std::int64_t outs = std::min<std::int64_t>(2, Wq - 2 * t);
      std::uint8_t* y = g.out + (qh * Wq + 2 * t) * O;
#if QAT_INT8_X86
      for (std::int64_t o = 0; o < Ov; o += kOutLanes) {
        V256 a[kRowOut], b[kRowOut];
        tile_sums8<R>(g, tile(2 * qh * tiles + t), o, a);
        tile_sums8<R>(g, tile((2 * qh + 1) * tiles + t), o, b);
        for (std::int64_t q = 0; q < outs; ++q)
          requant8(_mm256_max_epi32(_mm256_max_epi32(a[2 * q], a[2 * q + 1]),
                                    _mm256_max_epi32(b[2 * q], b[2 * q + 1])),
                   g, o, y + q * O);
      }
#endif
      if (Ov == O) continue;
      tile_sums_scalar<R>(g, tile(2 * qh * tiles + t), Ov, acc);
      tile_sums_scalar<R>(g, tile((2 * qh + 1) * tiles + t), Ov, acc + kRowOut * O);
      for (std::int64_t q = 0; q < outs; ++q) {
        const std::int32_t* a = acc + 2 * q * O;
        const std::int32_t* b = acc + kRowOut * O + 2 * q * O;
        for (std::int64_t o = Ov; o < O; ++o)
          best[o] = std::max(std::max(a[o], a[O + o]), std::max(b[o], b[O + o]));
        requant_scalar(best, g, Ov, y + q * O);
      }
    }
}

void RowOutputImpl(int r, const RowOutput& g) {
  if (r == 3) return output_rows<3>(g);
  output_rows<5>(g);
}

}  // namespace qat::quant::int8::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace qat::quant::int8::kernels {

HWY_EXPORT(RowInputImpl);
HWY_EXPORT(RowOutputImpl);

const RowTransform* row_transform(int r) {
  return r == 3 ? &detail::kF43 : r == 5 ? &detail::kF45 : nullptr;
}

void row_input(const RowTransform& tr, const std::uint8_t* x, std::int64_t rows, std::int64_t ld,
               std::int64_t C, std::int64_t tiles, std::int16_t* v, std::int64_t plane) {
  QAT_DISPATCH(RowInputImpl)(tr.r, x, rows, ld, C, tiles, v, plane);
}

void row_output(const RowTransform& tr, const RowOutput& o) { QAT_DISPATCH(RowOutputImpl)(tr.r, o); }

}  // namespace qat::quant::int8::kernels
#endif  // HWY_ONCE
