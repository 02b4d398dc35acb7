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

#include <cmath>

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

// scripts/winograd_matrices.py derives and checks these (its integer F(m, r) section).
// F(4, 3), points 0, 1, -1, 2, -2, infinity; L = 24 = 8 * 3.
inline constexpr RowTransform kF43{
    kRowF43,
    4,
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
    24,
    3,
    odd_inverse(3)};
// F(4, 5), points 0, 1, -1, 2, -2, 1/2, -1/2, infinity; L = 360 = 8 * 45.
inline constexpr RowTransform kF45{kRowF45,
                                   4,
                                   5,
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
                                   360,
                                   3,
                                   odd_inverse(45)};
// F(5, 5), points 0, 1, -1, 2, -2, 1/2, -1/2, 3, infinity; L = 12600 = 8 * 1575.
inline constexpr RowTransform kF55{kRowF55,
                                   5,
                                   5,
                                   9,
                                   {{12, -4, -63, 21, 63, -21, -12, 4, 0},
                                    {0, -12, -8, 55, 34, -29, -8, 4, 0},
                                    {0, 12, -16, -47, 68, -5, -16, 4, 0},
                                    {0, -6, -1, 31, 5, -29, -4, 4, 0},
                                    {0, 6, -5, -29, 25, 19, -20, 4, 0},
                                    {0, -12, -20, 23, 25, -13, -5, 2, 0},
                                    {0, 12, -28, -7, 35, -7, -7, 2, 0},
                                    {0, -4, 0, 21, 0, -21, 0, 4, 0},
                                    {0, 12, -4, -63, 21, 63, -21, -12, 4}},
                                   {{1, 0, 0, 0, 0},
                                    {1, 1, 1, 1, 1},
                                    {1, -1, 1, -1, 1},
                                    {-1, -2, -4, -8, -16},
                                    {-1, 2, -4, 8, -16},
                                    {-16, -8, -4, -2, -1},
                                    {-16, 8, -4, 2, -1},
                                    {1, 3, 9, 27, 81},
                                    {0, 0, 0, 0, 1}},
                                   {{1050, 350, 175, 35, 7, 112, 80, 3, 0},
                                    {0, 350, -175, 70, -14, 56, -40, 9, 0},
                                    {0, 350, 175, 140, 28, 28, 20, 27, 0},
                                    {0, 350, -175, 280, -56, 14, -10, 81, 0},
                                    {0, 350, 175, 560, 112, 7, 5, 243, 3150}},
                                   12600,
                                   3,
                                   odd_inverse(1575)};
// Each table fits its arithmetic: |V| (centred inputs) and |U| (int8 weights) within int16, and
// L = 2^e q with q odd and q^-1 its inverse modulo 2^32.
constexpr bool consistent(const RowTransform& t) {
  for (int xi = 0; xi < t.n; ++xi) {
    int b = 0, g = 0;
    for (int s = 0; s < t.n; ++s) b += t.B[xi][s] < 0 ? -t.B[xi][s] : t.B[xi][s];
    for (int s = 0; s < t.r; ++s) g += t.G[xi][s] < 0 ? -t.G[xi][s] : t.G[xi][s];
    if (b * 128 > 32767 || g * 128 > 32767) return false;
  }
  const auto q = static_cast<std::uint32_t>(t.L >> t.shift);
  return t.n == t.m + t.r - 1 && (q & 1u) == 1u && static_cast<std::int32_t>(q << t.shift) == t.L &&
         q * t.odd_inverse == 1u;
}
static_assert(consistent(kF43) && consistent(kF45) && consistent(kF55));

}  // namespace qat::quant::int8::kernels::detail
#endif  // QAT_INT8_WINOGRAD_TABLES

HWY_BEFORE_NAMESPACE();
namespace qat::quant::int8::kernels::HWY_NAMESPACE {

// (no std:: templates in per-target code: an instantiation compiled with one target's flags may
// be the one the linker keeps for every caller)
HWY_INLINE std::int32_t imax(std::int32_t a, std::int32_t b) { return a > b ? a : b; }

template <int ID>
constexpr const RowTransform& table() {
  if constexpr (ID == kRowF43)
    return detail::kF43;
  else if constexpr (ID == kRowF45)
    return detail::kF45;
  else
    return detail::kF55;
}

// Points 1, 2 / 3, 4 / 5, 6 as +-p (F(4, r)): their rows of B agree on even s and are opposite
// on odd s, and their columns of A agree on even k and are opposite on odd k. The transforms then
// compute each pair's even and odd parts once (E + O, E - O), half the terms. (F(5, 5)'s extra
// point 3 breaks the symmetry of B and A's scaling: its transforms take every term.)
template <int ID>
constexpr bool plus_minus_pairs() {
  constexpr const RowTransform& T = table<ID>();
  if (T.n % 2 != 0) return false;
  for (int p = 1; p + 1 < T.n - 1; p += 2) {
    for (int s = 0; s < T.n; ++s)
      if (T.B[p + 1][s] != (s % 2 ? -T.B[p][s] : T.B[p][s])) return false;
    for (int k = 0; k < T.m; ++k)
      if (T.A[k][p + 1] != (k % 2 ? -T.A[k][p] : T.A[k][p])) return false;
  }
  return true;
}
static_assert(plus_minus_pairs<kRowF43>() && plus_minus_pairs<kRowF45>() &&
              !plus_minus_pairs<kRowF55>());

// ---- scalar forms (the generic targets, and the channels past the vectors' multiples) ---------

// V_xi (h, t, c) = sum_s B[xi][s] (x(h, m t + s, c) - 128), channels [c0, C) (int16: sums of
// products of B's small integers and int8 values, exact in int).
template <int ID>
void input_rows_scalar(const std::uint8_t* __restrict x, std::int64_t rows, std::int64_t ld,
                       std::int64_t C, std::int64_t c0, std::int64_t tiles, std::int16_t* __restrict v,
                       std::int64_t plane) {
  constexpr const RowTransform& T = table<ID>();
  const std::int64_t Cp = (C + 1) & ~std::int64_t{1};
  for (std::int64_t h = 0; h < rows; ++h)
    for (std::int64_t t = 0; t < tiles; ++t) {
      const std::uint8_t* d = x + h * ld + T.m * t * C;
      std::int16_t* out = v + (t * rows + h) * Cp;
      for (std::int64_t c = c0; c < C; ++c)
        for (int xi = 0; xi < T.n; ++xi) {
          int sum = 0;
          for (int s = 0; s < T.n; ++s) sum += T.B[xi][s] * (d[s * C + c] - 128);
          out[xi * plane + c] = static_cast<std::int16_t>(sum);
        }
      if (C != Cp)
        for (int xi = 0; xi < T.n; ++xi) out[xi * plane + C] = 0;
    }
}

// 2^e y (k, o) for the m outputs of a tile, channels [o0, O): S_k = sum_xi A[k][xi] M_xi
// (wrapping) = 2^e q y modulo 2^32, so S_k q^-1 = 2^e y modulo 2^32, which is 2^e y itself as
// |2^e y| < 2^31 (int8_winograd.h). (A 2 x 2 max pool may take it before y = 2^e y >> e.)
template <int ID>
void tile_sums_scalar(const RowOutput& g, const std::int32_t* m, std::int64_t o0, std::int32_t* ey,
                      std::int64_t lda) {
  constexpr const RowTransform& T = table<ID>();
  for (std::int64_t o = o0; o < g.O; ++o)
    for (int k = 0; k < T.m; ++k) {
      std::uint32_t s = 0;
      for (int xi = 0; xi < T.n; ++xi)
        s += static_cast<std::uint32_t>(T.A[k][xi]) * static_cast<std::uint32_t>(m[xi * g.mplane + o]);
      ey[k * lda + o] = static_cast<std::int32_t>(s * T.odd_inverse);
    }
}

// acc = y + acc0 of channels [o0, O) from 2^e y, requantized into y: int8::requantize's float32
// operations
template <int ID>
HWY_INLINE void requant_scalar(const std::int32_t* ey, const RowOutput& g, std::int64_t o0,
                               std::uint8_t* y) {
  for (std::int64_t o = o0; o < g.O; ++o) {
    const auto acc = static_cast<std::int32_t>(static_cast<std::uint32_t>(ey[o] >> table<ID>().shift) +
                                               static_cast<std::uint32_t>(g.acc0[o]));
    float v = (static_cast<float>(acc) * g.scale[o] + g.bias[o]) * g.inv_scale;
    v = v > g.lo ? v : g.lo;
    v = v < g.hi ? v : g.hi;
    y[o] = static_cast<std::uint8_t>(static_cast<std::int32_t>(std::nearbyint(v)) + g.zp);
  }
}

#if QAT_INT8_X86
// ---- x86: 16 channels of int16 (input) / 8 of int32 (output) per AVX2 vector -----------------
using V256 = __m256i;
constexpr std::int64_t kOutLanes = 8;

// int16 (the input transform) or int32 (the output transform) lanes: the operations times uses
template <int Bits>
struct Lanes;
template <>
struct Lanes<16> {
  static HWY_INLINE V256 shl(V256 x, int k) { return _mm256_slli_epi16(x, k); }
  static HWY_INLINE V256 add(V256 a, V256 b) { return _mm256_add_epi16(a, b); }
  static HWY_INLINE V256 sub(V256 a, V256 b) { return _mm256_sub_epi16(a, b); }
  static HWY_INLINE V256 mul(V256 x, int b) {
    return _mm256_mullo_epi16(x, _mm256_set1_epi16(static_cast<short>(b)));
  }
};
template <>
struct Lanes<32> {
  static HWY_INLINE V256 shl(V256 x, int k) { return _mm256_slli_epi32(x, k); }
  static HWY_INLINE V256 add(V256 a, V256 b) { return _mm256_add_epi32(a, b); }
  static HWY_INLINE V256 sub(V256 a, V256 b) { return _mm256_sub_epi32(a, b); }
  static HWY_INLINE V256 mul(V256 x, int b) { return _mm256_mullo_epi32(x, _mm256_set1_epi32(b)); }
};

// b x, b a compile-time integer > 0: a shift for 2^k, a shift and an add for 2^k +- 1, else a
// multiply
template <int Bits, int b>
HWY_INLINE V256 times(V256 x) {
  using L = Lanes<Bits>;
  if constexpr (b == 1)
    return x;
  else if constexpr ((b & (b - 1)) == 0)
    return L::shl(x, __builtin_ctz(b));
  else if constexpr (((b - 1) & (b - 2)) == 0)  // 2^k + 1
    return L::add(L::shl(x, __builtin_ctz(b - 1)), x);
  else if constexpr (((b + 1) & b) == 0)  // 2^k - 1
    return L::sub(L::shl(x, __builtin_ctz(b + 1)), x);
  else
    return L::mul(x, b);
}
template <int b>
HWY_INLINE V256 times16(V256 x) {
  return times<16, b>(x);
}
template <int b>
HWY_INLINE V256 times32(V256 x) {
  return times<32, b>(x);
}

// acc + sum over the s of parity `par` (0 even, 1 odd, 2 every s) of B[xi][s] d[s]
template <int ID, int XI, int Par, int S = 0>
HWY_INLINE V256 b_terms(const V256* d, V256 acc) {
  constexpr const RowTransform& T = table<ID>();
  if constexpr (S == T.n) {
    return acc;
  } else {
    constexpr int b = T.B[XI][S];
    if constexpr (b > 0 && (Par == 2 || S % 2 == Par)) acc = _mm256_add_epi16(acc, times16<b>(d[S]));
    if constexpr (b < 0 && (Par == 2 || S % 2 == Par)) acc = _mm256_sub_epi16(acc, times16<-b>(d[S]));
    return b_terms<ID, XI, Par, S + 1>(d, acc);
  }
}

// V_xi for the points 1 .. n - 2: by pairs (E + O, E - O) where the table has them, else each
template <int ID, int XI = 1>
HWY_INLINE void b_middle(const V256* d, std::int16_t* out, std::int64_t plane) {
  constexpr const RowTransform& T = table<ID>();
  const V256 z = _mm256_setzero_si256();
  if constexpr (XI < T.n - 1) {
    if constexpr (plus_minus_pairs<ID>()) {
      const V256 even = b_terms<ID, XI, 0>(d, z), odd = b_terms<ID, XI, 1>(d, z);
      _mm256_storeu_si256(reinterpret_cast<V256*>(out + XI * plane), _mm256_add_epi16(even, odd));
      _mm256_storeu_si256(reinterpret_cast<V256*>(out + (XI + 1) * plane), _mm256_sub_epi16(even, odd));
      b_middle<ID, XI + 2>(d, out, plane);
    } else {
      _mm256_storeu_si256(reinterpret_cast<V256*>(out + XI * plane), b_terms<ID, XI, 2>(d, z));
      b_middle<ID, XI + 1>(d, out, plane);
    }
  }
}

template <int ID>
void input_rows(const std::uint8_t* __restrict x, std::int64_t rows, std::int64_t ld, std::int64_t C,
                std::int64_t tiles, std::int16_t* __restrict v, std::int64_t plane) {
  constexpr const RowTransform& T = table<ID>();
  constexpr int N = T.n;
  const std::int64_t Cp = (C + 1) & ~std::int64_t{1}, C16 = C / 16 * 16;
  const V256 k128 = _mm256_set1_epi16(128);
  for (std::int64_t h = 0; h < rows; ++h)
    for (std::int64_t t = 0; t < tiles; ++t) {
      const std::uint8_t* src = x + h * ld + T.m * t * C;
      std::int16_t* out = v + (t * rows + h) * Cp;
      for (std::int64_t c = 0; c < C16; c += 16) {
        V256 d[N];
        for (int s = 0; s < N; ++s)
          d[s] = _mm256_sub_epi16(
              _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + s * C + c))),
              k128);
        const V256 z = _mm256_setzero_si256();
        _mm256_storeu_si256(reinterpret_cast<V256*>(out + c), b_terms<ID, 0, 2>(d, z));
        b_middle<ID>(d, out + c, plane);
        _mm256_storeu_si256(reinterpret_cast<V256*>(out + (N - 1) * plane + c),
                            b_terms<ID, N - 1, 2>(d, z));
      }
    }
  if (C16 < C) input_rows_scalar<ID>(x, rows, ld, C, C16, tiles, v, plane);
}

// acc + sum over the points J of A[K][J] x[J] (x: the M_xi, or for paired tables the pairs'
// sums (even K) or differences (odd K) at the pair's first point)
template <int ID, int K, int J = 0>
HWY_INLINE V256 a_terms(const V256* mv, const V256* sum, const V256* diff, V256 acc) {
  constexpr const RowTransform& T = table<ID>();
  if constexpr (J == T.n) {
    return acc;
  } else {
    constexpr bool paired = plus_minus_pairs<ID>() && J > 0 && J < T.n - 1;
    if constexpr (paired && J % 2 == 0) {  // (taken with J - 1)
      return a_terms<ID, K, J + 1>(mv, sum, diff, acc);
    } else {
      constexpr int a = T.A[K][J];
      const V256 x = !paired ? mv[J] : K % 2 ? diff[J / 2] : sum[J / 2];
      if constexpr (a > 0) acc = _mm256_add_epi32(acc, times32<a>(x));
      if constexpr (a < 0) acc = _mm256_sub_epi32(acc, times32<-a>(x));
      return a_terms<ID, K, J + 1>(mv, sum, diff, acc);
    }
  }
}

// 2^e y from S (tile_sums_scalar)
template <int ID>
HWY_INLINE V256 from_sum(V256 s) {
  return _mm256_mullo_epi32(s, _mm256_set1_epi32(static_cast<int>(table<ID>().odd_inverse)));
}

template <int ID, int K>
HWY_INLINE void a_rows(const V256* mv, const V256* sum, const V256* diff, V256* ey) {
  constexpr const RowTransform& T = table<ID>();
  if constexpr (K < T.m) {
    ey[K] = from_sum<ID>(a_terms<ID, K>(mv, sum, diff, _mm256_setzero_si256()));
    a_rows<ID, K + 1>(mv, sum, diff, ey);
  }
}

// F(5, 5)'s A as Toom-Cook's evaluation, A[k][j] = c_j p_j^k: each pair +-p scaled once,
// c+ M+ +- c- M-, then p^k by shifts (2^k, 2^(4 - k) for 1/2) and point 3's 3^(k + 1) by a
// running product; 25 terms instead of A's 36 (checked against A by the tests' every byte).
HWY_INLINE void a_rows_f55(const V256* mv, V256* ey) {
  static_assert(detail::kF55.A[0][0] == 1050 && detail::kF55.A[0][1] == 350 &&
                detail::kF55.A[0][2] == 175 && detail::kF55.A[0][3] == 35 && detail::kF55.A[0][4] == 7 &&
                detail::kF55.A[4][5] == 7 && detail::kF55.A[4][6] == 5 && detail::kF55.A[0][7] == 3 &&
                detail::kF55.A[4][8] == 3150);
  const auto add = [](V256 a, V256 b) { return _mm256_add_epi32(a, b); };
  const auto sub = [](V256 a, V256 b) { return _mm256_sub_epi32(a, b); };
  const V256 a1 = times32<350>(mv[1]), b1 = times32<175>(mv[2]), a2 = times32<35>(mv[3]),
             b2 = times32<7>(mv[4]), a3 = times32<7>(mv[5]), b3 = times32<5>(mv[6]);
  const V256 p1 = add(a1, b1), q1 = sub(a1, b1), p2 = add(a2, b2), q2 = sub(a2, b2), p3 = add(a3, b3),
             q3 = sub(a3, b3);
  const V256 t1 = times32<3>(mv[7]), t2 = times32<3>(t1), t3 = times32<3>(t2), t4 = times32<3>(t3),
             t5 = times32<3>(t4);
  ey[0] = from_sum<kRowF55>(add(add(times32<1050>(mv[0]), p1), add(add(p2, times32<16>(p3)), t1)));
  ey[1] = from_sum<kRowF55>(add(add(q1, times32<2>(q2)), add(times32<8>(q3), t2)));
  ey[2] = from_sum<kRowF55>(add(add(p1, times32<4>(p2)), add(times32<4>(p3), t3)));
  ey[3] = from_sum<kRowF55>(add(add(q1, times32<8>(q2)), add(times32<2>(q3), t4)));
  ey[4] = from_sum<kRowF55>(add(add(p1, times32<16>(p2)), add(add(p3, t5), times32<3150>(mv[8]))));
}

// 2^e y of a tile's m outputs for the 8 channels at o (tile_sums_scalar)
template <int ID>
HWY_INLINE void tile_sums8(const RowOutput& g, const std::int32_t* m, std::int64_t o, V256* ey) {
  constexpr const RowTransform& T = table<ID>();
  constexpr int N = T.n;
  V256 mv[N], sum[N / 2], diff[N / 2];
  for (int xi = 0; xi < N; ++xi)
    mv[xi] = _mm256_loadu_si256(reinterpret_cast<const V256*>(m + xi * g.mplane + o));
  if constexpr (ID == kRowF55) {
    a_rows_f55(mv, ey);
    return;
  }
  if constexpr (plus_minus_pairs<ID>())
    for (int p = 1; p + 1 < N - 1; p += 2) {
      sum[p / 2] = _mm256_add_epi32(mv[p], mv[p + 1]);
      diff[p / 2] = _mm256_sub_epi32(mv[p], mv[p + 1]);
    }
  a_rows<ID, 0>(mv, sum, diff, ey);
}

// 8 accumulators y + acc0 from 2^e y requantized into 8 bytes (requant_scalar's operations; max
// first, so that a NaN maps to lo as there; cvtps rounds half to even under the default MXCSR)
template <int ID>
HWY_INLINE void requant8(V256 ey, V256 acc0, const RowOutput& g, std::int64_t o, std::uint8_t* y) {
  const V256 a = _mm256_add_epi32(_mm256_srai_epi32(ey, table<ID>().shift), acc0);
  __m256 v = _mm256_mul_ps(_mm256_cvtepi32_ps(a), _mm256_loadu_ps(g.scale + o));
  v = _mm256_mul_ps(_mm256_add_ps(v, _mm256_loadu_ps(g.bias + o)), _mm256_set1_ps(g.inv_scale));
  v = _mm256_min_ps(_mm256_max_ps(v, _mm256_set1_ps(g.lo)), _mm256_set1_ps(g.hi));
  const V256 q = _mm256_add_epi32(_mm256_cvtps_epi32(v), _mm256_set1_epi32(g.zp));
  const __m128i p16 = _mm_packs_epi32(_mm256_castsi256_si128(q), _mm256_extracti128_si256(q, 1));
  _mm_storel_epi64(reinterpret_cast<__m128i*>(y + o), _mm_packus_epi16(p16, p16));
}
#else
constexpr std::int64_t kOutLanes = 0;  // (scalar only)
template <int ID>
void input_rows(const std::uint8_t* x, std::int64_t rows, std::int64_t ld, std::int64_t C,
                std::int64_t tiles, std::int16_t* v, std::int64_t plane) {
  input_rows_scalar<ID>(x, rows, ld, C, 0, tiles, v, plane);
}
#endif

void RowInputImpl(int id, const std::uint8_t* x, std::int64_t rows, std::int64_t ld, std::int64_t C,
                  std::int64_t tiles, std::int16_t* v, std::int64_t plane) {
  if (id == kRowF43) return input_rows<kRowF43>(x, rows, ld, C, tiles, v, plane);
  if (id == kRowF45) return input_rows<kRowF45>(x, rows, ld, C, tiles, v, plane);
  input_rows<kRowF55>(x, rows, ld, C, tiles, v, plane);
}

template <int ID>
void output_rows(const RowOutput& g) {
  constexpr const RowTransform& T = table<ID>();
  constexpr int Mo = T.m;
  const std::int64_t O = g.O, tiles = g.tiles, Ov = O / (kOutLanes > 0 ? kOutLanes : 1) * kOutLanes;
  const std::int64_t W = tiles * Mo;  // the tiles' columns (>= Wo)
  const auto tile = [&](std::int64_t oh, std::int64_t t) { return g.m + (oh * tiles + t) * g.ldm; };
  if (!g.pool) {
    for (std::int64_t oh = 0; oh < g.Ho; ++oh)
      for (std::int64_t t = 0; t < tiles; ++t) {
        const std::int64_t outs = g.Wo - Mo * t < Mo ? g.Wo - Mo * t : Mo;
        std::uint8_t* y = g.out + (oh * g.ld_out + Mo * t) * O;
#if QAT_INT8_X86
        for (std::int64_t o = 0; o < Ov; o += kOutLanes) {
          const V256 acc0 = _mm256_loadu_si256(reinterpret_cast<const V256*>(g.acc0 + o));
          V256 ey[Mo];
          tile_sums8<ID>(g, tile(oh, t), o, ey);
          for (std::int64_t k = 0; k < outs; ++k) requant8<ID>(ey[k], acc0, g, o, y + k * O);
        }
#endif
        if (Ov == O) continue;
        tile_sums_scalar<ID>(g, tile(oh, t), Ov, g.scratch, O);
        for (std::int64_t k = 0; k < outs; ++k) requant_scalar<ID>(g.scratch + k * O, g, Ov, y + k * O);
      }
    return;
  }
  // pooled: the max over each 2 x 2 window of 2^e y (max commutes with 2^e > 0 and with adding
  // acc0), then y + acc0 requantized once; windows may straddle tiles (m = 5)
  const std::int64_t Hq = g.Ho / 2, Wq = g.Wo / 2;
  for (std::int64_t qh = 0; qh < Hq; ++qh) {
    std::uint8_t* y = g.out + qh * g.ld_out * O;
#if QAT_INT8_X86
    for (std::int64_t o = 0; o < Ov; o += kOutLanes) {
      const V256 acc0 = _mm256_loadu_si256(reinterpret_cast<const V256*>(g.acc0 + o));
      V256 even = _mm256_setzero_si256();  // the column max of the last even column
      for (std::int64_t t = 0; t < tiles; ++t) {
        V256 a[Mo], b[Mo];
        tile_sums8<ID>(g, tile(2 * qh, t), o, a);
        tile_sums8<ID>(g, tile(2 * qh + 1, t), o, b);
        for (int k = 0; k < Mo; ++k) {
          const std::int64_t col = Mo * t + k;
          const V256 v = _mm256_max_epi32(a[k], b[k]);
          if (col % 2 == 0)
            even = v;
          else if (col / 2 < Wq)
            requant8<ID>(_mm256_max_epi32(even, v), acc0, g, o, y + col / 2 * O);
        }
      }
    }
#endif
    if (Ov == O) continue;
    std::int32_t* ey = g.scratch;  // both rows' 2^e y (row, column, o), the scalar channels
    std::int32_t* best = ey + 2 * W * O;
    for (std::int64_t r = 0; r < 2; ++r)
      for (std::int64_t t = 0; t < tiles; ++t)
        tile_sums_scalar<ID>(g, tile(2 * qh + r, t), Ov, ey + (r * W + t * Mo) * O, O);
    for (std::int64_t q = 0; q < Wq; ++q) {
      const std::int32_t* a = ey + 2 * q * O;
      const std::int32_t* b = a + W * O;
      for (std::int64_t o = Ov; o < O; ++o) best[o] = imax(imax(a[o], a[O + o]), imax(b[o], b[O + o]));
      requant_scalar<ID>(best, g, Ov, y + q * O);
    }
  }
}

void RowOutputImpl(int id, const RowOutput& g) {
  if (id == kRowF43) return output_rows<kRowF43>(g);
  if (id == kRowF45) return output_rows<kRowF45>(g);
  output_rows<kRowF55>(g);
}

}  // namespace qat::quant::int8::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace qat::quant::int8::kernels {

HWY_EXPORT(RowInputImpl);
HWY_EXPORT(RowOutputImpl);

const RowTransform* row_transform(int m, int r) {
  if (m == 4 && r == 3) return &detail::kF43;
  if (m == 4 && r == 5) return &detail::kF45;
  if (m == 5 && r == 5) return &detail::kF55;
  return nullptr;
}

void row_input(const RowTransform& tr, const std::uint8_t* x, std::int64_t rows, std::int64_t ld,
               std::int64_t C, std::int64_t tiles, std::int16_t* v, std::int64_t plane) {
  QAT_DISPATCH(RowInputImpl)(tr.id, x, rows, ld, C, tiles, v, plane);
}

void row_output(const RowTransform& tr, const RowOutput& o) { QAT_DISPATCH(RowOutputImpl)(tr.id, o); }

}  // namespace qat::quant::int8::kernels
#endif  // HWY_ONCE
