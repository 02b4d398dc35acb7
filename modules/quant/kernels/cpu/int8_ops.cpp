// The int8 model's data movement around the GEMM, compiled once per instruction set:
// quantize / dequantize, byte transposes between NCHW and channels-last, widening to uint16 for
// the pairs format, uint8 max pooling (NCHW planes and channels-last), and the elementwise int8
// functional ops (bit-exact with the fake-quantized model: compiled with -ffp-contract=off).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "modules/quant/kernels/cpu/int8_ops.cpp"
#include "modules/quant/kernels/cpu/int8_ops.h"

#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <algorithm>
#include <cmath>

#include "framework/tensor/simd.h"
#include "modules/quant/kernels/cpu/common-inl.h"
#include "modules/quant/kernels/cpu/x86-inl.h"  // QAT_INT8_X86

HWY_BEFORE_NAMESPACE();
namespace qat::quant::int8::kernels::HWY_NAMESPACE {

// dst[c ldd + r] = src[r lds + c]; x86: 16 x 16 blocks in SSE2 registers (four rounds of
// t[2i] = lo(r[i], r[i + 8]), t[2i + 1] = hi(r[i], r[i + 8]) byte interleaves transpose them).
void TransposeImpl(const std::uint8_t* __restrict src, std::int64_t rows, std::int64_t cols,
                   std::int64_t lds, std::uint8_t* __restrict dst, std::int64_t ldd) {
  if (rows == 1) {
    for (std::int64_t c = 0; c < cols; ++c) dst[c * ldd] = src[c];
    return;
  }
  if (cols == 1) {
    for (std::int64_t r = 0; r < rows; ++r) dst[r] = src[r * lds];
    return;
  }
  std::int64_t r0 = 0;
#if QAT_INT8_X86
  for (; r0 + 16 <= rows; r0 += 16) {
    std::int64_t c0 = 0;
    for (; c0 + 16 <= cols; c0 += 16) {
      __m128i v[16], t[16];
      for (int i = 0; i < 16; ++i)
        v[i] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + (r0 + i) * lds + c0));
      for (int round = 0; round < 4; ++round) {
        for (int i = 0; i < 8; ++i) {
          t[2 * i] = _mm_unpacklo_epi8(v[i], v[i + 8]);
          t[2 * i + 1] = _mm_unpackhi_epi8(v[i], v[i + 8]);
        }
        for (int i = 0; i < 16; ++i) v[i] = t[i];
      }
      for (int i = 0; i < 16; ++i)
        _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + (c0 + i) * ldd + r0), v[i]);
    }
    for (std::int64_t c = c0; c < cols; ++c)
      for (std::int64_t r = r0; r < r0 + 16; ++r) dst[c * ldd + r] = src[r * lds + c];
  }
#endif
  for (std::int64_t c = 0; c < cols; ++c)
    for (std::int64_t r = r0; r < rows; ++r) dst[c * ldd + r] = src[r * lds + c];
}

void WidenImpl(const std::uint8_t* __restrict src, std::int64_t n, std::uint16_t* __restrict dst) {
  for (std::int64_t i = 0; i < n; ++i) dst[i] = src[i];
}

// y = scale (q - zp), exact in float (|q - zp| <= 255) then one rounding
void DequantizeImpl(const std::uint8_t* __restrict q, std::int64_t n, float scale, std::int32_t zp,
                    float* __restrict y) {
  for (std::int64_t i = 0; i < n; ++i)
    y[i] = static_cast<float>(static_cast<std::int32_t>(q[i]) - zp) * scale;
}

// Blocks of kPoolRows output rows (over all planes): the max over the kh input rows of each
// into m (rows of `used` bytes; 16-byte vectors, the last one overlapping), then over kw
// columns. 2 x 2 stride 2 with W = 2 Wo: m is pairs of adjacent bytes end to end, paired with
// ConcatEven / ConcatOdd across row boundaries.
void MaxPoolImpl(const std::uint8_t* __restrict x, std::int64_t planes, std::int64_t H, std::int64_t W,
                 std::int64_t kh, std::int64_t kw, std::int64_t sh, std::int64_t sw, std::int64_t Ho,
                 std::int64_t Wo, std::uint8_t* __restrict y, std::uint8_t* __restrict m) {
  namespace hn = hwy::HWY_NAMESPACE;
  const std::int64_t used = (Wo - 1) * sw + kw;  // input columns the windows cover
  const std::int64_t rows = planes * Ho;
  for (std::int64_t q0 = 0; q0 < rows; q0 += kPoolRows) {
    const std::int64_t nb = rows - q0 < kPoolRows ? rows - q0 : kPoolRows;
    for (std::int64_t q = q0; q < q0 + nb; ++q) {
      const std::int64_t pl = q / Ho, oh = q % Ho;
      const std::uint8_t* __restrict in = x + (pl * H + oh * sh) * W;
      std::uint8_t* __restrict mr = m + (q - q0) * used;
      std::int64_t j = 0;
#if HWY_TARGET != HWY_SCALAR
      const hn::CappedTag<std::uint8_t, 16> d;
      constexpr std::int64_t N = 16;
      if (hn::Lanes(d) == 16 && used >= N) {
        for (;; j += N) {
          if (j + N > used) j = used - N;  // the last vector overlaps the previous one
          auto v = hn::LoadU(d, in + j);
          for (std::int64_t i = 1; i < kh; ++i) v = hn::Max(v, hn::LoadU(d, in + i * W + j));
          hn::StoreU(v, d, mr + j);
          if (j + N == used) break;
        }
        j = used;
      } else if (hn::Lanes(d) == 16 && used >= 8) {  // two overlapping halves
        const hn::CappedTag<std::uint8_t, 8> d8;
        for (const std::int64_t at : {std::int64_t{0}, used - 8}) {
          auto v = hn::LoadU(d8, in + at);
          for (std::int64_t i = 1; i < kh; ++i) v = hn::Max(v, hn::LoadU(d8, in + i * W + at));
          hn::StoreU(v, d8, mr + at);
        }
        j = used;
      }
#endif
      for (; j < used; ++j) {
        std::uint8_t v = in[j];
        for (std::int64_t i = 1; i < kh; ++i) v = v > in[i * W + j] ? v : in[i * W + j];
        mr[j] = v;
      }
    }
    std::uint8_t* __restrict out = y + q0 * Wo;
    if (kw == 2 && sw == 2 && used == 2 * Wo) {
      const std::int64_t n = nb * Wo;
      std::int64_t o = 0;
#if HWY_TARGET != HWY_SCALAR
      const hn::ScalableTag<std::uint8_t> df;
      const auto NF = static_cast<std::int64_t>(hn::Lanes(df));
      for (; o + NF <= n; o += NF) {
        const auto lo = hn::LoadU(df, m + 2 * o), hi = hn::LoadU(df, m + 2 * o + NF);
        hn::StoreU(hn::Max(hn::ConcatEven(df, hi, lo), hn::ConcatOdd(df, hi, lo)), df, out + o);
      }
#endif
      for (; o < n; ++o) out[o] = m[2 * o] > m[2 * o + 1] ? m[2 * o] : m[2 * o + 1];
      continue;
    }
    for (std::int64_t q = 0; q < nb; ++q)
      for (std::int64_t o = 0; o < Wo; ++o) {
        const std::uint8_t* p = m + q * used + o * sw;
        std::uint8_t best = p[0];
        for (std::int64_t j = 1; j < kw; ++j) best = best > p[j] ? best : p[j];
        out[q * Wo + o] = best;
      }
  }
}

// y[n, oh, ow, :] = max over the window's taps inside the image of x[n, h, w, :]: C-byte rows,
// in 16-byte vectors (the last one overlapping) when C >= 16 and the window is inside.
void MaxPoolNhwcImpl(const std::uint8_t* __restrict x, std::int64_t N, std::int64_t H, std::int64_t W,
                     std::int64_t C, std::int64_t kh, std::int64_t kw, std::int64_t sh, std::int64_t sw,
                     std::int64_t ph, std::int64_t pw, std::int64_t Ho, std::int64_t Wo,
                     std::uint8_t* __restrict y) {
  namespace hn = hwy::HWY_NAMESPACE;
  for (std::int64_t n = 0; n < N; ++n)
    for (std::int64_t oh = 0; oh < Ho; ++oh)
      for (std::int64_t ow = 0; ow < Wo; ++ow) {
        std::uint8_t* __restrict out = y + ((n * Ho + oh) * Wo + ow) * C;
        const std::int64_t h0 = oh * sh - ph, w0 = ow * sw - pw;
#if HWY_TARGET != HWY_SCALAR
        const bool inside = h0 >= 0 && h0 + kh <= H && w0 >= 0 && w0 + kw <= W;
        const hn::CappedTag<std::uint8_t, 16> d;
        if (inside && hn::Lanes(d) == 16 && C >= 16) {
          const std::uint8_t* in = x + ((n * H + h0) * W + w0) * C;
          for (std::int64_t c = 0;; c += 16) {
            if (c + 16 > C) c = C - 16;
            auto v = hn::LoadU(d, in + c);
            for (std::int64_t i = 0; i < kh; ++i)
              for (std::int64_t j = 0; j < kw; ++j)
                v = hn::Max(v, hn::LoadU(d, in + (i * W + j) * C + c));
            hn::StoreU(v, d, out + c);
            if (c + 16 == C) break;
          }
          continue;
        }
#endif
        for (std::int64_t c = 0; c < C; ++c) out[c] = 0;
        for (std::int64_t i = 0; i < kh; ++i) {
          const std::int64_t h = h0 + i;
          if (h < 0 || h >= H) continue;
          for (std::int64_t j = 0; j < kw; ++j) {
            const std::int64_t w = w0 + j;
            if (w < 0 || w >= W) continue;
            const std::uint8_t* __restrict in = x + ((n * H + h) * W + w) * C;
            for (std::int64_t c = 0; c < C; ++c) out[c] = out[c] > in[c] ? out[c] : in[c];
          }
        }
      }
}

// ---- elementwise int8 ops ----------------------------------------------------------------------
// x = (q - z) s as the fake quantizer's y = (clamp(q) - z) s; v = op(x_a, x_b); the output
// fake quantizer's q = round_half_even(v inv) + z, clamped with its selects (FqStep).
namespace hn = hwy::HWY_NAMESPACE;
namespace qk = ::qat::quant::kernels::HWY_NAMESPACE;

// The magic-number domain (common-inl.h qk::kMagic = M = 1.5 2^23, whose float has ulp 1 and
// low mantissa bits 0): fl(w + M) = M + round_half_even(w) for |w| < 2^22, and M + c for a
// code c is the float with bits kMagicBits + c.
using qk::kMagic;
constexpr std::int32_t kMagicBits = 0x4B400000;

// An input's dequantization (q - z) s. kMagicIn (z an integer, |z| <= 2^21): q's float M + q
// from its bits (an integer or, no conversion) minus M + z, which is q - z exactly; z holds
// M + z then. The same values either way.
struct InConsts {
  qk::VF s, z;
};
HWY_INLINE bool MagicIn(InQuant q) {
  return q.zero_point == __builtin_nearbyintf(q.zero_point) && std::abs(q.zero_point) <= 2097152.0f;
}
template <bool kMagicIn>
HWY_INLINE InConsts Consts(InQuant q) {
  const qk::DF df;
  return {hn::Set(df, q.scale), hn::Set(df, kMagicIn ? q.zero_point + kMagic : q.zero_point)};
}
template <bool kMagicIn>
HWY_INLINE qk::VF Dequant(const std::uint8_t* p, const InConsts& k) {
  const qk::DF df;
  const qk::DI di;
  const qk::VI codes = hn::PromoteTo(di, hn::LoadU(qk::DU8(), p));
  const qk::VF q =
      kMagicIn ? hn::BitCast(df, hn::Or(codes, hn::Set(di, kMagicBits))) : hn::ConvertTo(df, codes);
  return hn::Mul(hn::Sub(q, k.z), k.s);
}
// The same for one broadcast code, in scalar float (the same two roundings).
HWY_INLINE qk::VF DequantOne(std::uint8_t q, InQuant k) {
  const float x = (static_cast<float>(q) - k.zero_point) * k.scale;
  return hn::Set(qk::DF(), x);
}

// The output's codes as int32 lanes 0 .. 255 (CodeVectors stores them).
struct OutConsts {
  qk::VF inv, z, lo, hi;
};
HWY_INLINE OutConsts Consts(OutQuant q) {
  const qk::DF df;
  return {hn::Set(df, q.inv), hn::Set(df, q.zero_point), hn::Set(df, q.lo), hn::Set(df, q.hi)};
}
HWY_INLINE qk::VI Code(qk::VF v, const OutConsts& k) {
  const qk::VF q = hn::Add(qk::RoundEven(hn::Mul(v, k.inv)), k.z);
  qk::VF c = hn::IfThenElse(hn::Gt(q, k.lo), q, k.lo);
  c = hn::IfThenElse(hn::Lt(c, k.hi), c, k.hi);
  return hn::ConvertTo(qk::DI(), c);
}

// The same codes in fewer instructions where |v inv| < 2^22 for every input (MagicFits): in
// the magic-number domain adding z and clamping stay exact, and the code is the float's bits
// minus M's. No rounding or conversion.
struct MagicConsts {
  qk::VF inv, m, z, lo, hi;  // lo, hi: + M
};
HWY_INLINE MagicConsts Magic(OutQuant q) {
  const qk::DF df;
  return {hn::Set(df, q.inv), hn::Set(df, kMagic), hn::Set(df, q.zero_point), hn::Set(df, q.lo + kMagic),
          hn::Set(df, q.hi + kMagic)};
}
// t = fl(v inv) + M is M + round_half_even(v inv) where |v inv| < 2^22 and lies past the
// clamp's ends elsewhere (for zero points and bounds below 2^21); NaN clamps to lo (GtOr).
HWY_INLINE qk::VI Code(qk::VF v, const MagicConsts& k) {
  const qk::VF t = hn::Add(hn::Add(hn::Mul(v, k.inv), k.m), k.z);
  const qk::VF c = qk::LtOr(qk::GtOr(t, k.lo), k.hi);
  return hn::Sub(hn::BitCast(qk::DI(), c), hn::Set(qk::DI(), kMagicBits));
}

// One vector of codes 0 .. 255 as kNF bytes.
HWY_INLINE void StoreCodes(qk::VI c, std::uint8_t* p) {
  hn::StoreU(hn::DemoteTo(qk::DU8(), c), qk::DU8(), p);
}

// y[i] for the whole vectors of n: code_at(i) gives the codes of elements i .. i + kNF, four
// vectors' in one store (StoreBytes4: two packs and a permute per four vectors, where a
// demotion per vector took three shuffles on AVX2). 2^20 elements, avx2, with the input's
// magic-number dequantization (Dequant): int8 add 186-194 -> 152 us, requantize 139-143 ->
// 108-109, quantize_u8 65-67 -> 48-50 (784,000 floats); avx512_vnni unchanged (77-82 us add).
template <class CodeAt>
HWY_INLINE std::int64_t CodeVectors(std::int64_t n, std::uint8_t* y, CodeAt code_at) {
  constexpr std::int64_t N = qk::kNF;
  std::int64_t i = 0;
  for (; i + 4 * N <= n; i += 4 * N) {
    qk::VI c[4];
    for (int j = 0; j < 4; ++j) c[j] = code_at(i + j * N);
    qk::StoreBytes4(c, y + i);
  }
  for (; i + N <= n; i += N) StoreCodes(code_at(i), y + i);
  return i;
}

// Whether every v = op(x_a, x_b) of the inputs' codes (0..255) has |v inv| < 2^22 with room
// (x = (q - z) s; double bounds, a margin of 2 for the float roundings), and the output's
// zero point and range are codes, so that the magic domain holds them.
bool MagicFits(double max_v, OutQuant out) {
  return max_v * static_cast<double>(out.inv) * 2 < 4194304.0 && out.zero_point >= 0 &&
         out.zero_point <= 255 && out.lo >= 0 && out.hi <= 255 && out.lo <= out.hi;
}
double MaxAbs(InQuant q) {
  return std::max(std::abs(0.0 - q.zero_point), std::abs(255.0 - q.zero_point)) * std::abs(q.scale);
}

// q = clamp(nearbyint(x inv) + zp, lo, hi): with lo, hi codes and zp an integer below 2^21,
// the magic-number domain on x itself (x may be anything: huge values lie past the clamp, NaN
// goes to lo); else the plain loop (vroundps in the current rounding mode).
void QuantizeImpl(const float* __restrict x, std::int64_t n, float inv, float zp, float lo, float hi,
                  std::uint8_t* __restrict q) {
  std::int64_t i = 0;
  if (lo >= 0 && hi <= 255 && lo <= hi && lo == __builtin_nearbyintf(lo) &&
      hi == __builtin_nearbyintf(hi) && zp == __builtin_nearbyintf(zp) && zp > -2097152.0f &&
      zp < 2097152.0f) {
    const MagicConsts k = Magic(OutQuant{inv, zp, lo, hi});
    i = CodeVectors(n, q, [&](std::int64_t j) { return Code(hn::LoadU(qk::DF(), x + j), k); });
  }
  for (; i < n; ++i) {
    const float v = __builtin_nearbyintf(x[i] * inv) + zp;
    const float c = v > lo ? v : lo;
    q[i] = static_cast<std::uint8_t>(static_cast<std::int32_t>(c < hi ? c : hi));
  }
}

template <BinaryOp kOp>
HWY_INLINE qk::VF Apply(qk::VF a, qk::VF b) {
  if constexpr (kOp == BinaryOp::Mul) return hn::Mul(a, b);
  const qk::VF v = hn::Add(a, b);
  if constexpr (kOp == BinaryOp::AddReLU) {  // relu(v) = v > 0 ? v : 0 (-0 and 0 requantize alike)
    const qk::VF zero = hn::Zero(qk::DF());
    return hn::IfThenElse(hn::Gt(v, zero), v, zero);
  }
  return v;
}

// Full vectors, then the tail through kNF-element buffers (as FakeQuant).
template <BinaryOp kOp, bool kMagicIn, class Out>
void BinaryLoop(const std::uint8_t* __restrict a, std::int64_t sa, InQuant in_a,
                const std::uint8_t* __restrict b, std::int64_t sb, InQuant in_b, std::int64_t n,
                const Out& ko, std::uint8_t* __restrict y) {
  constexpr std::int64_t N = qk::kNF;
  const InConsts ka = Consts<kMagicIn>(in_a), kb = Consts<kMagicIn>(in_b);
  const qk::VF ca = DequantOne(a[0], in_a), cb = DequantOne(b[0], in_b);  // when broadcast
  const auto xa = [&](const std::uint8_t* p) { return sa != 0 ? Dequant<kMagicIn>(p, ka) : ca; };
  const auto xb = [&](const std::uint8_t* p) { return sb != 0 ? Dequant<kMagicIn>(p, kb) : cb; };
  std::int64_t i = 0;
  if (sa != 0 && sb != 0) {
    i = CodeVectors(n, y, [&](std::int64_t j) { return Code(Apply<kOp>(xa(a + j), xb(b + j)), ko); });
  } else if (sa != 0) {
    i = CodeVectors(n, y, [&](std::int64_t j) { return Code(Apply<kOp>(xa(a + j), cb), ko); });
  } else if (sb != 0) {
    i = CodeVectors(n, y, [&](std::int64_t j) { return Code(Apply<kOp>(ca, xb(b + j)), ko); });
  } else {
    i = CodeVectors(n, y, [&](std::int64_t) { return Code(Apply<kOp>(ca, cb), ko); });
  }
  if (N == 1 || i == n) return;
  std::uint8_t ab[N] = {}, bb[N] = {}, yb[N];
  if (sa != 0) std::memcpy(ab, a + i, n - i);
  if (sb != 0) std::memcpy(bb, b + i, n - i);
  StoreCodes(Code(Apply<kOp>(xa(ab), xb(bb)), ko), yb);
  std::memcpy(y + i, yb, n - i);
}

template <bool kMagicIn, class Out>
void BinaryOps(BinaryOp op, const std::uint8_t* a, std::int64_t sa, InQuant in_a, const std::uint8_t* b,
               std::int64_t sb, InQuant in_b, std::int64_t n, const Out& out, std::uint8_t* y) {
  switch (op) {
    case BinaryOp::Add:
      return BinaryLoop<BinaryOp::Add, kMagicIn>(a, sa, in_a, b, sb, in_b, n, out, y);
    case BinaryOp::AddReLU:
      return BinaryLoop<BinaryOp::AddReLU, kMagicIn>(a, sa, in_a, b, sb, in_b, n, out, y);
    case BinaryOp::Mul:
      return BinaryLoop<BinaryOp::Mul, kMagicIn>(a, sa, in_a, b, sb, in_b, n, out, y);
  }
}

template <class Out>
void BinaryOps(BinaryOp op, const std::uint8_t* a, std::int64_t sa, InQuant in_a, const std::uint8_t* b,
               std::int64_t sb, InQuant in_b, std::int64_t n, const Out& out, std::uint8_t* y) {
  if (MagicIn(in_a) && MagicIn(in_b))
    BinaryOps<true>(op, a, sa, in_a, b, sb, in_b, n, out, y);
  else
    BinaryOps<false>(op, a, sa, in_a, b, sb, in_b, n, out, y);
}

void BinaryImpl(BinaryOp op, const std::uint8_t* a, std::int64_t sa, InQuant in_a, const std::uint8_t* b,
                std::int64_t sb, InQuant in_b, std::int64_t n, OutQuant out, std::uint8_t* y) {
  if (n <= 0) return;
  const double xa = MaxAbs(in_a), xb = MaxAbs(in_b);
  if (MagicFits(op == BinaryOp::Mul ? xa * xb : xa + xb, out))
    BinaryOps(op, a, sa, in_a, b, sb, in_b, n, Magic(out), y);
  else
    BinaryOps(op, a, sa, in_a, b, sb, in_b, n, Consts(out), y);
}

template <bool kMagicIn, class Out>
void RequantizeLoop(const std::uint8_t* __restrict x, std::int64_t n, InQuant in, const Out& ko,
                    std::uint8_t* __restrict y) {
  constexpr std::int64_t N = qk::kNF;
  const InConsts k = Consts<kMagicIn>(in);
  const std::int64_t i =
      CodeVectors(n, y, [&](std::int64_t j) { return Code(Dequant<kMagicIn>(x + j, k), ko); });
  if (N == 1 || i == n) return;
  std::uint8_t xb[N] = {}, yb[N];
  std::memcpy(xb, x + i, n - i);
  StoreCodes(Code(Dequant<kMagicIn>(xb, k), ko), yb);
  std::memcpy(y + i, yb, n - i);
}

template <class Out>
void RequantizeLoop(const std::uint8_t* x, std::int64_t n, InQuant in, const Out& ko, std::uint8_t* y) {
  if (MagicIn(in))
    RequantizeLoop<true>(x, n, in, ko, y);
  else
    RequantizeLoop<false>(x, n, in, ko, y);
}

void RequantizeImpl(const std::uint8_t* x, std::int64_t n, InQuant in, OutQuant out, std::uint8_t* y) {
  if (MagicFits(MaxAbs(in), out))
    RequantizeLoop(x, n, in, Magic(out), y);
  else
    RequantizeLoop(x, n, in, Consts(out), y);
}

}  // namespace qat::quant::int8::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include <vector>

namespace qat::quant::int8::kernels {

HWY_EXPORT(QuantizeImpl);
HWY_EXPORT(TransposeImpl);
HWY_EXPORT(WidenImpl);
HWY_EXPORT(DequantizeImpl);
HWY_EXPORT(MaxPoolImpl);
HWY_EXPORT(MaxPoolNhwcImpl);
HWY_EXPORT(BinaryImpl);
HWY_EXPORT(RequantizeImpl);

void binary_u8(BinaryOp op, const std::uint8_t* a, std::int64_t sa, InQuant in_a, const std::uint8_t* b,
               std::int64_t sb, InQuant in_b, std::int64_t n, OutQuant out, std::uint8_t* y) {
  QAT_DISPATCH(BinaryImpl)(op, a, sa, in_a, b, sb, in_b, n, out, y);
}
void requantize_u8(const std::uint8_t* x, std::int64_t n, InQuant in, OutQuant out, std::uint8_t* y) {
  QAT_DISPATCH(RequantizeImpl)(x, n, in, out, y);
}

void max_pool_nhwc_u8(const std::uint8_t* x, std::int64_t N, std::int64_t H, std::int64_t W,
                      std::int64_t C, std::int64_t kh, std::int64_t kw, std::int64_t sh, std::int64_t sw,
                      std::int64_t ph, std::int64_t pw, std::int64_t Ho, std::int64_t Wo,
                      std::uint8_t* y) {
  QAT_DISPATCH(MaxPoolNhwcImpl)(x, N, H, W, C, kh, kw, sh, sw, ph, pw, Ho, Wo, y);
}

void transpose_u8(const std::uint8_t* src, std::int64_t rows, std::int64_t cols, std::int64_t lds,
                  std::uint8_t* dst, std::int64_t ldd) {
  QAT_DISPATCH(TransposeImpl)(src, rows, cols, lds, dst, ldd);
}
void widen_u8_u16(const std::uint8_t* src, std::int64_t n, std::uint16_t* dst) {
  QAT_DISPATCH(WidenImpl)(src, n, dst);
}
void dequantize_u8(const std::uint8_t* q, std::int64_t n, float scale, std::int32_t zp, float* y) {
  QAT_DISPATCH(DequantizeImpl)(q, n, scale, zp, y);
}
void max_pool_u8(const std::uint8_t* x, std::int64_t planes, std::int64_t H, std::int64_t W,
                 std::int64_t kh, std::int64_t kw, std::int64_t sh, std::int64_t sw, std::int64_t Ho,
                 std::int64_t Wo, std::uint8_t* y) {
  thread_local std::vector<std::uint8_t> m;  // the row maxima of one block, kept between calls
  m.resize(kPoolRows * ((Wo - 1) * sw + kw));
  QAT_DISPATCH(MaxPoolImpl)(x, planes, H, W, kh, kw, sh, sw, Ho, Wo, y, m.data());
}

void quantize_u8(const float* x, std::int64_t n, float inv, float zp, float lo, float hi,
                 std::uint8_t* q) {
  QAT_DISPATCH(QuantizeImpl)(x, n, inv, zp, lo, hi, q);
}

}  // namespace qat::quant::int8::kernels
#endif  // HWY_ONCE
