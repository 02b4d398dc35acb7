#pragma once
// Integer-only inference kernels (Jacob et al. 2018, "Quantization and Training of Neural
// Networks for Efficient Integer-Arithmetic-Only Inference"): uint8 activations with a zero
// point, int8 symmetric per-channel weights and int32 accumulators. The output stage scales the
// accumulator in float32 and adds a float bias (Requant), as PyTorch's fbgemm backend; the
// fixed-point multiplier of Jacob et al. / TFLite is kept for integer-only requantization.
#include <cmath>
#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "framework/tensor/aligned_vector.h"

namespace qat::quant::int8 {

/// real = m0 * 2^(shift - 31) with m0 in [2^30, 2^31) (TFLite's QuantizeMultiplier); {0, 0} for
/// real < 2^-32. Throws for a negative or non-finite real.
struct Multiplier {
  std::int32_t m0 = 0;
  int shift = 0;
};
Multiplier quantize_multiplier(double real);

/// round(x * m0 * 2^(shift - 31)), ties away from zero, exactly (one rounding, 64-bit integers;
/// TFLite's single-rounding variant), saturated to int32.
std::int32_t multiply_by_quantized_multiplier(std::int32_t x, Multiplier m);

/// Output stage in the fake quantizer's float32 arithmetic (as PyTorch's fbgemm with a float
/// bias: the int32 accumulator scaled in float, the bias added in float), so that the int8 codes
/// equal the QAT model's wherever its float convolution rounds the same way:
///   y = clamp(round_half_even((float(acc) * scale[o] + bias[o]) * inv_scale), lo - zp, hi - zp) + zp
/// with acc = sum_k (x - zx) w (no bias in the accumulator).
struct Requant {
  const float* scale;       ///< per output channel: s_in * s_w[o]
  const float* bias;        ///< per output channel, the float bias; null: none
  float inv_scale;          ///< 1 / s_out, as the fake quantizer computes it (1.0f / scale)
  std::int32_t zero_point;  ///< output zero point
  std::int32_t lo, hi;      ///< clamp range (a fused ReLU raises lo to zero_point)
};

/// The reference output stage of one accumulator of channel o (the per-target kernels compute
/// the same float32 operations, no contraction, bit for bit). A NaN (only from a NaN scale or
/// bias, which the layers refuse) maps to lo.
inline std::uint8_t requantize(std::int32_t acc, const Requant& rq, std::int64_t o) {
  const float lo = static_cast<float>(rq.lo - rq.zero_point),
              hi = static_cast<float>(rq.hi - rq.zero_point);
  float v = (static_cast<float>(acc) * rq.scale[o] + (rq.bias ? rq.bias[o] : 0.0f)) * rq.inv_scale;
  v = v > lo ? v : lo;
  v = v < hi ? v : hi;
  return static_cast<std::uint8_t>(static_cast<std::int32_t>(std::nearbyint(v)) + rq.zero_point);
}

/// int8 weights (O, K) rearranged once for the GEMM micro-kernel of the current CPU path
/// (kernels/cpu/int8_gemm.h: blocks of 16 output channels, K padded; int16 pairs on AVX2 /
/// AVX-512 (on AVX2 in Winograd's form for pack_weights), int8 quads on AVX-VNNI, AVX-512 VNNI
/// and the generic path), with rowsum(w). Narrow packings
/// are for inputs mostly in [0, 127] (a 7-bit activation range, as PyTorch fbgemm's reduce_range, or
/// ReLU activations of a trained model, where 0.1-0.2% exceed 127): int8 quads on every path,
/// which AVX2 / AVX-512 multiply with vpmaddubsw, exactly in that range, and add the excess of
/// the few inputs above it in a second exact pass (quads_pay: when that is faster than pairs).
/// Inference layers keep one per weight; it is not saved in checkpoints.
struct PackedWeights {
  std::int64_t O = 0, K = 0, steps = 0;      ///< steps of 2 or 4 k values per 16-channel block
  std::int64_t pieces = 1, piece_steps = 0;  ///< K = pieces runs of K / pieces, each padded
  int format = -1;                           ///< kernels::PackFormat
  bool narrow = false;  ///< for inputs in [0, 127] only (set where that changes the kernel)
  AlignedVector<std::uint8_t> data;  ///< 64-byte aligned
  std::vector<std::int32_t> sums;    ///< rowsum(w) (O)
  /// Winograd packing: per channel gamma = sum over each 4 k of w0 w2 + w1 w3 (int8_gemm.h)
  std::vector<std::int32_t> gamma;
  /// narrow: the kernel's step order per group of `group` blocks, the steps it takes two at a
  /// time first (sched_pairs per group; kernels/cpu/int8_gemm.h, pair_schedule).
  std::int64_t group = 0;
  std::vector<std::int32_t> sched, sched_pairs;
  /// Whether the current CPU path (cpu::isa()) reads this packing.
  bool usable() const;
};
/// Packs w (O, K) for the current CPU path (narrow: for inputs in [0, 127]): for
/// gemm_u8s8_packed, by Winograd's identity where the path has it (kernels::winograd()).
PackedWeights pack_weights(const std::int8_t* w, std::int64_t O, std::int64_t K, bool narrow = false);
/// Packs w (O, pieces * L) for the implicit GEMM: each run of L k values padded to whole steps.
PackedWeights pack_weights_pieces(const std::int8_t* w, std::int64_t O, std::int64_t pieces,
                                  std::int64_t L, bool narrow = false);
/// Bytes per activation element in the current path's format (1: u8 quads, 2: u16 pairs).
int activation_bytes(bool narrow = false);
/// Whether every x[i] (n bytes) is in [0, 127]: the inputs a narrow packing reads in one pass.
bool all_narrow(const std::uint8_t* x, std::int64_t n);
/// How many of the n bytes at x are above 127.
std::int64_t count_wide(const std::uint8_t* x, std::int64_t n);
/// Whether the current CPU path has a faster kernel for narrow inputs (AVX2 and AVX-512 without
/// VNNI); elsewhere a narrow packing is the usual one.
bool narrow_is_faster();
/// Quads with the excess correction run faster than the 8-bit kernel (int16 pairs, Winograd's
/// form for a linear layer on AVX2) while at most 1 / ratio of the input bytes are above 127
/// (bench_int8 (a3) measures the crossing on AVX2): ~4% for a GEMM
/// (each byte read by one row), ~1% for a convolution (each byte read by kh kw windows, each
/// one more entry of the excess lists).
constexpr std::int64_t kQuadsPayGemm = 32, kQuadsPayConv = 100;
/// Which packing the int8 layers take on the paths where quads are faster (narrow_is_faster):
/// Auto by quads_pay; Always quads (plus the excess); Never the 8-bit kernel. Process-wide, from
/// QAT_INT8_QUADS=auto|always|never at first use (results are the same bits either way; for
/// measurements and tests: bench_int8 (a3)).
enum class QuadsPolicy { Auto, Always, Never };
void set_quads_policy(QuadsPolicy p);
QuadsPolicy quads_policy();
/// "auto", "always" or "never"; throws for anything else.
QuadsPolicy parse_quads_policy(std::string_view s);
/// Whether to pack narrow for an input of n bytes, `above` of them above 127: narrow_is_faster()
/// and, under QuadsPolicy::Auto, above <= n / ratio.
bool quads_pay(std::int64_t above, std::int64_t n, std::int64_t ratio = kQuadsPayGemm);

/// Implicit GEMM (a convolution read in place): y row m (M rows, ldy apart) =
/// requant(A_m . w^T - zx rowsum(w)), where A_m is the concatenation of w.pieces runs of
/// K / pieces activations, run p at x + row_off[m] + piece_off[p] bytes, stored as
/// activation_bytes(w.narrow) per element (uint8, or uint16 widened). Up to 4 elements past a
/// run's end are read (times zero weights): keep that many readable bytes after the last run.
/// With narrow weights, either every activation read is in [0, 127] (the caller checked:
/// all_narrow) and x_narrow is null, or x_narrow holds min(x, 127) at the same offsets, row_off
/// is non-decreasing, and the kernel adds the excess of the inputs above 127 from x.
/// With `pool`, a 2 x 2 max pool of the output in the same pass: the GEMM visits pool->rows rows
/// (a multiple of 4), row r being row pool->map[r] of the M above, and each 4 consecutive rows
/// (one window) give one output row of y, the max of theirs. Needs every rq scale >= 0 (then
/// requantizing the max of the sums is the max of the requantized sums).
struct PooledRows {
  const std::int64_t* map;
  std::int64_t rows;
};
/// Where an implicit GEMM reads each input pixel (`unit` bytes), for the excess of inputs above
/// 127: the (row, run) places of every pixel of one image, found once per geometry, so that the
/// excess lists need no search (a convolution's 5 x 5 window gives each pixel 25 places). For
/// rows and bytes that repeat per image: row m + i rows at row_off[m] + i img, every row and run
/// at a whole pixel, each run piece_bytes (a multiple of unit) long.
struct ExcessTaps {
  struct Tap {
    std::int32_t row;    ///< the row, within its image
    std::int32_t step;   ///< the row's first step of the run (p piece_steps)
    std::int32_t place;  ///< the pixel's first byte in the run
  };
  std::int64_t unit = 0, img = 0, rows = 0;  ///< bytes per pixel; bytes and rows per image
  std::int64_t most = 0;                     ///< the most taps of a pixel
  std::vector<std::int64_t> begin;           ///< pixel u's taps: tap[begin[u] .. begin[u + 1])
  std::vector<Tap> tap;
};
/// The taps of the implicit GEMM's first image (rows [0, rows) at row_off, runs of piece_bytes at
/// piece_off[0 .. pieces), piece_steps steps of 4 bytes each in the packing). Throws where rows
/// or runs do not start at whole pixels or reach past the image.
ExcessTaps excess_taps(const std::int64_t* row_off, std::int64_t rows, std::int64_t img,
                       const std::int64_t* piece_off, std::int64_t pieces, std::int64_t piece_bytes,
                       std::int64_t piece_steps, std::int64_t unit);

/// `taps` (with x_narrow; optional): the excess lists from them (M a whole number of images).
void gemm_u8s8_implicit(const std::uint8_t* x, std::int64_t M, const std::int64_t* row_off,
                        const std::int64_t* piece_off, std::int32_t zx, const PackedWeights& w,
                        const Requant& rq, std::uint8_t* y, std::int64_t ldy,
                        const std::uint8_t* x_narrow = nullptr, const PooledRows* pool = nullptr,
                        const ExcessTaps* taps = nullptr);

/// Winograd's minimal filtering along the rows of an int8 convolution (kernels/cpu/int8_winograd.h):
/// F(4, kw) for kw in {3, 5}, exact in integers, so the same bytes as the implicit GEMM. Taken on
/// the paths whose int8 multiply is vpmaddwd on int16 pairs (AVX2 and AVX-512 without VNNI): there
/// 8 multiplies per 4 outputs and kernel row replace 20 (5 x 5), and vpmaddwd's 16 products an
/// instruction the direct kernel's ~21 (vpmaddubsw pairs), a 1.6x smaller count; with VNNI the
/// direct kernel's 32 products per instruction leave too little.
/// Weights: per point xi, U_xi (O, kh Cp) = G w (int16, |U| <= 3968) in the pairs layout, kh
/// pieces of Cp = C rounded up to even; rowsum(w) for the zero point.
struct RowWinogradWeights {
  std::int64_t O = 0, C = 0, kh = 0, kw = 0, m = 0;  ///< m: outputs per tile (F(m, kw))
  std::vector<PackedWeights> points;
  std::vector<std::int32_t> sums;
  /// Whether the current CPU path reads this packing.
  bool usable() const;
};
/// Process-wide: whether int8 convolutions may take the row Winograd (QAT_INT8_WINOGRAD=0 turns it
/// off at first use; on by default). Either way the same bytes: for measurements and tests.
void set_row_winograd(bool on);
bool row_winograd_enabled();
/// The tile (m outputs, F(m, kw)) the current path takes for kw taps along rows of Wo outputs
/// (stride and dilation 1 along them), or 0 for none: enabled, a path with int16 pairs, kw in
/// {3, 5}; the tile with the fewest multiplies (n ceil(Wo / m)), if at most 0.7x the direct
/// kernel's (kw Wo).
std::int64_t row_winograd_tile(std::int64_t kw, std::int64_t Wo);
/// w (O, C, kh, kw) int8 transformed for tiles of m outputs and packed for the current path;
/// nullopt where F(m, kw) has no table or a channel's bound 128 sum |w| reaches 2^28, past which
/// the int32 sums no longer determine the result (int8_winograd.h).
std::optional<RowWinogradWeights> pack_row_winograd(const std::int8_t* w, std::int64_t O, std::int64_t C,
                                                    std::int64_t kh, std::int64_t kw, std::int64_t m);
/// The convolution of n images x (n, Hp, Wx, C) uint8, channels-last, padded already (borders of
/// zx; Wx >= col0 + m ceil(Wo / m) + kw - 1 columns, the ones past the image any byte): output
/// (oh, col0 + ow), ow < Wo, reads input rows oh sh + r dh, r < kh, columns col0 + ow ..
/// col0 + ow + kw - 1.
///   y (n, Ho, Wo, O) = requant(sum (x - zx) w), exactly as gemm_u8s8_implicit;
/// with `pool` a 2 x 2 max pool in the output stage instead, y (n, Ho / 2, Wo / 2, O) (needs every
/// rq scale >= 0, as PooledRows). A slice of a wider output (col0 > 0, even when pooled) lands at
/// its columns of y rows of y_row pixels, y_image bytes per image (0: this slice's own sizes), so
/// that two tables may share a row. Threads over images; the same bytes at any thread count.
void conv_u8s8_row_winograd(const std::uint8_t* x, std::int64_t n, std::int64_t Hp, std::int64_t Wx,
                            std::int64_t Ho, std::int64_t Wo, std::int64_t sh, std::int64_t dh,
                            std::int32_t zx, const RowWinogradWeights& w, const Requant& rq, bool pool,
                            std::uint8_t* y, std::int64_t col0 = 0, std::int64_t y_row = 0,
                            std::int64_t y_image = 0);

/// y (M, O), rows ldy apart = requant(x (M, K), rows ldx apart, . w^T - zx rowsum(w)), x
/// uint8 with zero point zx. Blocked GEMM on the packed weights with the
/// output stage fused; OpenMP over row / channel blocks when get_num_threads() > 1 (the result
/// does not depend on the thread count or the CPU path). Throws if w was packed for another path.
/// With narrow weights any x works: the rows are clamped to 127 and the excess added, a pass
/// that x_checked_narrow (the caller's all_narrow said every x is in [0, 127]) skips.
void gemm_u8s8_packed(const std::uint8_t* x, std::int64_t M, std::int64_t ldx, std::int32_t zx,
                      const PackedWeights& w, const Requant& rq, std::uint8_t* y, std::int64_t ldy,
                      bool x_checked_narrow = false);

/// Rows of x up to which QuantizedLinear calls linear_u8s8_rows (a batch of one or two:
/// inference on single samples) instead of the packed GEMM: measured faster there on every path
/// (the packed GEMM's layer also checks its prepared weights against the stored ones).
constexpr std::int64_t kRowsMax = 2;

/// y (M, O), rows ldy apart = requant(sum_k (x(m, k) - zx) w(o, k)), x (M, K) uint8 rows ldx
/// apart, w int8 (O, K) read as stored: dot products of rows, nothing packed or cached, so a
/// layer needs no prepared copy of its weights (nor a check that they are unchanged). For a few
/// rows (kRowsMax): each weight is widened once for all of them. The same bytes
/// as gemm_u8s8_packed (exact int32 sums, the same output stage) on every path and thread count.
/// Throws for K outside [1, 65793] (int32 sums) or zx outside [0, 255].
void linear_u8s8_rows(const std::uint8_t* x, std::int64_t M, std::int64_t ldx, std::int32_t zx,
                      const std::int8_t* w, std::int64_t O, std::int64_t K, const Requant& rq,
                      std::uint8_t* y, std::int64_t ldy);

/// y (N, O) = requant(x (N, K) . w^T - zx * rowsum(w)), x uint8 with zero point zx,
/// w int8 (O, K), w_sums = rowsum(w) (O, precomputed). Packs w on every call, narrow when
/// quads_pay for x (layers pack once: pack_weights + gemm_u8s8_packed).
void linear_u8s8(const std::uint8_t* x, std::int64_t N, std::int64_t K, std::int32_t zx,
                 const std::int8_t* w, const std::int32_t* w_sums, std::int64_t O, const Requant& rq,
                 std::uint8_t* y);

/// y (O, P) = requant(w (O, K) . col (K, P) - zx * rowsum(w)), col uint8.
void gemm_u8s8_cols(const std::int8_t* w, const std::int32_t* w_sums, std::int64_t O, std::int64_t K,
                    const std::uint8_t* col, std::int64_t P, std::int32_t zx, const Requant& rq,
                    std::uint8_t* y);

/// The scalar references of linear_u8s8 / gemm_u8s8_cols (plain loops; tests compare with them).
void linear_u8s8_reference(const std::uint8_t* x, std::int64_t N, std::int64_t K, std::int32_t zx,
                           const std::int8_t* w, const std::int32_t* w_sums, std::int64_t O,
                           const Requant& rq, std::uint8_t* y);
void gemm_u8s8_cols_reference(const std::int8_t* w, const std::int32_t* w_sums, std::int64_t O,
                              std::int64_t K, const std::uint8_t* col, std::int64_t P, std::int32_t zx,
                              const Requant& rq, std::uint8_t* y);

}  // namespace qat::quant::int8
