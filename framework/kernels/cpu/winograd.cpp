// Winograd F(2x2, r x r) convolution (winograd.h), compiled once per instruction set
// (tensor/simd.h). One block of L images, lanes = images; per band of tile rows:
//   1. pack      xt[c][h][w][lane] = x[lane][c][h - pad_h][w - pad_w], zero outside
//   2. per 2x2 output tile:
//        v[xi][c]  = (B^T d_c B)[xi]                    d_c: the a x a input tile of channel c
//        m[xi][o]  = sum_c u[xi][c][o] v[xi][c]         a^2 small products, channels in order,
//        s[a][j][o] = sum_k AT[j][k] m[(a, k)][o]         in registers, each reduced at once
//        yt[o][i][j] = sum_a AT[i][a] s[a][j][o] + b[o]   the tile's 2x2 outputs
//   3. unpack    y[lane][o][h][w] = yt[o][h][w][lane], a tile row at a time
// The transforms apply the constant matrices below with their zeros skipped and +-1 as adds.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "framework/kernels/cpu/winograd.cpp"
#include "framework/kernels/cpu/winograd.h"

// clang-format off
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>
// clang-format on

#include "framework/kernels/cpu/lanes-inl.h"
#include "framework/tensor/simd.h"

// The input and output transforms of F(2x2, r x r), shared by every target; G (the kernels') is
// in g_times below (scripts/winograd_matrices.py derives all three).
#ifndef QAT_KERNELS_WINOGRAD_MATRICES_
#define QAT_KERNELS_WINOGRAD_MATRICES_
namespace qat::kernels::winograd_matrices {
template <int R>
struct F2;
template <>
struct F2<3> {  // points 0, 1, -1, infinity
  static constexpr int A = 4;
  static constexpr float BT[4][4] = {{1, 0, -1, 0}, {0, 1, 1, 0}, {0, -1, 1, 0}, {0, -1, 0, 1}};
  static constexpr float AT[2][4] = {{1, 1, 1, 0}, {0, 1, -1, 1}};
};
template <>
struct F2<5> {  // points 0, 1, -1, 2, -2, infinity
  static constexpr int A = 6;
  static constexpr float BT[6][6] = {{4, 0, -5, 0, 1, 0},  {0, -4, -4, 1, 1, 0}, {0, 4, -4, -1, 1, 0},
                                     {0, -2, -1, 2, 1, 0}, {0, 2, -1, -2, 1, 0}, {0, 4, 0, -5, 0, 1}};
  static constexpr float AT[2][6] = {{1, 1, 1, 1, 1, 0}, {0, 1, -1, 2, -2, 1}};
};
}  // namespace qat::kernels::winograd_matrices
#endif

// No std:: templates below this point (ODR: they would be compiled with each target's flags).
HWY_BEFORE_NAMESPACE();
namespace qat::kernels::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
namespace {

using i64 = std::int64_t;
using lanes::D;
using lanes::L;
using lanes::transpose;
using lanes::V;
using winograd_matrices::F2;

// Output channels the product holds at once: at least 8 (the multiply-adds' latency times their
// throughput) independent sums. With 32 vector registers (AVX-512) the output transform's two
// sums per channel stay in registers too; with 16, in memory.
#if HWY_TARGET <= HWY_AVX3
constexpr int kOB = 8;
constexpr bool kSumsInRegisters = true;
#else
constexpr int kOB = 8;
constexpr bool kSumsInRegisters = false;
#endif

// out(i, sum_j M[i][j] in(j)) for i < Rows: zero coefficients skipped, +-1 as adds, the rest
// multiply-adds; the order of the sum is j = 0, 1, ... (the loops unroll, the branches fold).
template <int Rows, int Cols, const float (&M)[Rows][Cols], class In, class Out>
HWY_INLINE void apply(In in, Out out) {
  const D d;
#pragma GCC unroll 8
  for (int i = 0; i < Rows; ++i) {
    V acc = hn::Zero(d);
    bool first = true;
#pragma GCC unroll 8
    for (int j = 0; j < Cols; ++j) {
      const float m = M[i][j];
      if (m == 0.0f) continue;
      const V x = in(j);
      if (first)
        acc = m == 1.0f ? x : m == -1.0f ? hn::Neg(x) : hn::Mul(hn::Set(d, m), x);
      else if (m == 1.0f)
        acc = hn::Add(acc, x);
      else if (m == -1.0f)
        acc = hn::Sub(acc, x);
      else
        acc = hn::MulAdd(hn::Set(d, m), x, acc);
      first = false;
    }
    out(i, acc);
  }
}

// out(k, (B^T x)[k]) for F(2x2, 5x5): 14 operations on shared sums instead of 22
template <class In, class Out>
HWY_INLINE void bt5(In in, Out out) {
  const D d;
  const V x0 = in(0), x1 = in(1), x2 = in(2), x3 = in(3), x4 = in(4), x5 = in(5);
  const V two = hn::Set(d, 2.0f), four = hn::Set(d, 4.0f), five = hn::Set(d, 5.0f);
  out(0, hn::NegMulAdd(five, x2, hn::MulAdd(four, x0, x4)));  // 4 x0 - 5 x2 + x4
  const V s12 = hn::Add(x1, x2), d12 = hn::Sub(x1, x2), s34 = hn::Add(x3, x4), d43 = hn::Sub(x4, x3);
  out(1, hn::NegMulAdd(four, s12, s34));  // -4 x1 - 4 x2 + x3 + x4
  out(2, hn::MulAdd(four, d12, d43));     // 4 x1 - 4 x2 - x3 + x4
  const V d42 = hn::Sub(x4, x2), d31 = hn::Sub(x3, x1);
  out(3, hn::MulAdd(two, d31, d42));                          // -2 x1 - x2 + 2 x3 + x4
  out(4, hn::NegMulAdd(two, d31, d42));                       // 2 x1 - x2 - 2 x3 + x4
  out(5, hn::NegMulAdd(five, x3, hn::MulAdd(four, x1, x5)));  // 4 x1 - 5 x3 + x5
}

// out(k, (B^T x)[k])
template <int R, class In, class Out>
HWY_INLINE void input_transform(In in, Out out) {
  if constexpr (R == 5)
    bt5(in, out);
  else
    apply<F2<R>::A, F2<R>::A, F2<R>::BT>(in, out);
}

// Vectors between consecutive xi in the per-tile buffers of n channels: odd, so that a tile's
// a^2 rows spread over the L1 sets (a power-of-two stride would map them to a few).
constexpr i64 rows_of(i64 n) { return n | 1; }

// c * x for a constant c (0, +-1 without a multiply)
HWY_INLINE V times(float c, V x) {
  if (c == 0.0f) return hn::Zero(D());
  if (c == 1.0f) return x;
  if (c == -1.0f) return hn::Neg(x);
  return hn::Mul(hn::Set(D(), c), x);
}

// acc = c * x + acc for a constant c (0: nothing, +-1: an add)
HWY_INLINE V add_scaled(float c, V x, V acc) {
  if (c == 0.0f) return acc;
  if (c == 1.0f) return hn::Add(acc, x);
  if (c == -1.0f) return hn::Sub(acc, x);
  return hn::MulAdd(hn::Set(D(), c), x, acc);
}

// The products and the first half of the output transform, for output channels o0 + q, q < OB:
//   s[a][j][o] = sum_k AT[j][k] m[(a, k)][o],   m[xi][o] = sum_c u[xi][c][o] v[xi][c]
// with m in registers (v (a^2, C, L), u (a^2, C, O) from o0, s (A, 2, O, L) from o0). s is
// summed in registers where they hold all three (AVX-512), else in s itself (in L1).
template <int R, int OB>
HWY_INLINE void product_block(const float* HWY_RESTRICT v, const float* HWY_RESTRICT u, i64 C, i64 O,
                              float* HWY_RESTRICT s) {
  using T = F2<R>;
  constexpr int A = T::A;
  const D d;
  for (int a = 0; a < A; ++a) {
    float* s0p = s + (a * 2 + 0) * rows_of(O) * L;
    float* s1p = s + (a * 2 + 1) * rows_of(O) * L;
    V s0[kSumsInRegisters ? OB : 1], s1[kSumsInRegisters ? OB : 1];
#pragma GCC unroll 16
    for (int q = 0; q < OB; ++q) {
      if constexpr (kSumsInRegisters) {
        s0[q] = s1[q] = hn::Zero(d);
      } else {
        hn::Store(hn::Zero(d), d, s0p + q * L);
        hn::Store(hn::Zero(d), d, s1p + q * L);
      }
    }
#pragma GCC unroll 8
    for (int k = 0; k < A; ++k) {
      const i64 xi = a * A + k;
      const float* vx = v + xi * rows_of(C) * L;
      const float* ux = u + xi * C * O;
      V acc[OB];
#pragma GCC unroll 16
      for (int q = 0; q < OB; ++q) acc[q] = hn::Zero(d);
      for (i64 c = 0; c < C; ++c) {
        const V x = hn::Load(d, vx + c * L);
#pragma GCC unroll 16
        for (int q = 0; q < OB; ++q) acc[q] = hn::MulAdd(hn::Set(d, ux[c * O + q]), x, acc[q]);
      }
      const float c0 = T::AT[0][k], c1 = T::AT[1][k];
#pragma GCC unroll 16
      for (int q = 0; q < OB; ++q) {
        if constexpr (kSumsInRegisters) {
          s0[q] = add_scaled(c0, acc[q], s0[q]);
          s1[q] = add_scaled(c1, acc[q], s1[q]);
        } else {
          if (c0 != 0.0f) hn::Store(add_scaled(c0, acc[q], hn::Load(d, s0p + q * L)), d, s0p + q * L);
          if (c1 != 0.0f) hn::Store(add_scaled(c1, acc[q], hn::Load(d, s1p + q * L)), d, s1p + q * L);
        }
      }
    }
    if constexpr (kSumsInRegisters) {
#pragma GCC unroll 16
      for (int q = 0; q < OB; ++q) {
        hn::Store(s0[q], d, s0p + q * L);
        hn::Store(s1[q], d, s1p + q * L);
      }
    }
  }
}

// s (A, 2, O, L) for every output channel, in blocks of kOB, then 4, 2, 1
template <int R>
HWY_NOINLINE void product(const float* v, const float* u, i64 C, i64 O, float* s) {
  i64 o = 0;
  for (; o + kOB <= O; o += kOB) product_block<R, kOB>(v, u + o, C, O, s + o * L);
  if (o + 4 <= O) product_block<R, 4>(v, u + o, C, O, s + o * L), o += 4;
  if (o + 2 <= O) product_block<R, 2>(v, u + o, C, O, s + o * L), o += 2;
  if (o < O) product_block<R, 1>(v, u + o, C, O, s + o * L);
}

// Rows of L images as lanes: dst (ch, plane_rows, wp, L) [c][j][left + w][lane] =
// src[lane][c][r0 + j - top][w] for j < rows, w < W: a band of a zero-padded plane (rows and
// columns outside the image, and lanes past count, zero). L columns of L images at a time,
// through a register transpose.
HWY_NOINLINE void pack_rows(const float* HWY_RESTRICT src, i64 count, i64 image, i64 ch, i64 H, i64 W,
                            i64 r0, i64 rows, i64 plane_rows, i64 top, i64 left, i64 wp,
                            float* HWY_RESTRICT dst) {
  const D d;
  for (i64 c = 0; c < ch; ++c)
    for (i64 j = 0; j < rows; ++j) {
      float* t = dst + (c * plane_rows + j) * wp * L;
      const i64 h = r0 + j - top;
      if (h < 0 || h >= H) {
        for (i64 w = 0; w < wp; ++w) hn::Store(hn::Zero(d), d, t + w * L);
        continue;
      }
      const float* s = src + (c * H + h) * W;
      for (i64 w = 0; w < left; ++w) hn::Store(hn::Zero(d), d, t + w * L);
      for (i64 w = left + W; w < wp; ++w) hn::Store(hn::Zero(d), d, t + w * L);
      t += left * L;
      for (i64 w0 = 0; w0 < W; w0 += L) {
        const i64 n = W - w0 < L ? W - w0 : L;
        const lanes::LaneMask m = lanes::lane_mask(n);
        V r[L];
        for (i64 lane = 0; lane < L; ++lane)
          r[lane] = lane < count ? lanes::load_masked(m, s + lane * image + w0) : hn::Zero(d);
        transpose(r);
        for (i64 k = 0; k < n; ++k) hn::Store(r[k], d, t + (w0 + k) * L);
      }
    }
}

// y[lane] (O, Ho, Wo) rows h0 .. h0 + rows - 1 = yt (O, 2, yw, L) for lanes < count
HWY_NOINLINE void unpack_rows(const float* HWY_RESTRICT yt, i64 count, const WinogradGeom& g, i64 h0,
                              i64 rows, i64 yw, float* HWY_RESTRICT y) {
  const D d;
  for (i64 o = 0; o < g.O; ++o)
    for (i64 j = 0; j < rows; ++j) {
      const float* src = yt + (o * 2 + j) * yw * L;
      float* dst = y + (o * g.Ho + h0 + j) * g.Wo;
      for (i64 w0 = 0; w0 < g.Wo; w0 += L) {
        const i64 n = g.Wo - w0 < L ? g.Wo - w0 : L;
        V r[L];
        for (i64 k = 0; k < L; ++k) r[k] = k < n ? hn::Load(d, src + (w0 + k) * L) : hn::Zero(d);
        transpose(r);
        const lanes::LaneMask m = lanes::lane_mask(n);
        for (i64 lane = 0; lane < count; ++lane) {
          if (n == L)
            hn::StoreU(r[lane], d, dst + lane * g.y_image + w0);
          else
            lanes::store_masked(r[lane], m, dst + lane * g.y_image + w0);
        }
      }
    }
}

// v[xi][c] = (B^T d_c B)[xi] for the tile whose a x a inputs start at xt (channel 0)
template <int R>
HWY_NOINLINE void input_tile(const float* HWY_RESTRICT xt, i64 C, i64 plane, i64 wp,
                             float* HWY_RESTRICT v) {
  using T = F2<R>;
  constexpr int A = T::A;
  const D d;
  for (i64 c = 0; c < C; ++c) {
    const float* dt = xt + c * plane;
    V rows[A][A];  // rows[i][k] = sum_j BT[k][j] d[i][j]
#pragma GCC unroll 8
    for (int i = 0; i < A; ++i)
      input_transform<R>([&](int j) { return hn::Load(d, dt + (i * wp + j) * L); },
                         [&](int k, V r) { rows[i][k] = r; });
#pragma GCC unroll 8
    for (int k = 0; k < A; ++k)  // v[a][k] = sum_i BT[a][i] rows[i][k]
      input_transform<R>([&](int i) { return rows[i][k]; },
                         [&](int a, V r) { hn::Store(r, d, v + ((a * A + k) * rows_of(C) + c) * L); });
  }
}

// the tile's 2x2 outputs y[o][i][j] = sum_a AT[i][a] s[a][j][o] + b[o], rows yw * L apart
template <int R>
HWY_NOINLINE void output_tile(const float* HWY_RESTRICT s, i64 O, const float* b, i64 plane, i64 yw,
                              float* HWY_RESTRICT y) {
  using T = F2<R>;
  constexpr int A = T::A;
  const D d;
  for (i64 o = 0; o < O; ++o) {
    const V bias = hn::Set(d, b != nullptr ? b[o] : 0.0f);
    float* dst = y + o * plane;
#pragma GCC unroll 2
    for (int j = 0; j < 2; ++j)
      apply<2, A, T::AT>([&](int a) { return hn::Load(d, s + ((a * 2 + j) * rows_of(O) + o) * L); },
                         [&](int i, V r) { hn::Store(hn::Add(r, bias), d, dst + (i * yw + j) * L); });
  }
}

// The input is packed a band of tile rows at a time (WinogradGeom::band_tiles: about 256 KB),
// the output unpacked a tile row at a time, so the buffers do not grow with the image.
template <int R>
void forward(const float* HWY_RESTRICT x, i64 count, const float* HWY_RESTRICT u, const float* b,
             const WinogradGeom& g, float* HWY_RESTRICT y, float* HWY_RESTRICT scratch) {
  constexpr int A = F2<R>::A;
  const i64 th = g.tiles_h(), tw = g.tiles_w(), tb = g.band_tiles(L);
  const i64 rows = 2 * tb + R - 1, wp = 2 * tw + R - 1, yw = 2 * tw;  // a band's input rows
  float* xt = scratch;                                                // (C, rows, wp, L)
  float* vt = xt + g.C * rows * wp * L;                               // (A^2, C, L)
  float* st = vt + A * A * rows_of(g.C) * L;  // (A, 2, O, L)
  float* yt = st + A * 2 * rows_of(g.O) * L;  // (O, 2, yw, L): a tile row's outputs
  for (i64 ty0 = 0; ty0 < th; ty0 += tb) {
    const i64 nb = th - ty0 < tb ? th - ty0 : tb;
    pack_rows(x, count, g.x_image, g.C, g.H, g.W, 2 * ty0, 2 * nb + R - 1, rows, g.pad_h, g.pad_w, wp,
              xt);
    for (i64 ty = ty0; ty < ty0 + nb; ++ty) {
      for (i64 tx = 0; tx < tw; ++tx) {
        input_tile<R>(xt + (2 * (ty - ty0) * wp + 2 * tx) * L, g.C, rows * wp * L, wp, vt);
        product<R>(vt, u, g.C, g.O, st);
        output_tile<R>(st, g.O, b, 2 * yw * L, yw, yt + 2 * tx * L);
      }
      unpack_rows(yt, count, g, 2 * ty, g.Ho - 2 * ty < 2 ? 1 : 2, yw, y);
    }
  }
}

// The weight gradient of F(2x2, r x r): with y = A^T M A and M = sum_c U_c ⊙ V_c,
//   dL/dU_c = (A dY A^T) ⊙ V_c,   dL/dw_c = G^T (dL/dU_c) G   (winograd_weight_grad)
// summed over the tiles and images in the transformed domain: du[xi][o][c] += z[xi][o] v[xi][c].

// z[xi][o] = (A dy_o A^T)[xi] for the tile's 2x2 output gradients at dyt (channel 0, rows yw * L
// apart): rows r[i][b] = sum_j dy[i][j] AT[j][b], then z[a][b] = sum_i AT[i][a] r[i][b]
template <int R>
HWY_NOINLINE void grad_tile(const float* HWY_RESTRICT dyt, i64 O, i64 plane, i64 yw,
                            float* HWY_RESTRICT z) {
  using T = F2<R>;
  constexpr int A = T::A;
  const D d;
  for (i64 o = 0; o < O; ++o) {
    const float* p = dyt + o * plane;
    V r[2][A];
#pragma GCC unroll 2
    for (int i = 0; i < 2; ++i) {
      const V d0 = hn::Load(d, p + i * yw * L), d1 = hn::Load(d, p + (i * yw + 1) * L);
#pragma GCC unroll 8
      for (int b = 0; b < A; ++b) r[i][b] = add_scaled(T::AT[1][b], d1, times(T::AT[0][b], d0));
    }
#pragma GCC unroll 8
    for (int a = 0; a < A; ++a)
#pragma GCC unroll 8
      for (int b = 0; b < A; ++b)
        hn::Store(add_scaled(T::AT[1][a], r[1][b], times(T::AT[0][a], r[0][b])), d,
                  z + ((a * A + b) * rows_of(O) + o) * L);
  }
}

// du[xi][o][c0 + q] += sum_{lane < count} z[xi][o][lane] vt[lane][q] for the output channels
// o0 + k, k < OB (vt: L rows of L channels, the transposed v; du rows of C, n channels from c0)
template <int OB>
HWY_INLINE void grad_block(const float* HWY_RESTRICT vt, const float* HWY_RESTRICT z, i64 count, i64 C,
                           i64 n, float* HWY_RESTRICT du) {
  const D d;
  const lanes::LaneMask m = lanes::lane_mask(n);
  V acc[OB];
#pragma GCC unroll 16
  for (int k = 0; k < OB; ++k)
    acc[k] = n == L ? hn::LoadU(d, du + k * C) : lanes::load_masked(m, du + k * C);
  for (i64 lane = 0; lane < count; ++lane) {
    const V x = hn::Load(d, vt + lane * L);
#pragma GCC unroll 16
    for (int k = 0; k < OB; ++k) acc[k] = hn::MulAdd(hn::Set(d, z[k * L + lane]), x, acc[k]);
  }
#pragma GCC unroll 16
  for (int k = 0; k < OB; ++k) {
    if (n == L)
      hn::StoreU(acc[k], d, du + k * C);
    else
      lanes::store_masked(acc[k], m, du + k * C);
  }
}

// du (a^2, O, C) += the tile's share: v (a^2, C, L) transposed L channels at a time into vt
HWY_NOINLINE void grad_product(const float* HWY_RESTRICT v, const float* HWY_RESTRICT z, i64 count,
                               i64 xis, i64 C, i64 O, float* HWY_RESTRICT du, float* HWY_RESTRICT vt) {
  const D d;
  for (i64 xi = 0; xi < xis; ++xi)
    for (i64 c0 = 0; c0 < C; c0 += L) {
      const i64 n = C - c0 < L ? C - c0 : L;
      V r[L];
      for (i64 q = 0; q < L; ++q)
        r[q] = q < n ? hn::Load(d, v + (xi * rows_of(C) + c0 + q) * L) : hn::Zero(d);
      transpose(r);
      for (i64 lane = 0; lane < L; ++lane) hn::Store(r[lane], d, vt + lane * L);
      const float* zx = z + xi * rows_of(O) * L;
      float* dx = du + xi * O * C + c0;
      i64 o = 0;
      for (; o + kOB <= O; o += kOB) grad_block<kOB>(vt, zx + o * L, count, C, n, dx + o * C);
      if (o + 4 <= O) grad_block<4>(vt, zx + o * L, count, C, n, dx + o * C), o += 4;
      if (o + 2 <= O) grad_block<2>(vt, zx + o * L, count, C, n, dx + o * C), o += 2;
      if (o < O) grad_block<1>(vt, zx + o * L, count, C, n, dx + o * C);
    }
}

template <int R>
void backward_weights(const float* HWY_RESTRICT x, const float* HWY_RESTRICT dy, i64 count,
                      const WinogradGeom& g, float* HWY_RESTRICT du, float* HWY_RESTRICT scratch) {
  constexpr int A = F2<R>::A;
  const i64 th = g.tiles_h(), tw = g.tiles_w(), tb = g.band_tiles(L);
  const i64 rows = 2 * tb + R - 1, wp = 2 * tw + R - 1, yw = 2 * tw;
  float* xt = scratch;                         // (C, rows, wp, L): a band of x
  float* vt = xt + g.C * rows * wp * L;        // (A^2, C, L)
  float* zt = vt + A * A * rows_of(g.C) * L;   // (A^2, O, L)
  float* dyt = zt + A * A * rows_of(g.O) * L;  // (O, 2, yw, L): a tile row of dy, zero past (Ho, Wo)
  float* tr = dyt + g.O * 2 * yw * L;          // (L, L)
  for (i64 ty0 = 0; ty0 < th; ty0 += tb) {
    const i64 nb = th - ty0 < tb ? th - ty0 : tb;
    pack_rows(x, count, g.x_image, g.C, g.H, g.W, 2 * ty0, 2 * nb + R - 1, rows, g.pad_h, g.pad_w, wp,
              xt);
    for (i64 ty = ty0; ty < ty0 + nb; ++ty) {
      pack_rows(dy, count, g.y_image, g.O, g.Ho, g.Wo, 2 * ty, 2, 2, 0, 0, yw, dyt);
      for (i64 tx = 0; tx < tw; ++tx) {
        input_tile<R>(xt + (2 * (ty - ty0) * wp + 2 * tx) * L, g.C, rows * wp * L, wp, vt);
        grad_tile<R>(dyt + 2 * tx * L, g.O, 2 * yw * L, yw, zt);
        grad_product(vt, zt, count, A * A, g.C, g.O, du, tr);
      }
    }
  }
}

}  // namespace

i64 WinogradLanes() { return L; }

void WinogradForward(const float* x, i64 count, const float* u, const float* b, const WinogradGeom& g,
                     float* y, float* scratch) {
  if (g.r == 3)
    forward<3>(x, count, u, b, g, y, scratch);
  else
    forward<5>(x, count, u, b, g, y, scratch);
}

void WinogradBackwardWeights(const float* x, const float* dy, i64 count, const WinogradGeom& g,
                             float* du, float* scratch) {
  if (g.r == 3)
    backward_weights<3>(x, dy, count, g, du, scratch);
  else
    backward_weights<5>(x, dy, count, g, du, scratch);
}

}  // namespace qat::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include "framework/tensor/error.h"

namespace qat::kernels {

HWY_EXPORT(WinogradLanes);
HWY_EXPORT(WinogradForward);
HWY_EXPORT(WinogradBackwardWeights);

std::int64_t winograd_lanes() { return QAT_DISPATCH(WinogradLanes)(); }

std::int64_t winograd_scratch_floats(const WinogradGeom& g) {
  const std::int64_t a = g.alpha(), lanes = winograd_lanes();
  const std::int64_t rows = 2 * g.band_tiles(lanes) + g.r - 1, wp = 2 * g.tiles_w() + g.r - 1;
  // a band of the input, the transformed tile (v), the forward's sums (s) or the weight
  // gradient's z, a tile row of outputs (or of dy), a transpose
  return (g.C * rows * wp + a * a * ((g.C | 1) + (g.O | 1)) + g.O * 2 * 2 * g.tiles_w() + lanes) * lanes;
}

namespace {
// out[a] = sum_i G[a][i] in[i], the rows' shared sums computed once (the matrices' G, exactly)
template <int R>
void g_times(const double* in, double* out) {
  if constexpr (R == 3) {  // G = [1 0 0; 1/2 1/2 1/2; 1/2 -1/2 1/2; 0 0 1]
    const double e = in[0] + in[2];
    out[0] = in[0], out[1] = (e + in[1]) / 2, out[2] = (e - in[1]) / 2, out[3] = in[2];
  } else {
    // G = [1/4 0 0 0 0; -1/6 -1/6 -1/6 -1/6 -1/6; -1/6 1/6 -1/6 1/6 -1/6;
    //      1/24 1/12 1/6 1/3 2/3; 1/24 -1/12 1/6 -1/3 2/3; 0 0 0 0 1]
    const double e1 = in[0] + in[2] + in[4], o1 = in[1] + in[3];
    const double e3 = in[0] / 24 + in[2] / 6 + in[4] * (2.0 / 3), o3 = in[1] / 12 + in[3] / 3;
    out[0] = in[0] / 4, out[1] = -(e1 + o1) / 6, out[2] = -(e1 - o1) / 6;
    out[3] = e3 + o3, out[4] = e3 - o3, out[5] = in[4];
  }
}

// u[xi = (a, b)][c][o] = sum_{i,j} G[a][i] w[o][c][i][j] G[b][j]
template <int R>
void weights(const float* w, const WinogradGeom& g, float* u) {
  constexpr int A = R + 1;
  for (std::int64_t o = 0; o < g.O; ++o)
    for (std::int64_t c = 0; c < g.C; ++c) {
      const float* k = w + (o * g.C + c) * R * R;
      double col[R], gcol[A], gw[A][R];  // gw = G w, by columns
      for (int j = 0; j < R; ++j) {
        for (int i = 0; i < R; ++i) col[i] = k[i * R + j];
        g_times<R>(col, gcol);
        for (int a = 0; a < A; ++a) gw[a][j] = gcol[a];
      }
      for (int a = 0; a < A; ++a) {  // (G w) G^T, by rows
        double row[A];
        g_times<R>(gw[a], row);
        for (int bb = 0; bb < A; ++bb)
          u[((a * A + bb) * g.C + c) * g.O + o] = static_cast<float>(row[bb]);
      }
    }
}

// out[i] = sum_a G[a][i] in[a]  (G^T, the rows' shared sums computed once)
template <int R>
void gt_times(const double* in, double* out) {
  if constexpr (R == 3) {
    const double s = in[1] + in[2];
    out[0] = in[0] + s / 2, out[1] = (in[1] - in[2]) / 2, out[2] = s / 2 + in[3];
  } else {
    const double s = in[1] + in[2], t = in[2] - in[1], p = in[3] + in[4], q = in[3] - in[4];
    out[0] = in[0] / 4 - s / 6 + p / 24, out[1] = t / 6 + q / 12, out[2] = (p - s) / 6;
    out[3] = t / 6 + q / 3, out[4] = p * (2.0 / 3) - s / 6 + in[5];
  }
}

// dw[o][c][i][j] = sum_{a,b} G[a][i] du[(a, b)][o][c] G[b][j]
template <int R>
void weight_grad(const float* du, const WinogradGeom& g, float* dw) {
  constexpr int A = R + 1;
  for (std::int64_t o = 0; o < g.O; ++o)
    for (std::int64_t c = 0; c < g.C; ++c) {
      double row[A], t[A][R];  // t = du G, by rows
      for (int a = 0; a < A; ++a) {
        for (int b = 0; b < A; ++b) row[b] = du[((a * A + b) * g.O + o) * g.C + c];
        gt_times<R>(row, t[a]);
      }
      float* k = dw + (o * g.C + c) * R * R;
      for (int j = 0; j < R; ++j) {  // G^T t, by columns
        double col[A], out[R];
        for (int a = 0; a < A; ++a) col[a] = t[a][j];
        gt_times<R>(col, out);
        for (int i = 0; i < R; ++i) k[i * R + j] = static_cast<float>(out[i]);
      }
    }
}
}  // namespace

void winograd_weight_grad(const float* du, const WinogradGeom& g, float* dw) {
  QAT_REQUIRE(winograd_kernel(g.r), "winograd_weight_grad", "kernel size ", g.r,
              " has no Winograd path");
  if (g.r == 3)
    weight_grad<3>(du, g, dw);
  else
    weight_grad<5>(du, g, dw);
}

void winograd_backward_weights(const float* x, const float* dy, std::int64_t count,
                               const WinogradGeom& g, float* du, float* scratch) {
  QAT_DISPATCH(WinogradBackwardWeights)(x, dy, count, g, du, scratch);
}

void winograd_weights(const float* w, const WinogradGeom& g, float* u) {
  QAT_REQUIRE(winograd_kernel(g.r), "winograd_weights", "kernel size ", g.r, " has no Winograd path");
  if (g.r == 3)
    weights<3>(w, g, u);
  else
    weights<5>(w, g, u);
}

void winograd_forward(const float* x, std::int64_t count, const float* u, const float* b,
                      const WinogradGeom& g, float* y, float* scratch) {
  QAT_DISPATCH(WinogradForward)(x, count, u, b, g, y, scratch);
}

}  // namespace qat::kernels
#endif
