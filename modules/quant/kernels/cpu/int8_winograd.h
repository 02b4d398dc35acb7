#pragma once
// Internal: Winograd's minimal filtering along the rows of an int8 convolution, exactly, in
// integers (int8_kernels.h, conv_u8s8_row_winograd, is the public face). 1-D F(m, r) (Lavin &
// Gray 2016; the Toom-Cook construction of scripts/winograd_matrices.py): m outputs of an r-tap
// row correlation from n = m + r - 1 points, in integer matrices scaled by L:
//   L y_k = sum_xi A[k][xi] U_xi V_xi,  U_xi = sum_s G[xi][s] w_s,  V_xi = sum_s B[xi][s] d_s
// where d_0 .. d_{n-1} are n input columns, less 128 (centred: int8), and y_k = sum_s d_{k+s} w_s.
// Summed over the kernel rows and input channels, each point xi is one GEMM of int16 operands
// (vpmaddwd, the int16 pairs of int8_gemm.h): n GEMMs of kh C terms per m outputs, where the
// direct convolution takes m of kh r C. The tables:
//   F(4, 3): points 0, 1, -1, 2, -2, inf; L = 24;  6 multiplies per 4 outputs and kernel row, not 12
//   F(4, 5): the same and 1/2, -1/2;      L = 360; 8 per 4, not 20
//   F(5, 5): F(4, 5)'s and 3;             L = 12600; 9 per 5, not 25
// (a layer takes the one with the fewest multiplies for its row length: 14 outputs are 4 tiles of
// F(4, 5), 32, or 3 of F(5, 5), 27).
//
// Exact: |V| <= 200 * 128 = 25600 and |U| <= 121 * 128 = 15488 fit int16 (the largest row sums of
// |B| and |G|, F(5, 5)), so every product is exact, and the GEMM's wrapping int32 sums give
// S = L y modulo 2^32. L = 2^e q with q odd (e = 3 in all three): S q^-1 (q^-1 modulo 2^32) is
// 2^e y modulo 2^32, hence 2^e y itself wherever |y| < 2^(31 - e) = 2^28, and y = 2^e y >> e: with
// centred inputs in [-128, 127], wherever 128 sum_k |w_ok| < 2^28, which the packing checks per
// channel (any convolution of fewer than 16384 terms passes).
#include <cstdint>

namespace qat::quant::int8::kernels {

constexpr int kRowPoints = 9;  ///< the most points of a table
constexpr int kRowTaps = 5;    ///< the most taps
constexpr int kRowOutMax = 5;  ///< the most outputs per tile

struct RowTransform {
  int id;                                  ///< kRowF43, kRowF45 or kRowF55
  int m, r, n;                             ///< outputs, taps, points (n = m + r - 1)
  std::int16_t B[kRowPoints][kRowPoints];  ///< V = B d (n x n)
  std::int16_t G[kRowPoints][kRowTaps];    ///< U = G w (n x r)
  std::int32_t A[kRowOutMax][kRowPoints];  ///< L y = A (U . V) (m x n)
  std::int32_t L;
  int shift;                  ///< e: L = 2^e q
  std::uint32_t odd_inverse;  ///< q^-1 modulo 2^32
};
enum : int { kRowF43 = 0, kRowF45 = 1, kRowF55 = 2 };

/// The transform of m outputs and r taps ((4, 3), (4, 5) or (5, 5)), or null.
const RowTransform* row_transform(int m, int r);

/// The input transform of `rows` rows of an image (uint8, channels-last, row stride `ld` bytes,
/// C channels), `tiles` tiles of m outputs per row reading columns m t .. m t + n - 1:
/// V_xi = B (d - 128) at v + xi * plane + (t rows + h) Cp (int16, Cp = C rounded up to even,
/// the pad channel 0): a tile's rows next to each other, so that a kernel's kh rows are one run
/// of kh Cp values (dilation 1).
void row_input(const RowTransform& tr, const std::uint8_t* x, std::int64_t rows, std::int64_t ld,
               std::int64_t C, std::int64_t tiles, std::int16_t* v, std::int64_t plane);

/// The output stage of one image: from the n GEMM results M_xi (xi * mplane + (oh tiles + t) ldm
/// int32, O channels), 2^e y = S q^-1, acc = (2^e y >> e) + acc0[o], then
/// requantized (int8::requantize's float32 operations) into out (uint8, Ho rows of ld_out pixels of
/// O channels, the first Wo of each written), or with `pool` the max over each 2 x 2 window of acc
/// requantized into Ho / 2 rows of ld_out pixels, Wo / 2 written.
struct RowOutput {
  const std::int32_t* m;
  std::int64_t mplane, ldm;
  std::int64_t Ho, Wo, tiles, O;
  std::int64_t ld_out;  ///< pixels per row of out (>= Wo, or Wo / 2 pooled)
  const std::int32_t* acc0;
  const float *scale, *bias;
  float inv_scale, lo, hi;  ///< lo, hi: the clamp range minus the zero point
  std::int32_t zp;
  bool pool;
  std::uint8_t* out;
  /// (2 tiles m + 1) O int32 (row_output_scratch) for the channels past the vectors' multiple
  std::int32_t* scratch;
};
/// The int32 RowOutput::scratch holds for tiles of m outputs and O channels.
inline std::int64_t row_output_scratch(std::int64_t tiles, std::int64_t m, std::int64_t O) {
  return (2 * tiles * m + 1) * O;
}
void row_output(const RowTransform& tr, const RowOutput& o);

}  // namespace qat::quant::int8::kernels
