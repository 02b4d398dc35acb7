// Fake quantization kernels (kernels.h): fixed qparams per tensor / per innermost channel, the
// straight-through backward and the learnable-amax (PACT-style) forward and backward.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "modules/quant/kernels/cpu/fake_quant.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <bit>

#include "framework/tensor/simd.h"
#include "modules/quant/kernels/cpu/common-inl.h"
#include "modules/quant/kernels/cpu/kernels.h"

HWY_BEFORE_NAMESPACE();
namespace qat::quant::kernels::HWY_NAMESPACE {
static_assert(std::endian::native == std::endian::little, "mask words are stored as bytes");

// q = round(x inv) + z;  c = clamp(q, lo, hi);  mask = [lo <= q <= hi] = [c == q];
// y = (c - z) s. The clamp is Max(q, lo) then Min(., hi): q > lo ? q : lo, c < hi ? c : hi on
// every target (see minmax.cpp Fold), so NaN maps to lo as in PyTorch, with mask 0.
// kRound false: the magic-number domain (Consts), the same y and mask without the rounding.
// In the magic-number domain the lower clamp leaves c >= lo > 0, never NaN, so the upper clamp
// and the compare give the same on the bits as int32 (positive floats order as their bits; q
// negative or NaN equals no such c either way): integer ops, which Zen runs on its integer
// pipes, where the float ones share two of four (FADD) with the add, max and sub.
template <bool kRound>
HWY_INLINE MF FqVec(const float* x, float* y, VF inv, VF s, VF z, VF lo, VF hi) {
  const DF df;
  const VF xi = hn::Mul(hn::LoadU(df, x), inv);
  const VF q = hn::Add(kRound ? RoundEven(xi) : xi, z);
  if constexpr (kRound) {
    const VF c = hn::Min(hn::Max(q, lo), hi);
    hn::StoreU(hn::Mul(hn::Sub(c, z), s), df, y);
    return hn::Eq(c, q);
  } else {
    const DI di;
    const VI ci = hn::Min(hn::BitCast(di, hn::Max(q, lo)), hn::BitCast(di, hi));
    hn::StoreU(hn::Mul(hn::Sub(hn::BitCast(df, ci), z), s), df, y);
    return hn::RebindMask(df, hn::Eq(ci, hn::BitCast(di, q)));
  }
}

// A vector's mask as bits, lane j at bit j. On x86 straight from the mask register or movmskps
// (StoreMaskBits' byte store, read back as a word, costs two more instructions per vector).
HWY_INLINE std::uint64_t MaskBits(MF m) {
#if HWY_TARGET == HWY_SCALAR
  return hn::AllTrue(DF(), m) ? 1 : 0;
#elif HWY_TARGET == HWY_AVX2
  return static_cast<std::uint32_t>(_mm256_movemask_ps(hn::VecFromMask(DF(), m).raw));
#elif HWY_TARGET <= HWY_AVX3
  return static_cast<std::uint32_t>(m.raw);
#else
  std::uint8_t b[8] = {};
  hn::StoreMaskBits(DF(), m, b);
  std::uint64_t v;
  std::memcpy(&v, b, sizeof v);
  return v;
#endif
}

// Bits [p, p + count) of the bit mask (element i: bit i % 8 of byte i / 8) = v's bits [0, count);
// the other bits of the bytes touched are kept.
HWY_INLINE void WriteBits(std::uint8_t* bits, std::int64_t p, std::uint64_t v, std::int64_t count) {
  if ((p & 7) == 0 && (count & 7) == 0) {  // whole bytes (little-endian: bit j in byte j / 8)
    std::memcpy(bits + p / 8, &v, static_cast<std::size_t>(count / 8));
    return;
  }
  const std::int64_t end = p + count;
  for (std::int64_t b = p >> 3; b <= (end - 1) >> 3; ++b) {
    const std::int64_t from = std::max(p, b * 8), to = std::min(end, b * 8 + 8);
    const unsigned field = (1u << (to - from)) - 1, at = static_cast<unsigned>(from - b * 8);
    const auto put = static_cast<unsigned>((v >> (from - p)) & field) << at;
    bits[b] = static_cast<std::uint8_t>((bits[b] & ~(field << at)) | put);
  }
}

struct FqConsts {
  VF inv, s, z, lo, hi;
  bool round;  // false: z = M, lo and hi + M - zp (Consts)
};

// 64 elements (64 / kNF vectors); their mask bits, element j at bit j.
template <bool kRound>
HWY_INLINE std::uint64_t Fq64(const float* x, float* y, const FqConsts& k) {
  std::uint64_t m = 0;
  for (std::int64_t j = 0; j < 64; j += kNF)
    m |= MaskBits(FqVec<kRound>(x + j, y + j, k.inv, k.s, k.z, k.lo, k.hi)) << j;
  return m;
}

// count <= 64 elements: whole vectors, then the last partial one through a buffer (the same
// vector code); mask bits written from p (bits null: none).
template <bool kRound>
HWY_INLINE void FqPartial(const float* x, float* y, std::uint8_t* bits, std::int64_t p,
                          std::int64_t count, const FqConsts& k) {
  std::uint64_t m = 0;
  std::int64_t j = 0;
  for (; j + kNF <= count; j += kNF)
    m |= MaskBits(FqVec<kRound>(x + j, y + j, k.inv, k.s, k.z, k.lo, k.hi)) << j;
  if (j < count) {
    float xb[kNF] = {}, yb[kNF];
    std::memcpy(xb, x + j, (count - j) * sizeof(float));
    m |= MaskBits(FqVec<kRound>(xb, yb, k.inv, k.s, k.z, k.lo, k.hi)) << j;
    std::memcpy(y + j, yb, (count - j) * sizeof(float));
  }
  if (bits != nullptr) WriteBits(bits, p, m, count);
}

// The magic-number domain (common-inl.h kMagic = M) where |qmin|, |qmax|, |zp| < 2^21 (every
// grid up to 21 bits): fl(x inv + M) = M + round_half_even(x inv) wherever |x inv| < 2^22, and
// lies past the clamp's ends elsewhere; so z = M and the bounds lo, hi + M - zp give FqVec the
// same c - z (exact integers; +0 where PyTorch's is), y and mask, with an add in place of the
// rounding.
HWY_INLINE FqConsts Consts(float scale, std::int32_t zp, std::int64_t qmin, std::int64_t qmax) {
  constexpr std::int64_t kLimit = std::int64_t{1} << 21;
  const DF df;
  FqConsts k;
  k.inv = hn::Set(df, 1.0f / scale), k.s = hn::Set(df, scale);
  const auto small = [](std::int64_t v) { return v > -kLimit && v < kLimit; };
  k.round = !(small(qmin) && small(qmax) && small(zp));
  if (k.round) {
    k.z = hn::Set(df, static_cast<float>(zp));
    k.lo = hn::Set(df, static_cast<float>(qmin));
    k.hi = hn::Set(df, static_cast<float>(qmax));
  } else {
    k.z = hn::Set(df, kMagic);
    k.lo = hn::Set(df, kMagic + static_cast<float>(qmin - zp));
    k.hi = hn::Set(df, kMagic + static_cast<float>(qmax - zp));
  }
  return k;
}

template <bool kRound>
HWY_INLINE void FqRunWith(const float* x, float* y, std::uint8_t* bits, std::int64_t first,
                          std::int64_t n, const FqConsts& k) {
  if (bits == nullptr) {
    std::int64_t i = 0;
    for (; i + kNF <= n; i += kNF) FqVec<kRound>(x + i, y + i, k.inv, k.s, k.z, k.lo, k.hi);
    if (i < n) FqPartial<kRound>(x + i, y + i, nullptr, 0, n - i, k);
    return;
  }
  // a head up to the next whole byte of the mask, then 64 elements (8 bytes) at a time
  std::int64_t i = std::min(n, (8 - (first & 7)) & 7);
  if (i > 0) FqPartial<kRound>(x, y, bits, first, i, k);
  for (; i + 64 <= n; i += 64) {
    const std::uint64_t m = Fq64<kRound>(x + i, y + i, k);
    std::memcpy(bits + (first + i) / 8, &m, sizeof m);
  }
  if (i < n) FqPartial<kRound>(x + i, y + i, bits, first + i, n - i, k);
}

HWY_INLINE void FqRun(const float* x, float* y, std::uint8_t* bits, std::int64_t first, std::int64_t n,
                      const FqConsts& k) {
  if (k.round)
    FqRunWith<true>(x, y, bits, first, n, k);
  else
    FqRunWith<false>(x, y, bits, first, n, k);
}

void FakeQuant(const float* x, float* y, std::uint8_t* bits, std::int64_t first, std::int64_t n,
               float scale, std::int32_t zp, std::int64_t qmin, std::int64_t qmax) {
  FqRun(x, y, bits, first, n, Consts(scale, zp, qmin, qmax));
}

void FakeQuantRuns(const float* x, float* y, std::uint8_t* bits, std::int64_t first, std::int64_t runs,
                   std::int64_t n, const float* scale, const std::int32_t* zp, std::int64_t qmin,
                   std::int64_t qmax) {
  for (std::int64_t r = 0; r < runs; ++r)
    FqRun(x + r * n, y + r * n, bits, first + r * n, n, Consts(scale[r], zp[r], qmin, qmax));
}

void FakeQuantRows(const float* x, float* y, std::uint8_t* bits, std::int64_t rows, std::int64_t cols,
                   const float* inv, const float* scale, const float* zp, std::int64_t qmin,
                   std::int64_t qmax) {
  const DF df;
  const VF lo = hn::Set(df, static_cast<float>(qmin)), hi = hn::Set(df, static_cast<float>(qmax));
  const std::int64_t full = cols / kNF * kNF;
  float ib[kNF] = {}, sb[kNF] = {}, zb[kNF] = {}, xb[kNF] = {}, yb[kNF];
  std::memcpy(ib, inv + full, (cols - full) * sizeof(float));
  std::memcpy(sb, scale + full, (cols - full) * sizeof(float));
  std::memcpy(zb, zp + full, (cols - full) * sizeof(float));
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * cols;
    float* yr = y + r * cols;
    // the row in chunks of 64 columns, each chunk's bits written at once
    for (std::int64_t c0 = 0; c0 < cols; c0 += 64) {
      const std::int64_t c1 = std::min(cols, c0 + 64);
      std::uint64_t m = 0;
      for (std::int64_t c = c0; c < c1; c += kNF) {
        if (c + kNF <= full || kNF == 1) {
          m |= MaskBits(FqVec<true>(xr + c, yr + c, hn::LoadU(df, inv + c), hn::LoadU(df, scale + c),
                                    hn::LoadU(df, zp + c), lo, hi))
               << (c - c0);
          continue;
        }
        std::memcpy(xb, xr + c, (cols - c) * sizeof(float));
        m |= MaskBits(
                 FqVec<true>(xb, yb, hn::LoadU(df, ib), hn::LoadU(df, sb), hn::LoadU(df, zb), lo, hi))
             << (c - c0);
        std::memcpy(yr + c, yb, (cols - c) * sizeof(float));
      }
      if (bits != nullptr) WriteBits(bits, r * cols + c0, m, c1 - c0);
    }
  }
}

HWY_INLINE void MaskedCopyStep(const float* dy, const std::uint8_t* m, float* dx) {
  const DF df;
  const DI di;
  const MF keep = hn::RebindMask(df, hn::Ne(LoadBytes(m), hn::Zero(di)));
  hn::StoreU(hn::IfThenElseZero(keep, hn::LoadU(df, dy)), df, dx);
}

void MaskedCopy(const float* dy, const std::uint8_t* mask, float* dx, std::int64_t n) {
  std::int64_t i = 0;
  for (; i + kNF <= n; i += kNF) MaskedCopyStep(dy + i, mask + i, dx + i);
  if (kNF == 1 || i == n) return;
  float gb[kNF] = {}, db[kNF];
  std::uint8_t mb[kNF] = {};
  std::memcpy(gb, dy + i, (n - i) * sizeof(float));
  std::memcpy(mb, mask + i, n - i);
  MaskedCopyStep(gb, mb, db);
  std::memcpy(dx + i, db, (n - i) * sizeof(float));
}

// g = mask ? g : 0 in place; runs of mask bytes that are all nonzero are only read.
void MaskedZero(float* g, const std::uint8_t* mask, std::int64_t n) {
  const hn::ScalableTag<std::uint8_t> d8;
  const auto n8 = static_cast<std::int64_t>(hn::Lanes(d8));
  std::int64_t i = 0;
  for (; i + n8 <= n; i += n8) {
    if (hn::AllFalse(d8, hn::Eq(hn::LoadU(d8, mask + i), hn::Zero(d8)))) continue;
    for (std::int64_t j = i; j < i + n8; j += kNF) MaskedCopyStep(g + j, mask + j, g + j);
  }
  for (; i < n; ++i)
    if (mask[i] == 0) g[i] = 0.0f;
}

// Lanes from bits: lane j = bit j of v.
HWY_INLINE MF MaskFromBits(std::uint64_t v) {
#if HWY_TARGET == HWY_SCALAR
  return hn::FirstN(DF(), static_cast<std::size_t>(v & 1));
#endif
  std::uint8_t b[8];
  std::memcpy(b, &v, sizeof v);
  return hn::LoadMaskBits(DF(), b);
}

// 64 elements: out = bit j of w ? in : 0.
HWY_INLINE void SelectBits64(const float* in, std::uint64_t w, float* out) {
  const DF df;
  for (std::int64_t j = 0; j < 64; j += kNF)
    hn::StoreU(hn::IfThenElseZero(MaskFromBits(w >> j), hn::LoadU(df, in + j)), df, out + j);
}

HWY_INLINE std::uint64_t LoadWord(const std::uint8_t* bits) {
  std::uint64_t w;
  std::memcpy(&w, bits, sizeof w);
  return w;
}

void MaskedCopyBits(const float* dy, const std::uint8_t* bits, float* dx, std::int64_t n) {
  std::int64_t i = 0;
  for (; i + 64 <= n; i += 64) SelectBits64(dy + i, LoadWord(bits + i / 8), dx + i);
  for (; i < n; ++i) dx[i] = (bits[i >> 3] >> (i & 7)) & 1 ? dy[i] : 0.0f;
}

// g = bit ? g : 0 in place; groups of 64 whose bits are all set are left alone. Vector loads
// and stores even for a single clear bit: g is seldom in L1 here, and stores alone would wait
// for their lines one by one where the loads fetch them ahead.
void MaskedZeroBits(float* g, const std::uint8_t* bits, std::int64_t n) {
  std::int64_t i = 0;
  for (; i + 64 <= n; i += 64)
    if (const std::uint64_t w = LoadWord(bits + i / 8); w != ~std::uint64_t{0})
      SelectBits64(g + i, w, g + i);
  for (; i < n; ++i)
    if (!((bits[i >> 3] >> (i & 7)) & 1)) g[i] = 0.0f;
}

struct AmaxConsts {
  VF inv, s, hi_x, lo_x, lo, hi;
  VI hi_bits;  // amax's bits
};

// Mask bits: 1 = outside [lo_x, hi_x] or NaN, 2 = x >= hi_x, 4 = kSigned and x <= lo_x;
// y = clamp(round(clamp(x, lo_x, hi_x) inv), lo, hi) s.
// AmaxBits: the mask of x = v as int32 lanes, from c = clamp(x): c == x just where
// lo_x <= x <= hi_x (NaN: c = lo_x), and c == hi_x just where x >= hi_x, compared as integers
// (c is never NaN, hi_x > 0): Zen's float compares, min / max and rounding share two of its
// four vector pipes, integer ops take any. From the compares' masks (0 / -1), the bits are
// 1 + in - 2 (2 le + ge): one constant where and-ing each mask with its bit took three, which
// AVX2's 16 registers spilled; and no compare for bit 4 when unsigned. 2^20 floats, avx2:
// unsigned 133-137 -> 107-109 us, signed 132-135 -> 131-133; avx512_vnni unchanged.
template <bool kSigned>
HWY_INLINE VI AmaxBits(VF v, VF c, const AmaxConsts& k) {
  const DI di;
  const VI in = hn::VecFromMask(di, hn::RebindMask(di, hn::Eq(c, v)));
  VI t = hn::VecFromMask(di, hn::Eq(hn::BitCast(di, c), k.hi_bits));  // ge
  if constexpr (kSigned) {
    const VI le = hn::VecFromMask(di, hn::RebindMask(di, hn::Le(v, k.lo_x)));
    t = hn::Add(hn::Add(le, le), t);
  }
  return hn::Sub(hn::Sub(in, hn::Add(t, t)), hn::Set(di, -1));
}
template <bool kClampQ>
HWY_INLINE VF AmaxY(VF c, const AmaxConsts& k) {
  VF q = RoundEven(hn::Mul(c, k.inv));
  if (kClampQ) q = LtOr(GtOr(q, k.lo), k.hi);
  return hn::Mul(q, k.s);
}

// y stored and the mask returned, vector by vector (common-inl.h MaskedRun: four vectors' mask
// bytes in one store; forward on 2^20 floats: AVX2 167 -> 134 us, AVX-512 97 -> 90 us).
template <bool kClampQ, bool kSigned>
HWY_INLINE void AmaxRun(const float* x, float* y, std::uint8_t* mask, std::int64_t n,
                        const AmaxConsts& k) {
  MaskedRun<true>(x, y, mask, n, [&](const float* xs, float* ys) {
    const VF v = hn::LoadU(DF(), xs), c = LtOr(GtOr(v, k.lo_x), k.hi_x);
    hn::StoreU(AmaxY<kClampQ>(c, k), DF(), ys);
    return AmaxBits<kSigned>(v, c, k);
  });
}

void AmaxForward(const float* x, float* y, std::uint8_t* mask, std::int64_t n, float amax,
                 bool is_signed, std::int64_t qmin, std::int64_t qmax) {
  const DF df;
  const float scale = amax / static_cast<float>(qmax), inv = 1.0f / scale;
  const float lo_x = is_signed ? -amax : 0.0f;
  AmaxConsts k;
  k.inv = hn::Set(df, inv);
  k.s = hn::Set(df, scale);
  k.hi_x = hn::Set(df, amax);
  k.lo_x = hn::Set(df, lo_x);
  k.lo = hn::Set(df, static_cast<float>(qmin));
  k.hi = hn::Set(df, static_cast<float>(qmax));
  k.hi_bits = hn::BitCast(DI(), k.hi_x);
  // c inv is monotone in c, so round(c inv) lies in [round(lo_x inv), round(amax inv)]: where
  // that is inside [qmin, qmax] (every symmetric grid up to 2^21: amax inv is qmax within
  // 3 * 2^-24 relative) the clamp of q changes nothing
  const float q_lo = __builtin_nearbyintf(lo_x * inv), q_hi = __builtin_nearbyintf(amax * inv);
  const bool clamp_q = !(q_lo >= static_cast<float>(qmin) && q_hi <= static_cast<float>(qmax));
  if (is_signed)
    clamp_q ? AmaxRun<true, true>(x, y, mask, n, k) : AmaxRun<false, true>(x, y, mask, n, k);
  else
    clamp_q ? AmaxRun<true, false>(x, y, mask, n, k) : AmaxRun<false, false>(x, y, mask, n, k);
}

// 16 elements: dx = bit 1 ? 0 : dy; terms bit 2 ? dy : bit 4 ? -dy : 0, added to the float
// lanes of chunk256 (kernels.h). Bits 2 and 4 are never both set (amax > 0), so the term is dy
// with bit 4 as its sign bit (-dy exactly), kept where bit 2 or 4 is set: integer ops only, no
// compare-not pairs and blends.
HWY_INLINE void AmaxBackStep16(const float* dy, const std::uint8_t* m, float* dx, VF (&lanes)[kLanesV]) {
  const DF df;
  const DI di;
  for (std::int64_t k = 0; k < kLanesV; ++k) {
    const VI bits = LoadBytes(m + k * kNF);
    const VI g = hn::BitCast(di, hn::LoadU(df, dy + k * kNF));
    const VI keep = hn::VecFromMask(di, hn::Eq(hn::And(bits, hn::Set(di, 1)), hn::Zero(di)));
    hn::StoreU(hn::BitCast(df, hn::And(keep, g)), df, dx + k * kNF);
    const VI no_term = hn::VecFromMask(di, hn::Eq(hn::And(bits, hn::Set(di, 6)), hn::Zero(di)));
    const VI sign = hn::And(hn::ShiftLeft<29>(bits), hn::Set(di, std::int32_t(0x80000000u)));
    lanes[k] = hn::Add(lanes[k], hn::BitCast(df, hn::AndNot(no_term, hn::Xor(g, sign))));
  }
}

double AmaxBackward(const float* dy, const std::uint8_t* mask, float* dx, std::int64_t n) {
  VF lanes[kLanesV];
  for (auto& v : lanes) v = hn::Zero(DF());
  double d[16] = {};
  for (std::int64_t chunk = 0; chunk < n; chunk += 256) {
    const std::int64_t end = std::min(n, chunk + 256);
    std::int64_t i = chunk;
    for (; i + 16 <= end; i += 16) AmaxBackStep16(dy + i, mask + i, dx + i, lanes);
    if (i < end) {  // padded with zero terms
      float gb[16] = {}, db[16];
      std::uint8_t mb[16] = {};
      std::memcpy(gb, dy + i, (end - i) * sizeof(float));
      std::memcpy(mb, mask + i, end - i);
      AmaxBackStep16(gb, mb, db, lanes);
      std::memcpy(dx + i, db, (end - i) * sizeof(float));
    }
    FlushLanes(lanes, d);
  }
  return FoldLanes(d);
}

}  // namespace qat::quant::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace qat::quant::kernels {

HWY_EXPORT(FakeQuant);
HWY_EXPORT(FakeQuantRows);
HWY_EXPORT(FakeQuantRuns);
HWY_EXPORT(MaskedCopy);
HWY_EXPORT(MaskedZero);
HWY_EXPORT(MaskedCopyBits);
HWY_EXPORT(MaskedZeroBits);
HWY_EXPORT(AmaxForward);
HWY_EXPORT(AmaxBackward);

void fake_quant(const float* x, float* y, std::uint8_t* mask_bits, std::int64_t first, std::int64_t n,
                float scale, std::int32_t zp, std::int64_t qmin, std::int64_t qmax) {
  QAT_DISPATCH(FakeQuant)(x, y, mask_bits, first, n, scale, zp, qmin, qmax);
}
void fake_quant_runs(const float* x, float* y, std::uint8_t* mask_bits, std::int64_t first,
                     std::int64_t runs, std::int64_t n, const float* scale, const std::int32_t* zp,
                     std::int64_t qmin, std::int64_t qmax) {
  QAT_DISPATCH(FakeQuantRuns)(x, y, mask_bits, first, runs, n, scale, zp, qmin, qmax);
}
void fake_quant_rows(const float* x, float* y, std::uint8_t* mask_bits, std::int64_t rows,
                     std::int64_t cols, const float* inv_scale, const float* scale, const float* zp,
                     std::int64_t qmin, std::int64_t qmax) {
  QAT_DISPATCH(FakeQuantRows)(x, y, mask_bits, rows, cols, inv_scale, scale, zp, qmin, qmax);
}
void masked_copy(const float* dy, const std::uint8_t* mask, float* dx, std::int64_t n) {
  QAT_DISPATCH(MaskedCopy)(dy, mask, dx, n);
}
void masked_zero(float* g, const std::uint8_t* mask, std::int64_t n) {
  QAT_DISPATCH(MaskedZero)(g, mask, n);
}

void masked_copy_bits(const float* dy, const std::uint8_t* mask_bits, float* dx, std::int64_t n) {
  QAT_DISPATCH(MaskedCopyBits)(dy, mask_bits, dx, n);
}
void masked_zero_bits(float* g, const std::uint8_t* mask_bits, std::int64_t n) {
  QAT_DISPATCH(MaskedZeroBits)(g, mask_bits, n);
}
void amax_forward(const float* x, float* y, std::uint8_t* mask, std::int64_t n, float amax,
                  bool is_signed, std::int64_t qmin, std::int64_t qmax) {
  QAT_DISPATCH(AmaxForward)(x, y, mask, n, amax, is_signed, qmin, qmax);
}
double amax_backward(const float* dy, const std::uint8_t* mask, float* dx, std::int64_t n) {
  return QAT_DISPATCH(AmaxBackward)(dy, mask, dx, n);
}

}  // namespace qat::quant::kernels
#endif  // HWY_ONCE
