#include "modules/quant/int8_kernels.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <iostream>
#include <limits>
#include <string>
#include <string_view>
#include <vector>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#ifdef _OPENMP
#include <omp.h>
#endif

#include "framework/tensor/cpu.h"
#include "framework/tensor/error.h"
#include "framework/tensor/parallel.h"
#include "modules/quant/detail/int8_excess.h"
#include "modules/quant/kernels/cpu/int8_gemm.h"

namespace qat::quant::int8 {

Multiplier quantize_multiplier(double real) {
  QAT_REQUIRE(std::isfinite(real) && real >= 0, "int8::quantize_multiplier",
              "the requantization multiplier must be finite and >= 0, got ", real);
  if (real == 0.0) return {0, 0};
  int shift = 0;
  const double q = std::frexp(real, &shift);  // real = q 2^shift, q in [0.5, 1)
  auto q_fixed = static_cast<std::int64_t>(std::round(q * (1LL << 31)));
  if (q_fixed == (1LL << 31)) {
    q_fixed /= 2;
    ++shift;
  }
  if (shift < -31) return {0, 0};
  return {static_cast<std::int32_t>(q_fixed), shift};
}

// x * m0 * 2^(shift - 31) rounded once, ties away from zero, in 64-bit integer arithmetic
// (TFLite's single-rounding requantization; the older double rounding of gemmlowp is off by one
// near ties).
std::int32_t multiply_by_quantized_multiplier(std::int32_t x, Multiplier m) {
  const std::int64_t p = static_cast<std::int64_t>(x) * m.m0;
  const int right = 31 - m.shift;
  std::int64_t r;
  if (right <= 0) {  // p 2^L, saturated: |p| > 2^31 saturates whatever L is
    const int left = -right;
    const std::int64_t pc = std::clamp<std::int64_t>(p, INT32_MIN, INT32_MAX);
    r = left >= 32 ? (p > 0 ? INT64_MAX : p < 0 ? INT64_MIN : 0) : pc * (std::int64_t{1} << left);
  } else if (right >= 63) {
    r = 0;
  } else {
    const std::int64_t half = std::int64_t{1} << (right - 1);
    r = (p + half - (p < 0 ? 1 : 0)) >> right;  // arithmetic shift: floor
  }
  return static_cast<std::int32_t>(std::clamp<std::int64_t>(r, INT32_MIN, INT32_MAX));
}

namespace {
// sum_k x[k] w[k] in int32 (vectorises: u8 and s8 widen to int32 lanes)
inline std::int32_t dot_u8s8(const std::uint8_t* __restrict x, const std::int8_t* __restrict w,
                             std::int64_t K) {
  std::int32_t acc = 0;
  for (std::int64_t k = 0; k < K; ++k)
    acc += static_cast<std::int32_t>(x[k]) * static_cast<std::int32_t>(w[k]);
  return acc;
}

// acc[p] += w * col[p]
inline void axpy_s8u8(std::int32_t w, const std::uint8_t* __restrict col, std::int32_t* __restrict acc,
                      std::int64_t P) {
  for (std::int64_t p = 0; p < P; ++p) acc[p] += w * static_cast<std::int32_t>(col[p]);
}
}  // namespace

// acc = sum_k (x - zx) w = x.w - zx rowsum(w)
void linear_u8s8_reference(const std::uint8_t* x, std::int64_t N, std::int64_t K, std::int32_t zx,
                           const std::int8_t* w, const std::int32_t* w_sums, std::int64_t O,
                           const Requant& rq, std::uint8_t* y) {
  for (std::int64_t n = 0; n < N; ++n)
    for (std::int64_t o = 0; o < O; ++o) {
      const std::int32_t acc = dot_u8s8(x + n * K, w + o * K, K) - zx * w_sums[o];
      y[n * O + o] = requantize(acc, rq, o);
    }
}

void gemm_u8s8_cols_reference(const std::int8_t* w, const std::int32_t* w_sums, std::int64_t O,
                              std::int64_t K, const std::uint8_t* col, std::int64_t P, std::int32_t zx,
                              const Requant& rq, std::uint8_t* y) {
  std::vector<std::int32_t> acc(P);
  for (std::int64_t o = 0; o < O; ++o) {
    std::fill(acc.begin(), acc.end(), -zx * w_sums[o]);
    for (std::int64_t k = 0; k < K; ++k) axpy_s8u8(w[o * K + k], col + k * P, acc.data(), P);
    for (std::int64_t p = 0; p < P; ++p) y[o * P + p] = requantize(acc[p], rq, o);
  }
}

// ---- the blocked GEMM (kernels/cpu/int8_gemm.cpp) --------------------------------------------

bool all_narrow(const std::uint8_t* x, std::int64_t n) {
  std::uint8_t any = 0;  // the high bits of every byte (a loop the compiler vectorizes)
  for (std::int64_t i = 0; i < n; ++i) any |= x[i];
  return any < 128;
}

bool narrow_is_faster() { return kernels::pack_format(true) != kernels::pack_format(false); }

std::int64_t count_wide(const std::uint8_t* x, std::int64_t n) {
  std::int64_t above = 0, i = 0;
#if defined(__SSE2__)  // (every x86-64) the high bits of 16 bytes as 0 / 1, summed by psadbw
  const __m128i one = _mm_set1_epi8(1), zero = _mm_setzero_si128();
  __m128i sums = zero;
  for (; i + 16 <= n; i += 16) {
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x + i));
    sums = _mm_add_epi64(sums, _mm_sad_epu8(_mm_and_si128(_mm_srli_epi16(v, 7), one), zero));
  }
  above = _mm_cvtsi128_si64(sums) + _mm_cvtsi128_si64(_mm_unpackhi_epi64(sums, sums));
#endif
  for (; i < n; ++i) above += x[i] >> 7;
  return above;
}

QuadsPolicy parse_quads_policy(std::string_view s) {
  if (s == "auto") return QuadsPolicy::Auto;
  if (s == "always") return QuadsPolicy::Always;
  if (s == "never") return QuadsPolicy::Never;
  QAT_REQUIRE(false, "int8::parse_quads_policy", "expected auto, always or never, got \"", s, "\"");
  return QuadsPolicy::Auto;
}

namespace {
// QAT_INT8_QUADS at first use (an invalid value is reported and ignored, as QAT_CPU's)
std::atomic<QuadsPolicy>& policy() {
  static std::atomic<QuadsPolicy> p{[] {
    const char* env = std::getenv("QAT_INT8_QUADS");
    if (env == nullptr || *env == '\0') return QuadsPolicy::Auto;
    try {
      return parse_quads_policy(env);
    } catch (const Error& e) {
      std::cerr << "qat: ignoring QAT_INT8_QUADS: " << e.what() << "\n";
      return QuadsPolicy::Auto;
    }
  }()};
  return p;
}
}  // namespace
void set_quads_policy(QuadsPolicy p) { policy() = p; }
QuadsPolicy quads_policy() { return policy(); }

bool quads_pay(std::int64_t above, std::int64_t n, std::int64_t ratio) {
  if (!narrow_is_faster()) return false;
  switch (quads_policy()) {
    case QuadsPolicy::Always:
      return true;
    case QuadsPolicy::Never:
      return false;
    default:
      return above * ratio <= n;
  }
}

namespace {

// The output-stage tables, then rows split over threads (or channel blocks when rows are few).
// pool: the GEMM runs over pool->rows mapped rows (a.M: the convolution's rows, for the excess).
void run_gemm(kernels::GemmArgs a, const PackedWeights& w, std::int32_t zx, const Requant& rq,
              bool excess = false, const PooledRows* pool = nullptr, const ExcessTaps* taps = nullptr) {
  using namespace kernels;
  // "format F" and, for a narrow packing, the blocks per group of its step order
  const auto layout = [&](int format, std::int64_t group) {
    return "format " + std::to_string(format) +
           (w.narrow ? " (narrow, step order per " + std::to_string(group) + " blocks)" : "");
  };
  QAT_REQUIRE(w.usable(), "int8::gemm_u8s8_packed", "the weights were packed in ",
              layout(w.format, w.group), " but the CPU path ", cpu::isa_name(cpu::isa()), " reads ",
              layout(static_cast<int>(pack_format(w.narrow)), sched_group()), ": pack them again");
  a.format = static_cast<PackFormat>(w.format);
  if (a.M <= 0) return;
  const std::int64_t O = w.O, blocks = (O + kBlock - 1) / kBlock, Op = blocks * kBlock;
  // per padded channel: acc0 = -zx rowsum(w) (wrapping as the int32 sums do), scale, bias
  std::vector<std::int32_t> acc0(Op, 0);
  std::vector<float> scale(Op, 0.0f), bias(Op, 0.0f);
  for (std::int64_t o = 0; o < O; ++o) {
    acc0[o] = static_cast<std::int32_t>(
        0u - static_cast<std::uint32_t>(zx) * static_cast<std::uint32_t>(w.sums[o]) -
        (w.gamma.empty() ? 0u : static_cast<std::uint32_t>(w.gamma[o])));
    scale[o] = rq.scale[o];
    bias[o] = rq.bias ? rq.bias[o] : 0.0f;
  }
  a.K = w.K;
  a.w = w.data.data();
  a.steps = w.steps;
  a.O = O;
  a.acc0 = acc0.data();
  a.scale = scale.data();
  a.bias = bias.data();
  a.inv_scale = rq.inv_scale;
  a.lo = static_cast<float>(rq.lo - rq.zero_point);
  a.hi = static_cast<float>(rq.hi - rq.zero_point);
  a.zp = rq.zero_point;
  a.pieces = w.pieces;
  a.piece_steps = w.piece_steps;
  if (w.narrow) {
    a.sched = w.sched.data();
    a.sched_pairs = w.sched_pairs.data();
  }
  thread_local detail::ExcessLists lists;
  if (excess) {
    if (taps)
      detail::taps_excess(a.x, a.M, *taps, lists);
    else if (a.row_off)
      detail::implicit_excess(a.x, a.M, a.row_off, a.piece_off, w.pieces, w.piece_steps, lists);
    else
      detail::rows_excess(a.x, a.M, w.K, a.ldx, lists);
    if (!lists.ex.empty()) {  // else every input read is in [0, 127]: plain quads
      a.ex_row = lists.row.data();
      a.ex = lists.ex.data();
    }
  }
  if (pool) {
    a.row_map = pool->map;
    a.pool = true;
    a.M = pool->rows;
  }
  const std::int64_t M = a.M;
  if (M <= 0) return;
  const std::int64_t row_blocks = (M + kRowBlock - 1) / kRowBlock;
  const int threads = static_cast<int>(std::min<std::int64_t>(get_num_threads(), row_blocks * blocks));
  if (threads <= 1) {
    std::vector<std::uint8_t> scratch(scratch_bytes(w.steps));
    gemm_range(a, 0, M, 0, blocks, scratch.data());
    return;
  }
  // Each output is computed whole by one thread, in the same order: the result does not depend
  // on the split. Rows when there are enough of them, else channel blocks (in pairs).
#pragma omp parallel num_threads(threads)
  {
    std::vector<std::uint8_t> scratch(scratch_bytes(w.steps));
#ifdef _OPENMP
    const int t = omp_get_thread_num(), nt = omp_get_num_threads();
#else
    const int t = 0, nt = 1;
#endif
    if (row_blocks >= nt) {
      const std::int64_t per = (row_blocks + nt - 1) / nt;
      const std::int64_t r0 = std::min(M, t * per * kRowBlock),
                         r1 = std::min(M, (t + 1) * per * kRowBlock);
      if (r0 < r1) gemm_range(a, r0, r1, 0, blocks, scratch.data());
    } else {
      const std::int64_t pairs = (blocks + 1) / 2, per = (pairs + nt - 1) / nt;
      const std::int64_t b0 = std::min(blocks, 2 * t * per), b1 = std::min(blocks, 2 * (t + 1) * per);
      if (b0 < b1) gemm_range(a, 0, M, b0, b1, scratch.data());
    }
  }
}
}  // namespace

void gemm_u8s8_packed(const std::uint8_t* x, std::int64_t M, std::int64_t ldx, std::int32_t zx,
                      const PackedWeights& w, const Requant& rq, std::uint8_t* y, std::int64_t ldy,
                      bool x_checked_narrow) {
  QAT_REQUIRE(w.pieces == 1, "int8::gemm_u8s8_packed", "weights packed in ", w.pieces,
              " pieces are for gemm_u8s8_implicit");
  kernels::GemmArgs a{};
  a.x = x;
  a.M = M;
  a.ldx = ldx;
  a.y = y;
  a.ldy = ldy;
  run_gemm(a, w, zx, rq, w.narrow && !x_checked_narrow);  // quads plus the excess
}

void gemm_u8s8_implicit(const std::uint8_t* x, std::int64_t M, const std::int64_t* row_off,
                        const std::int64_t* piece_off, std::int32_t zx, const PackedWeights& w,
                        const Requant& rq, std::uint8_t* y, std::int64_t ldy,
                        const std::uint8_t* x_narrow, const PooledRows* pool, const ExcessTaps* taps) {
  QAT_REQUIRE(w.format != static_cast<int>(kernels::PackFormat::Winograd), "int8::gemm_u8s8_implicit",
              "weights packed by pack_weights (Winograd's form) are for gemm_u8s8_packed: pack them "
              "with pack_weights_pieces");
  if (pool) {
    QAT_REQUIRE(pool->rows % kernels::kPoolWindow == 0, "int8::gemm_u8s8_implicit", "pooled rows (",
                pool->rows, ") must be whole windows of ", kernels::kPoolWindow);
    QAT_REQUIRE(
        rq.inv_scale > 0 && std::all_of(rq.scale, rq.scale + w.O, [](float s) { return s >= 0; }),
        "int8::gemm_u8s8_implicit", "a pooled output stage needs scales >= 0");
  }
  kernels::GemmArgs a{};
  a.x = x;
  a.x_narrow = x_narrow;
  a.M = M;
  a.row_off = row_off;
  a.piece_off = piece_off;
  a.y = y;
  a.ldy = ldy;
  const bool excess = w.narrow && x_narrow != nullptr;
  if (excess && taps) {  // the rows repeat per image as the taps say
    QAT_REQUIRE(taps->rows > 0 && M % taps->rows == 0, "int8::gemm_u8s8_implicit", "M (", M,
                ") is not a whole number of images of ", taps->rows, " rows");
    for (std::int64_t m0 = 0, shift = 0; m0 < M; m0 += taps->rows, shift += taps->img)
      for (std::int64_t r = 0; r < taps->rows; ++r)
        QAT_REQUIRE(row_off[m0 + r] == shift + row_off[r], "int8::gemm_u8s8_implicit", "row_off[",
                    m0 + r, "] = ", row_off[m0 + r], " does not repeat the first image's rows every ",
                    taps->img, " bytes");
  }
  run_gemm(a, w, zx, rq, excess, pool, excess ? taps : nullptr);
}

void linear_u8s8(const std::uint8_t* x, std::int64_t N, std::int64_t K, std::int32_t zx,
                 const std::int8_t* w, const std::int32_t* w_sums, std::int64_t O, const Requant& rq,
                 std::uint8_t* y) {
  const std::int64_t above = count_wide(x, N * K);
  PackedWeights p = pack_weights(w, O, K, quads_pay(above, N * K));
  p.sums.assign(w_sums, w_sums + O);
  gemm_u8s8_packed(x, N, K, zx, p, rq, y, O, above == 0);
}

// y (O, P) = (col^T (P, K) . w^T)^T
void gemm_u8s8_cols(const std::int8_t* w, const std::int32_t* w_sums, std::int64_t O, std::int64_t K,
                    const std::uint8_t* col, std::int64_t P, std::int32_t zx, const Requant& rq,
                    std::uint8_t* y) {
  std::vector<std::uint8_t> xt(P * K), yt(P * O);
  for (std::int64_t k = 0; k < K; ++k)
    for (std::int64_t p = 0; p < P; ++p) xt[p * K + k] = col[k * P + p];
  linear_u8s8(xt.data(), P, K, zx, w, w_sums, O, rq, yt.data());
  for (std::int64_t p = 0; p < P; ++p)
    for (std::int64_t o = 0; o < O; ++o) y[o * P + p] = yt[p * O + o];
}

}  // namespace qat::quant::int8
