#pragma once
// Internal: Winograd's minimal filtering along the rows of an int8 convolution, exactly, in
// integers (int8_kernels.h, conv_u8s8_row_winograd, is the public face). 1-D F(4, r) (Lavin & Gray
// 2016; the Toom-Cook construction of scripts/winograd_matrices.py) for r = kw in {3, 5}: 4
// outputs of an r-tap row correlation from the n = r + 3 points 0, 1, -1, 2, -2 (1/2, -1/2 for
// r = 5) and infinity, in integer matrices scaled by L:
//   L y_k = sum_xi A[k][xi] U_xi V_xi,  U_xi = sum_s G[xi][s] w_s,  V_xi = sum_s B[xi][s] d_s
// where d_0 .. d_{n-1} are n input columns and y_k = sum_s d_{k+s} w_s. Summed over the kernel
// rows and input channels, each point xi is one GEMM of int16 operands (vpmaddwd, the int16
// pairs of int8_gemm.h): n GEMMs with kh C terms per 4 outputs where the direct convolution takes
// 4 with kh kw C; for F(4, 5) 8 multiplies per 4 outputs and kernel row against 20 (2.5x fewer).
//
// Exact: |V| <= 50 * 255 = 12750 and |U| <= 31 * 128 = 3968 fit int16 (r = 5; 10 * 255 and
// 7 * 128 for r = 3), so every product is exact, and the GEMM's wrapping int32 sums give
// S = L y modulo 2^32. L = 2^e q with q odd (360 = 8 * 45, 24 = 8 * 3): S / 2^e (exact, an
// arithmetic shift) times q^-1 modulo 2^32 is y modulo 2^(32 - e), hence y itself wherever
// |y| < 2^(31 - e) = 2^28: with inputs in [0, 255], wherever 255 sum_k |w_ok| < 2^28, which the
// packing checks per channel (any convolution of up to 8224 terms passes).
#include <cstdint>

namespace qat::quant::int8::kernels {

struct RowTransform {
  int r, n;                   ///< taps, points (n = r + 3)
  std::int16_t B[8][8];       ///< V = B d (n x n)
  std::int16_t G[8][5];       ///< U = G w (n x r)
  std::int32_t A[4][8];       ///< L y = A (U . V) (4 x n)
  int shift;                  ///< e: L = 2^e q
  std::uint32_t odd_inverse;  ///< q^-1 modulo 2^32
};
constexpr int kRowOut = 4;  ///< outputs per row tile (the m of F(m, r))

/// The transform for r taps (3 or 5), or null.
const RowTransform* row_transform(int r);

/// The input transform of `rows` rows of an image (uint8, channels-last, row stride `ld` bytes,
/// C channels), `tiles` tiles of 4 outputs per row reading columns 4 t .. 4 t + n - 1: V_xi at
/// v + xi * plane + (h tiles + t) Cp (int16, Cp = C rounded up to even, the pad channel 0).
void row_input(const RowTransform& tr, const std::uint8_t* x, std::int64_t rows, std::int64_t ld,
               std::int64_t C, std::int64_t tiles, std::int16_t* v, std::int64_t plane);

/// The output stage of one image: from the n GEMM results M_xi (xi * mplane + (oh tiles + t) ldm
/// int32, O channels), y = (S >> e) q^-1 sign-extended from 32 - e bits, acc = y + acc0[o], then
/// requantized (int8::requantize's float32 operations) into out (uint8, (Ho, Wo, O) rows, O apart),
/// or with `pool` the max over each 2 x 2 window of acc requantized into (Ho / 2, Wo / 2, O).
struct RowOutput {
  const std::int32_t* m;
  std::int64_t mplane, ldm;
  std::int64_t Ho, Wo, tiles, O;
  const std::int32_t* acc0;
  const float *scale, *bias;
  float inv_scale, lo, hi;  ///< lo, hi: the clamp range minus the zero point
  std::int32_t zp;
  bool pool;
  std::uint8_t* out;
};
void row_output(const RowTransform& tr, const RowOutput& o);

}  // namespace qat::quant::int8::kernels
