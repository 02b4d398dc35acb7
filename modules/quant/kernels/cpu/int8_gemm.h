#pragma once
// Internal: the blocked u8 x s8 -> int32 GEMM with a fused requantization stage, compiled once
// per instruction set (framework/tensor/simd.h). int8_kernels.h is the public face.
//
// Packed weights: output channels in blocks of 16, K padded with zero weights, one 64-byte
// "step" per block and group of k:
//   quads (generic, AVX2_VNNI, AVX512_VNNI):  step s of block b = [16 channels][4 x int8], k = 4s..4s+3
//   pairs (AVX2, AVX512):                     step s of block b = [16 channels][2 x int16], k = 2s, 2s+1
// (pairs are widened at pack time so that vpmaddwd multiplies exactly: u8 x s8 products summed
// in pairs reach 2 * 255 * 128 > 32767, which vpmaddubsw would saturate).
// Narrow inputs (every activation in [0, 127], e.g. PyTorch fbgemm's reduce_range) use quads on
// every path: AVX2 / AVX512 multiply them with vpmaddubsw, exact since 2 * 127 * 128 = 32512 <=
// 32767, then sum the int16 pairs with vpmaddwd by ones: 3 instructions per 32 (AVX2) products
// against 4 for the pairs, and half the activation bytes.
// Inputs with a few bytes above 127 (ReLU activations of a trained model: 0.1-0.2% of them) take
// the same quads with excess correction: a = min(a, 127) + e, e = max(a - 127, 0) in [0, 128];
// the kernel multiplies min(a, 127) as above, then adds e . w for each quad of a row that has a
// byte above 127, again through vpmaddubsw: |e0 w0 + e1 w1| <= 2 * 128 * 128 = 32768, and the
// only sum of that size is -32768 (e = 128, w = -128), which int16 holds. Exact for any input;
// faster than the pairs while such quads are rare (int8::quads_pay decides).
// Paired steps (GemmArgs::sched): the narrow tile may take two steps at once, adding the int16
// pair sums of both with vpaddw before one vpmaddwd widens them: 3 multiplies for 2 steps where
// single steps take 4. Exact where the weights bound the sum (kPairedStepBound); which steps pair
// is chosen once, at pack time, per group of blocks (pair_schedule).
// Winograd (AVX2 without VNNI, linear layers): the pairs packing with an even number of steps,
// each two steps (4 k) multiplied by Winograd's inner-product identity (S. Winograd, "A new
// algorithm for inner product", IEEE Trans. Computers, 1968):
//   a0 w0 + a1 w1 + a2 w2 + a3 w3 = (a0 + w2)(a2 + w0) + (a1 + w3)(a3 + w1) - rho - gamma,
//   rho = a0 a2 + a1 a3 (per row, summed over K), gamma = w0 w2 + w1 w3 (per channel, at packing)
// The sums a + w lie in [-128, 382] (int16), so one vpmaddwd takes 4 products of a channel
// where the pairs take two: 2 vpaddw + vpmaddwd + vpaddd per 32 multiply-adds, half the
// multiplies (AVX2's pairs: 2 vpmaddwd + 2 vpaddd). Exact: every product and pair sum fits int32,
// and the accumulator's wrap-around additions give the true sum wherever it fits int32.
#include <cstdint>

#include "modules/quant/int8_kernels.h"

namespace qat::quant::int8::kernels {

constexpr std::int64_t kBlock = 16;      ///< output channels per packed block
constexpr std::int64_t kStepBytes = 64;  ///< bytes of one step of one block

enum class PackFormat : int { Quads = 0, Pairs = 1, Winograd = 2 };

/// k values per step of a format (4 for quads, 2 for pairs and Winograd's).
inline std::int64_t k_per_step(PackFormat f) { return f == PackFormat::Quads ? 4 : 2; }

/// Everything one GEMM call needs, as raw pointers (no std:: types cross into per-target code).
struct GemmArgs {
  const std::uint8_t* x;  ///< (M, K) rows, stride ldx (when row_off is null)
  std::int64_t M, K, ldx;
  const std::uint8_t* w;     ///< packed: blocks * steps * kStepBytes
  std::int64_t steps;        ///< per block
  std::int64_t O;            ///< real output channels (blocks = ceil(O / 16))
  const std::int32_t* acc0;  ///< per padded channel: -zx rowsum(w)
  const float* scale;        ///< per padded channel: s_in s_w (0 on the pads)
  const float* bias;         ///< per padded channel: the float bias (0 on the pads)
  float inv_scale;           ///< 1 / s_out
  float lo, hi;              ///< the clamp range minus the zero point
  std::int32_t zp;           ///< output zero point
  std::uint8_t* y;           ///< (M, O) rows, stride ldy
  std::int64_t ldy;
  /// Implicit GEMM (a convolution read in place): row m of A is the concatenation of `pieces`
  /// runs, piece p at x + row_off[m] + piece_off[p] bytes, each piece_steps steps of 4 bytes
  /// already in the format the kernel reads (quads: u8; pairs: u16), the weights packed with the
  /// same pieces (pack_weights_pieces). Null: rows of x (u8, K), copied / widened to a scratch.
  const std::int64_t* row_off = nullptr;
  const std::int64_t* piece_off = nullptr;
  std::int64_t pieces = 1, piece_steps = 0;
  /// The packing of w (and of the activations read): Quads on a Pairs path reads inputs in
  /// [0, 127], or any input with `excess`.
  PackFormat format = PackFormat::Pairs;
  /// Quads on a Pairs path for inputs that may exceed 127 (see above): the tile multiplies
  /// min(a, 127), then adds row m's excess quads ex[ex_row[m] .. ex_row[m + 1]). Rows of x are
  /// clamped as they are copied; an implicit GEMM reads A from x_narrow = min(x, 127) (same
  /// offsets). Null ex_row: no excess (inputs in [0, 127]).
  const std::int64_t* ex_row = nullptr;
  const struct Excess* ex = nullptr;
  const std::uint8_t* x_narrow = nullptr;
  /// Implicit GEMM only: GEMM row m is the convolution's row row_map[m] (its A at
  /// row_off[row_map[m]], its excess at ex_row[row_map[m]]). Null: row m.
  const std::int64_t* row_map = nullptr;
  /// A narrow format on a vpmaddubsw path (required there, unused elsewhere): per group of
  /// sched_group() blocks, the `steps` steps in the order the tile takes them,
  /// sched_pairs[group] paired steps first (2 entries each), then single steps.
  const std::int32_t* sched = nullptr;
  const std::int32_t* sched_pairs = nullptr;
  /// A 2 x 2 max pool in the output stage: each kPoolWindow consecutive GEMM rows are one window;
  /// the tile takes the max of their int32 sums and requantizes it once into y row m / 4
  /// (exact where every scale is >= 0: the output stage is then monotone in the sum).
  bool pool = false;
  /// Raw sums instead of the output stage (the GEMMs of the int8 row Winograd, int8_winograd.h;
  /// int16-pairs paths only): the int32 accumulators (from acc0) of row m at y32 + m ldy, all 16
  /// lanes of each block (ldy >= blocks * 16); scale, bias and y unused, no pool.
  std::int32_t* y32 = nullptr;
};

constexpr std::int64_t kPoolWindow = 4;  ///< GEMM rows per output row with GemmArgs::pool

/// What a byte above 127 adds to a row: the step of the row that reads it and a quad of excess
/// bytes (max(a - 127, 0) at the byte's place in the step, zeros elsewhere).
struct Excess {
  std::int32_t step;
  std::uint32_t quad;
};

/// Rows per scratch block (a multiple of every micro-kernel's row count and of kPoolWindow).
constexpr std::int64_t kRowBlock = 24;
/// Scratch bytes gemm_range needs (per thread): the rows' copy, then each step's offset in a
/// row (int32), then each row's Winograd correction rho (int32).
inline std::int64_t scratch_bytes(std::int64_t steps) {
  return kRowBlock * steps * 4 + 64 + steps * 4 + kRowBlock * 4;
}

/// Two steps of narrow quads summed in int16: one int16 lane then holds a0 w0 + a1 w1 + a2 w2 +
/// a3 w3 (two k of each step, one output channel), which for a in [0, 127] lies in
/// [-127 N, 127 P], P the sum of the lane's positive weights and N of its negative weights'
/// magnitudes. P, N <= 258 keep it in int16 (127 * 258 = 32766 <= 32767, 32766 <= 32768); each
/// step's own sum never saturates (|a0 w0 + a1 w1| <= 32512), and vpaddw wraps, but an exact sum
/// in range is the wrapped one.
constexpr std::int32_t kPairedStepBound = 258;

/// A step order for the blocks [b, b + nb) of narrow quads w (packed as above, `steps` steps per
/// block): the indices of `steps` steps into order, pairs first, every pair within
/// kPairedStepBound on each int16 lane of the nb blocks; returns the number of pairs.
/// Best fit: the heaviest step left takes the heaviest one it may pair with.
std::int64_t pair_schedule(const std::uint8_t* w, std::int64_t steps, std::int64_t b, std::int64_t nb,
                           std::int32_t* order);
/// Blocks per group of the narrow tile's step order on the current path (the blocks it
/// multiplies at once).
std::int64_t sched_group();

/// The packing format of the current path for inputs in [0, 255] (narrow: in [0, 127]).
PackFormat pack_format(bool narrow = false);
/// Whether the current path multiplies a GEMM on rows of x (not an implicit one) by Winograd's
/// identity for inputs in [0, 255] (AVX2 without VNNI): pack_weights packs them so.
bool winograd();
/// Rows [r0, r1) and channel blocks [b0, b1) of y; scratch of scratch_bytes(a.steps).
void gemm_range(const GemmArgs& a, std::int64_t r0, std::int64_t r1, std::int64_t b0, std::int64_t b1,
                void* scratch);

}  // namespace qat::quant::int8::kernels
