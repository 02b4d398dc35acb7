// The int8 GEMM micro-kernels, compiled once per instruction set (see int8_gemm.h for the packed
// layouts). A tile is MR rows x NB blocks of 16 output channels; the accumulators start at
// -zx rowsum(w), and the output stage requantizes them in registers with the float32 operations
// of int8::requantize (built without contraction, so every path gives the same bits):
//   y = clamp(round_half_even((float(acc) scale + bias) inv_scale), lo, hi) + zp
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "modules/quant/kernels/cpu/int8_gemm.cpp"
#include "modules/quant/kernels/cpu/int8_gemm.h"

#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "framework/tensor/cpu.h"
#include "framework/tensor/simd.h"
#include "modules/quant/kernels/cpu/x86-inl.h"  // QAT_INT8_X86

HWY_BEFORE_NAMESPACE();
namespace qat::quant::int8::kernels::HWY_NAMESPACE {

// The format for inputs in [0, 255]; narrow inputs ([0, 127]) are quads on every path.
#if HWY_TARGET == HWY_AVX3_DL || !QAT_INT8_X86
constexpr PackFormat kNative = PackFormat::Quads;
#else
constexpr PackFormat kNative = PackFormat::Pairs;
#endif

int PackFormatImpl(bool narrow) {
#if HWY_TARGET == HWY_AVX2
  if (cpu::int8_avx_vnni()) return static_cast<int>(PackFormat::Quads);  // avx_vnni below
#endif
  return static_cast<int>(narrow ? PackFormat::Quads : kNative);
}

// Copies rows [r, r + rows) of x into the scratch as the micro-kernel reads them: `steps` groups
// of 4 bytes per row (quads: 4 x u8, min(x, 127) with kClamp; pairs: 2 x u16 widened), K padded
// with zeros, and zero rows up to rows_pad.
template <PackFormat kFormat, bool kClamp = false>
HWY_INLINE void fill_rows(const GemmArgs& g, std::int64_t r, std::int64_t rows, std::int64_t rows_pad,
                          std::uint8_t* __restrict s) {
  const std::int64_t stride = g.steps * 4;
  for (std::int64_t i = 0; i < rows_pad; ++i) {
    std::uint8_t* dst = s + i * stride;
    const std::uint8_t* __restrict src = g.x + (r + i) * g.ldx;
    const std::int64_t k = i < rows ? g.K : 0;
    if constexpr (kFormat == PackFormat::Quads) {
      for (std::int64_t j = 0; j < k; ++j) dst[j] = kClamp && src[j] > 127 ? 127 : src[j];
      for (std::int64_t j = k; j < stride; ++j) dst[j] = 0;
    } else {
      std::uint16_t* __restrict d16 = reinterpret_cast<std::uint16_t*>(dst);
      for (std::int64_t j = 0; j < k; ++j) d16[j] = src[j];
      for (std::int64_t j = k; j < stride / 2; ++j) d16[j] = 0;
    }
  }
}

#if !QAT_INT8_X86
// ---- generic: plain loops over the quads -----------------------------------------------------

std::int64_t SchedGroupImpl() { return 1; }  // (no narrow kernel)
bool WinogradImpl() { return false; }

void GemmRangeImpl(const GemmArgs& g, std::int64_t r0, std::int64_t r1, std::int64_t b0, std::int64_t b1,
                   void* scratch) {
  auto* s = static_cast<std::uint8_t*>(scratch);
  const std::int64_t stride = g.steps * 4;
  const std::int64_t pieces = g.row_off ? g.pieces : 1, psteps = g.row_off ? g.piece_steps : g.steps;
  for (std::int64_t r = r0; r < r1; r += kRowBlock) {
    const std::int64_t rows = r1 - r < kRowBlock ? r1 - r : kRowBlock;
    if (!g.row_off) fill_rows<PackFormat::Quads>(g, r, rows, rows, s);
    for (std::int64_t b = b0; b < b1; ++b) {
      std::int32_t best[kBlock] = {};  // with g.pool: the max over the window's rows so far
      for (std::int64_t i = 0; i < rows; ++i) {
        std::int32_t acc[kBlock];
        for (std::int64_t c = 0; c < kBlock; ++c) acc[c] = g.acc0[b * kBlock + c];
        const std::int64_t m = r + i;
        const std::uint8_t* row =
            g.row_off ? g.x + g.row_off[g.row_map ? g.row_map[m] : m] : s + i * stride;
        const std::uint8_t* ws = g.w + b * g.steps * kStepBytes;
        for (std::int64_t p = 0; p < pieces; ++p) {
          const std::uint8_t* a = row + (g.row_off ? g.piece_off[p] : 0);
          for (std::int64_t st = 0; st < psteps; ++st, ws += kStepBytes) {
            const auto* w8 = reinterpret_cast<const std::int8_t*>(ws);
            for (std::int64_t c = 0; c < kBlock; ++c)
              for (std::int64_t j = 0; j < 4; ++j)
                acc[c] += static_cast<std::int32_t>(a[st * 4 + j]) * w8[c * 4 + j];
          }
        }
        if (g.y32) {  // raw sums (GemmArgs::y32)
          for (std::int64_t c = 0; c < kBlock; ++c) g.y32[m * g.ldy + b * kBlock + c] = acc[c];
          continue;
        }
        if (g.pool) {
          for (std::int64_t c = 0; c < kBlock; ++c)
            best[c] = m % kPoolWindow == 0 || acc[c] > best[c] ? acc[c] : best[c];
          if (m % kPoolWindow != kPoolWindow - 1) continue;
          for (std::int64_t c = 0; c < kBlock; ++c) acc[c] = best[c];
        }
        std::uint8_t* y = g.y + (g.pool ? m / kPoolWindow : m) * g.ldy;
        for (std::int64_t c = 0; c < kBlock && b * kBlock + c < g.O; ++c) {
          const std::int64_t o = b * kBlock + c;
          float v = (static_cast<float>(acc[c]) * g.scale[o] + g.bias[o]) * g.inv_scale;
          v = v > g.lo ? v : g.lo;
          v = v < g.hi ? v : g.hi;
          y[o] = static_cast<std::uint8_t>(static_cast<std::int32_t>(std::nearbyint(v)) + g.zp);
        }
      }
    }
  }
}

#else
// ---- x86: vpdpbusd (VNNI) or vpmaddwd on pre-widened pairs -----------------------------------
#if HWY_TARGET == HWY_AVX2
using Vec = __m256i;
constexpr int kVecs = 2;  // vectors per block of 16 channels
constexpr std::int64_t kMR = 6;
constexpr int kNB = 1;
HWY_INLINE Vec load(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
HWY_INLINE Vec bcast(const std::uint8_t* p) {
  std::int32_t v;
  __builtin_memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}
// exact: u16 (<= 255) x s16 pairs summed in int32
HWY_INLINE Vec dot(Vec acc, Vec a, Vec b) { return _mm256_add_epi32(acc, _mm256_madd_epi16(a, b)); }
HWY_INLINE Vec max32(Vec a, Vec b) { return _mm256_max_epi32(a, b); }
HWY_INLINE void store32(std::int32_t* p, Vec v) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), v);
}
// narrow quads: u8 (<= 127) x s8 pairs summed in int16, exact as |a0 w0 + a1 w1| <= 32512, then
// the two pairs of each quad summed in int32 (vpmaddwd by ones)
constexpr std::int64_t kMR7 = 4;  // 8 accumulators + 2 weights + a, ones, the int16 products
HWY_INLINE Vec ones16() { return _mm256_set1_epi16(1); }
HWY_INLINE Vec dot7(Vec acc, Vec a, Vec b, Vec ones) {
  return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(a, b), ones));
}
// two such steps, their int16 pair sums added before the widening (exact within
// kPairedStepBound, int8_gemm.h)
HWY_INLINE Vec dot7x2(Vec acc, Vec a0, Vec b0, Vec a1, Vec b1, Vec ones) {
  const Vec p = _mm256_add_epi16(_mm256_maddubs_epi16(a0, b0), _mm256_maddubs_epi16(a1, b1));
  return _mm256_add_epi32(acc, _mm256_madd_epi16(p, ones));
}

// float32 output stage (int8::requantize): max first, so that a NaN maps to lo as there
HWY_INLINE Vec requant(Vec acc, const float* sp, const float* bp, __m256 inv, __m256 lo, __m256 hi,
                       Vec zp) {
  __m256 v = _mm256_mul_ps(_mm256_cvtepi32_ps(acc), _mm256_loadu_ps(sp));
  v = _mm256_mul_ps(_mm256_add_ps(v, _mm256_loadu_ps(bp)), inv);
  v = _mm256_min_ps(_mm256_max_ps(v, lo), hi);
  return _mm256_add_epi32(_mm256_cvtps_epi32(v), zp);  // rounds half to even (MXCSR default)
}
using VecF = __m256;
HWY_INLINE VecF setf(float v) { return _mm256_set1_ps(v); }
HWY_INLINE Vec set32(std::int32_t v) { return _mm256_set1_epi32(v); }
// 16 int32 in [0, 255] (two vectors) -> 16 bytes
HWY_INLINE void store_bytes(std::uint8_t* y, const Vec* v, std::int64_t n) {
  const Vec p16 = _mm256_permute4x64_epi64(_mm256_packs_epi32(v[0], v[1]), 0xD8);
  const __m128i b = _mm_packus_epi16(_mm256_castsi256_si128(p16), _mm256_extracti128_si256(p16, 1));
  if (n == 16) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y), b);
  } else {
    alignas(16) std::uint8_t tmp[16];
    _mm_store_si128(reinterpret_cast<__m128i*>(tmp), b);
    for (std::int64_t c = 0; c < n; ++c) y[c] = tmp[c];
  }
}
#else  // AVX3 / AVX3_DL
using Vec = __m512i;
constexpr int kVecs = 1;
constexpr std::int64_t kMR = 8;
constexpr int kNB = 2;
HWY_INLINE Vec load(const void* p) { return _mm512_loadu_si512(p); }
HWY_INLINE Vec bcast(const std::uint8_t* p) {
  std::int32_t v;
  __builtin_memcpy(&v, p, 4);
  return _mm512_set1_epi32(v);
}
#if HWY_TARGET == HWY_AVX3_DL
// Highway 1.0.3's AVX3_DL target string names avxvnni but not avx512vnni (its CPU check does
// require AVX512-VNNI): enable it for the rest of this target's region.
#pragma GCC target("avx512vnni")
#undef QAT_TILE_TARGET
#define QAT_TILE_TARGET QAT_VNNI_TARGET("avx512vnni")
// exact: u8 x s8 quads summed into int32 without intermediate saturation
HWY_INLINE QAT_TILE_TARGET Vec dot(Vec acc, Vec a, Vec b) { return _mm512_dpbusd_epi32(acc, a, b); }
#else
HWY_INLINE Vec dot(Vec acc, Vec a, Vec b) { return _mm512_add_epi32(acc, _mm512_madd_epi16(a, b)); }
#endif
constexpr std::int64_t kMR7 = kMR;  // (unused on AVX3_DL, whose quads are native)
HWY_INLINE Vec max32(Vec a, Vec b) { return _mm512_max_epi32(a, b); }
HWY_INLINE void store32(std::int32_t* p, Vec v) { _mm512_storeu_si512(p, v); }
HWY_INLINE Vec ones16() { return _mm512_set1_epi16(1); }
HWY_INLINE Vec dot7(Vec acc, Vec a, Vec b, Vec ones) {  // as on AVX2
  return _mm512_add_epi32(acc, _mm512_madd_epi16(_mm512_maddubs_epi16(a, b), ones));
}
HWY_INLINE Vec dot7x2(Vec acc, Vec a0, Vec b0, Vec a1, Vec b1, Vec ones) {
  const Vec p = _mm512_add_epi16(_mm512_maddubs_epi16(a0, b0), _mm512_maddubs_epi16(a1, b1));
  return _mm512_add_epi32(acc, _mm512_madd_epi16(p, ones));
}
HWY_INLINE Vec requant(Vec acc, const float* sp, const float* bp, __m512 inv, __m512 lo, __m512 hi,
                       Vec zp) {
  __m512 v = _mm512_mul_ps(_mm512_cvtepi32_ps(acc), _mm512_loadu_ps(sp));
  v = _mm512_mul_ps(_mm512_add_ps(v, _mm512_loadu_ps(bp)), inv);
  v = _mm512_min_ps(_mm512_max_ps(v, lo), hi);
  return _mm512_add_epi32(_mm512_cvtps_epi32(v), zp);
}
using VecF = __m512;
HWY_INLINE VecF setf(float v) { return _mm512_set1_ps(v); }
HWY_INLINE Vec set32(std::int32_t v) { return _mm512_set1_epi32(v); }
HWY_INLINE void store_bytes(std::uint8_t* y, const Vec* v, std::int64_t n) {
  const __m128i b = _mm512_cvtepi32_epi8(v[0]);
  if (n == 16)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y), b);
  else
    _mm_mask_storeu_epi8(y, static_cast<__mmask16>((1u << n) - 1), b);
}
#endif

constexpr std::int64_t kLanes = kBlock / kVecs;
std::int64_t SchedGroupImpl() { return kNB; }

#include "modules/quant/kernels/cpu/int8_tile-inl.h"  // tile, gemm_rows, gemm_rows_of_format

#if HWY_TARGET == HWY_AVX2
// ---- AVX2: Winograd's inner product on the int16 pairs (int8_gemm.h) ------------------------
bool WinogradImpl() { return !cpu::int8_avx_vnni(); }

// rho of a row as the kernel reads it (u16 pairs, `groups` groups of 4 k, zeros past K): the
// sum over each group of a0 a2 + a1 a3, as vpmaddwd of each group's (a0, a1) with its (a2, a3)
// (the 32-bit halves of each 64-bit lane swapped), every other lane kept; wraps as the kernel's
// sums do.
HWY_INLINE std::int32_t winograd_rho(const std::uint8_t* row, std::int64_t groups) {
  const Vec even = _mm256_set_epi32(0, -1, 0, -1, 0, -1, 0, -1);
  Vec sum = _mm256_setzero_si256();
  std::int64_t t = 0;
  for (; t + 4 <= groups; t += 4) {
    const Vec v = load(row + 8 * t);
    sum = _mm256_add_epi32(sum,
                           _mm256_and_si256(_mm256_madd_epi16(v, _mm256_shuffle_epi32(v, 0xB1)), even));
  }
  alignas(32) std::uint32_t lanes[8];
  _mm256_store_si256(reinterpret_cast<Vec*>(lanes), sum);
  std::uint32_t rho = 0;
  for (const std::uint32_t l : lanes) rho += l;
  for (; t < groups; ++t) {
    std::uint16_t a[4];
    std::memcpy(a, row + 8 * t, 8);
    rho += std::uint32_t{a[0]} * a[2] + std::uint32_t{a[1]} * a[3];
  }
  return static_cast<std::int32_t>(rho);
}

// 2 rows x 16 channels over `groups` groups of 4 k, in assembly: per group, X = a(k0, k1) +
// w(k2, k3) and Y = a(k2, k3) + w(k0, k1) on each channel's int16 pair (the weights' steps 2t
// and 2t + 1 hold w(k0, k1) and w(k2, k3)), vpmaddwd(X, Y) added to the accumulator. Four groups
// per loop with fixed offsets: the compiled loop (indexed loads, a loop per group) retires
// ~25% slower on Zen 5, measured.
// clang-format off
#define QAT_WG_LOAD(wd)                       \
  "vmovdqu " wd "(%[w]), %%ymm8\n\t"          \
  "vmovdqu " wd "+32(%[w]), %%ymm9\n\t"       \
  "vmovdqu " wd "+64(%[w]), %%ymm10\n\t"      \
  "vmovdqu " wd "+96(%[w]), %%ymm11\n\t"
#define QAT_WG_ROW(ad, ar, c0, c1)                  \
  "vpbroadcastd " ad "(%[" ar "]), %%ymm12\n\t"     \
  "vpbroadcastd " ad "+4(%[" ar "]), %%ymm13\n\t"   \
  "vpaddw %%ymm12, %%ymm10, %%ymm14\n\t"            \
  "vpaddw %%ymm13, %%ymm8, %%ymm15\n\t"             \
  "vpmaddwd %%ymm14, %%ymm15, %%ymm14\n\t"          \
  "vpaddd %%ymm14, %[" c0 "], %[" c0 "]\n\t"        \
  "vpaddw %%ymm12, %%ymm11, %%ymm12\n\t"            \
  "vpaddw %%ymm13, %%ymm9, %%ymm13\n\t"             \
  "vpmaddwd %%ymm12, %%ymm13, %%ymm12\n\t"          \
  "vpaddd %%ymm12, %[" c1 "], %[" c1 "]\n\t"
#define QAT_WG_GROUP(ad, wd) \
  QAT_WG_LOAD(wd) QAT_WG_ROW(ad, "a0", "c00", "c01") QAT_WG_ROW(ad, "a1", "c10", "c11")
#define QAT_WG_OPERANDS                                                                         \
  : [c00] "+x"(acc[0][0]), [c01] "+x"(acc[0][1]), [c10] "+x"(acc[1][0]), [c11] "+x"(acc[1][1]), \
    [a0] "+r"(a0), [a1] "+r"(a1), [w] "+r"(w), [n] "+r"(n)                                     \
  :                                                                                             \
  : "xmm8", "xmm9", "xmm10", "xmm11", "xmm12", "xmm13", "xmm14", "xmm15", "cc", "memory"
HWY_INLINE void winograd_2x16(Vec (&acc)[2][2], const std::uint8_t* a0, const std::uint8_t* a1,
                              const std::uint8_t* w, std::int64_t groups) {
  if (std::int64_t n = groups / 4; n > 0)
    asm(".p2align 5\n1:\n\t"
        QAT_WG_GROUP("0", "0") QAT_WG_GROUP("8", "128") QAT_WG_GROUP("16", "256") QAT_WG_GROUP("24", "384")
        "add $512, %[w]\n\tadd $32, %[a0]\n\tadd $32, %[a1]\n\tdec %[n]\n\tjnz 1b"
        QAT_WG_OPERANDS);
  if (std::int64_t n = groups % 4; n > 0)  // the groups left, one at a time
    asm("1:\n\t" QAT_WG_GROUP("0", "0")
        "sub $-128, %[w]\n\tadd $8, %[a0]\n\tadd $8, %[a1]\n\tdec %[n]\n\tjnz 1b"
        QAT_WG_OPERANDS);
}
// clang-format on

// 2 rows (ap[i], rho[i]) times block b: the accumulators start at acc0 - rho (acc0 holds
// -zx rowsum(w) - gamma). Not inlined: one loop's registers for the assembly.
HWY_NOINLINE void winograd_tile(const GemmArgs& g, const std::uint8_t* const* ap,
                                const std::int32_t* rho, std::int64_t b, std::int64_t row,
                                std::int64_t valid) {
  Vec acc[2][2];
  for (int v = 0; v < 2; ++v) {
    const Vec init = load(g.acc0 + b * kBlock + v * kLanes);
    for (int i = 0; i < 2; ++i) acc[i][v] = _mm256_sub_epi32(init, set32(rho[i]));
  }
  winograd_2x16(acc, ap[0], ap[1], g.w + b * g.steps * kStepBytes, g.steps / 2);
  store_tile<1, 2, kOutBytes>(g, acc, b, row, valid);
}
#undef QAT_WG_LOAD
#undef QAT_WG_ROW
#undef QAT_WG_GROUP
#undef QAT_WG_OPERANDS

// Rows [r0, r1) x blocks [b0, b1) of a Winograd GEMM: the rows widened to u16 pairs in blocks of
// kRowBlock (an odd count padded with a zero row), each weight block kept in L1 while a pass of
// the block's row pairs goes over it.
void winograd_rows(const GemmArgs& g, std::int64_t r0, std::int64_t r1, std::int64_t b0, std::int64_t b1,
                   void* scratch) {
  constexpr std::int64_t MR = 2;
  static_assert(kRowBlock % MR == 0);
  auto* s = static_cast<std::uint8_t*>(scratch);
  const std::int64_t astride = g.steps * 4;
  auto* const rho = reinterpret_cast<std::int32_t*>(s + kRowBlock * astride + 64 + g.steps * 4);
  const std::uint8_t* ap[kRowBlock];
  for (std::int64_t r = r0; r < r1; r += kRowBlock) {
    const std::int64_t rows = r1 - r < kRowBlock ? r1 - r : kRowBlock,
                       rows_pad = (rows + MR - 1) / MR * MR;
    fill_rows<PackFormat::Pairs>(g, r, rows, rows_pad, s);
    for (std::int64_t i = 0; i < rows_pad; ++i) {
      ap[i] = s + i * astride;
      rho[i] = winograd_rho(ap[i], g.steps / 2);  // (0 for a padding row)
    }
    // rows per pass over a weight block: the block (32 K bytes) and the pass's rows (2 K bytes
    // each) within ~40 KiB of L1 (the tile loop alone at K = 784: 24 rows a pass 106 GMAC/s,
    // 16 or fewer 128-133)
    const std::int64_t wbytes = 32 * 2 * g.steps, rbytes = 4 * g.steps;
    const std::int64_t most = wbytes + MR * rbytes <= (40 << 10)
                                  ? ((40 << 10) - wbytes) / rbytes / MR * MR
                                  : rows_pad,
                       passes = (rows_pad + most - 1) / most,
                       pass = (rows_pad / MR + passes - 1) / passes * MR;  // the rows shared out evenly
    for (std::int64_t p = 0; p < rows; p += pass)
      for (std::int64_t b = b0; b < b1; ++b)
        for (std::int64_t t = p; t < rows && t < p + pass; t += MR)
          winograd_tile(g, ap + t, rho + t, b, r + t, rows - t < MR ? rows - t : MR);
  }
}
#else
bool WinogradImpl() { return false; }
#endif

#if HWY_TARGET == HWY_AVX2
// AVX-VNNI (Alder Lake, Zen 5): the same tiles on quads, multiplied by the VEX vpdpbusd on ymm,
// exact like AVX512_VNNI's (u8 x s8 quads summed into int32, no int16 step). Chosen at run time
// by cpu::int8_avx_vnni() (the avx2_vnni path); the rest of the AVX2 target is unchanged.
#pragma GCC push_options
#pragma GCC target("avxvnni")
#undef QAT_TILE_TARGET
#define QAT_TILE_TARGET QAT_VNNI_TARGET("avxvnni")
namespace avx_vnni {
constexpr PackFormat kNative = PackFormat::Quads;
HWY_INLINE QAT_TILE_TARGET Vec dot(Vec acc, Vec a, Vec b) { return _mm256_dpbusd_avx_epi32(acc, a, b); }
#include "modules/quant/kernels/cpu/int8_tile-inl.h"  // IWYU pragma: keep
}  // namespace avx_vnni
#undef QAT_TILE_TARGET
#define QAT_TILE_TARGET
#pragma GCC pop_options
#endif

void GemmRangeImpl(const GemmArgs& g, std::int64_t r0, std::int64_t r1, std::int64_t b0, std::int64_t b1,
                   void* scratch) {
#if HWY_TARGET == HWY_AVX2
  if (g.format == PackFormat::Winograd) return winograd_rows(g, r0, r1, b0, b1, scratch);
  if (cpu::int8_avx_vnni()) {  // quads only (PackFormatImpl; gemm_u8s8_packed checks the packing)
    if (g.pool) return avx_vnni::gemm_rows_of_format<avx_vnni::kOutPool>(g, r0, r1, b0, b1, scratch);
    return avx_vnni::gemm_rows_of_format<avx_vnni::kOutBytes>(g, r0, r1, b0, b1, scratch);
  }
#endif
  // raw sums: the row Winograd's GEMMs, on the int16-pairs paths only (RowWinogradWeights::usable)
  if constexpr (kNative == PackFormat::Pairs)
    if (g.y32) return gemm_rows_of_format<kOutRaw>(g, r0, r1, b0, b1, scratch);
  if (g.pool) return gemm_rows_of_format<kOutPool>(g, r0, r1, b0, b1, scratch);
  gemm_rows_of_format<kOutBytes>(g, r0, r1, b0, b1, scratch);
}
#endif

}  // namespace qat::quant::int8::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace qat::quant::int8::kernels {

HWY_EXPORT(PackFormatImpl);
HWY_EXPORT(SchedGroupImpl);
HWY_EXPORT(GemmRangeImpl);
HWY_EXPORT(WinogradImpl);

PackFormat pack_format(bool narrow) {
  return static_cast<PackFormat>(QAT_DISPATCH(PackFormatImpl)(narrow));
}

std::int64_t sched_group() { return QAT_DISPATCH(SchedGroupImpl)(); }

bool winograd() { return QAT_DISPATCH(WinogradImpl)(); }

void gemm_range(const GemmArgs& a, std::int64_t r0, std::int64_t r1, std::int64_t b0, std::int64_t b1,
                void* scratch) {
  QAT_DISPATCH(GemmRangeImpl)(a, r0, r1, b0, b1, scratch);
}

}  // namespace qat::quant::int8::kernels
#endif  // HWY_ONCE
