// 2-D convolution as GEMMs over the im2col matrix of each image, one image at a time so that
// everything stays in cache. With K = Cg*kh*kw kernel taps and P = Ho*Wo output positions,
//   col (K, P) = im2col(x_n),  y_ng (Og, P) = W_g (Og, K) col + b.
// Each image is copied into a zero-padded buffer xp, in which col[k][p] = xp[tap[k] + pos[p]],
// and the GEMMs read col straight from xp (detail::gemm_gather_a/_b) instead of building it.
// The output channels are the GEMM's columns (its vector lanes) where they fill two vectors:
//   forward  y_ng^T (P, Og) = col^T W_g^T   (Og >= 32; else y_ng = W_g col, positions as columns)
//   dW       dW_g^T (K, Og) = sum_n col dY_ng^T
//   dx       stride 1: a convolution of dY_ng, zero-padded, with the flipped kernel (positions
//            as columns, or the input channels where they fill whole GEMM column tiles: 16 on
//            AVX2); else col2im(W_g^T dY_ng) through a column buffer.
// Other operands are read in place. Everything runs in a fixed order (deterministic).
// Float32 3x3 and 5x5 kernels of stride 1 (forward, and dx as the convolution above) take
// Winograd's F(2x2, r x r) instead where the batch fills the vector lanes (kernels/cpu/winograd.h):
// 2.25x / 2.78x fewer multiplies; dW then by the adjoint of the forward transforms.
// One GEMM per group over the whole batch (plus two permutes) timed slower on the CNN shapes.
// On CUDA: conv_cuda.cpp (cuDNN where the build has it, else im2col and cuBLAS GEMMs).
#include <algorithm>
#include <string>
#include <type_traits>
#include <vector>

#include "framework/autograd/node.h"
#include "framework/autograd/ops.h"
#include "framework/autograd/ops/conv_geom.h"
#include "framework/kernels/cpu/conv_direct.h"
#include "framework/kernels/cpu/elementwise.h"
#include "framework/kernels/cpu/reduce.h"
#include "framework/kernels/cpu/winograd.h"
#include "framework/tensor/blas.h"
#include "framework/tensor/cpu.h"
#include "framework/tensor/dispatch.h"
#include "framework/tensor/parallel.h"
#include "framework/tensor/sgemm.h"

namespace qat {

using Grads = std::vector<Tensor>;
using Inputs = std::vector<Tensor>;
using detail::gemm;
using detail::gemm_gather_a;
using detail::gemm_gather_b;
using i64 = std::int64_t;
constexpr i64 kParallelMinMacs = 1 << 22;  // a batch's multiply-adds below which one thread is faster
// conv2d's dW by images (kImageParts fixed parts of the batch) where it has fewer row tiles
// than kRowTilesPerThread for each of two threads
constexpr i64 kImageParts = 12, kRowTilesPerThread = 4;

namespace {

using conv_detail::ConvGeom;

// The direct kernels (kernels/cpu/conv_direct.h): float32, few taps per output, column stride 1.
bool direct_fits(const ConvGeom& g, DType dtype) {
  return dtype == DType::Float32 && g.stride[1] == 1 && g.K() <= kernels::kConvDirectMaxTaps &&
         cpu::direct_conv();
}

// Winograd F(2x2, r x r) (kernels/cpu/winograd.h): float32, square 3x3 or 5x5 kernels of stride
// and dilation 1, with a batch that fills at least half of a block's lanes (one image per lane).
bool winograd_fits(const ConvGeom& g, DType dtype) {
  return dtype == DType::Float32 && g.stride == Pair{1, 1} && g.dilation == Pair{1, 1} && g.kh == g.kw &&
         kernels::winograd_kernel(g.kh) && cpu::winograd_conv() && 2 * g.N >= kernels::winograd_lanes();
}

// How winograd_conv2d and its weight gradient share out a batch: blocks of `lanes` images on
// threads (once the batch's multiply-adds pay for a parallel region), a scratch per thread.
struct WinogradBlocks {
  i64 lanes, blocks, usize, wsize, xgroup, ygroup, scratch;
  int slots;
  Tensor ws;
  WinogradBlocks(i64 N, i64 groups, const kernels::WinogradGeom& wg)
      : lanes(kernels::winograd_lanes()),
        blocks((N + lanes - 1) / lanes),
        usize(wg.alpha() * wg.alpha() * wg.C * wg.O),
        wsize(wg.O * wg.C * wg.r * wg.r),
        xgroup(wg.C * wg.H * wg.W),
        ygroup(wg.O * wg.Ho * wg.Wo),
        scratch(kernels::winograd_scratch_floats(wg)),
        slots(N * groups * wsize * wg.Ho * wg.Wo >= kParallelMinMacs ? parallel_slots(blocks) : 1),
        ws(Tensor::empty(Shape{slots * scratch}, DType::Float32)) {}
  float* scratch_of(int slot) { return ws.data<float>() + slot * scratch; }
};

// y = conv(x, w) + b by Winograd, group by group: x (N, groups * wg.C, H, W), w (groups * wg.O,
// wg.C, r, r), b (groups * wg.O) or null, y (N, groups * wg.O, Ho, Wo). An image's result does
// not depend on its block, so neither on the thread count.
void winograd_conv2d(const float* x, const float* w, const float* b, i64 N, i64 groups,
                     const kernels::WinogradGeom& wg, float* y) {
  WinogradBlocks bl(N, groups, wg);
  std::vector<float> u(static_cast<std::size_t>(groups * bl.usize));
  for (i64 grp = 0; grp < groups; ++grp)
    kernels::winograd_weights(w + grp * bl.wsize, wg, u.data() + grp * bl.usize);
  parallel_for_each(bl.blocks, bl.slots, [&](i64 blk, int slot) {
    const i64 n0 = blk * bl.lanes, count = std::min(bl.lanes, N - n0);
    for (i64 grp = 0; grp < groups; ++grp)
      kernels::winograd_forward(x + n0 * wg.x_image + grp * bl.xgroup, count, u.data() + grp * bl.usize,
                                b != nullptr ? b + grp * wg.O : nullptr, wg,
                                y + n0 * wg.y_image + grp * bl.ygroup, bl.scratch_of(slot));
  });
}

// dw (groups * wg.O, wg.C, r, r) = the weight gradient of winograd_conv2d's convolution for the
// output gradient dy: each block of images summed into its own partial, the partials added in
// block order, so the result does not depend on the thread count.
void winograd_conv2d_weight_grad(const float* x, const float* dy, i64 N, i64 groups,
                                 const kernels::WinogradGeom& wg, float* dw) {
  WinogradBlocks bl(N, groups, wg);
  Tensor du = Tensor::zeros(Shape{bl.blocks * groups * bl.usize}, DType::Float32);  // per block
  float* pu = du.data<float>();
  parallel_for_each(bl.blocks, bl.slots, [&](i64 blk, int slot) {
    const i64 n0 = blk * bl.lanes, count = std::min(bl.lanes, N - n0);
    for (i64 grp = 0; grp < groups; ++grp)
      kernels::winograd_backward_weights(x + n0 * wg.x_image + grp * bl.xgroup,
                                         dy + n0 * wg.y_image + grp * bl.ygroup, count, wg,
                                         pu + (blk * groups + grp) * bl.usize, bl.scratch_of(slot));
  });
  for (i64 blk = 1; blk < bl.blocks; ++blk)
    kernels::add_inplace(pu, pu + blk * groups * bl.usize, groups * bl.usize);
  for (i64 grp = 0; grp < groups; ++grp)
    kernels::winograd_weight_grad(pu + grp * bl.usize, wg, dw + grp * bl.wsize);
}

std::string str(Pair p) { return detail::concat("(", p[0], ", ", p[1], ")"); }

ConvGeom conv_geom(const Tensor& x, const Tensor& w, const Tensor& b, const Conv2dParams& p) {
  require_float(x, "conv2d", "x");
  require_rank(x, 4, "conv2d", "x");
  require_float(w, "conv2d", "weight");
  require_rank(w, 4, "conv2d", "weight");
  QAT_REQUIRE(w.dtype() == x.dtype(), "conv2d", "weight is ", dtype_name(w.dtype()), " but x is ",
              dtype_name(x.dtype()));
  QAT_REQUIRE(x.numel() > 0, "conv2d", "x of shape ", x.shape(), " is empty");
  QAT_REQUIRE(w.numel() > 0, "conv2d", "weight of shape ", w.shape(), " is empty");
  QAT_REQUIRE(p.stride[0] > 0 && p.stride[1] > 0, "conv2d", "stride must be positive, got ",
              str(p.stride));
  QAT_REQUIRE(p.dilation[0] > 0 && p.dilation[1] > 0, "conv2d", "dilation must be positive, got ",
              str(p.dilation));
  QAT_REQUIRE(p.padding[0] >= 0 && p.padding[1] >= 0, "conv2d", "padding must be non-negative, got ",
              str(p.padding));
  const i64 C = x.size(1), O = w.size(0), G = p.groups;
  QAT_REQUIRE(G > 0 && C % G == 0 && O % G == 0, "conv2d", "groups=", G,
              " must be positive and divide both the input channels (", C, ") and the output channels (",
              O, ")");
  QAT_REQUIRE(w.size(1) * G == C, "conv2d", "weight of shape ", w.shape(), " with groups=", G,
              " expects ", w.size(1) * G, " input channels, but x of shape ", x.shape(), " has ", C);
  ConvGeom g{x.size(0), C,     x.size(2), x.size(3), O,        w.size(2), w.size(3), G,
             C / G,     O / G, 0,         0,         p.stride, p.padding, p.dilation};
  const i64 ekh = p.dilation[0] * (g.kh - 1) + 1, ekw = p.dilation[1] * (g.kw - 1) + 1;
  const i64 hp = g.H + 2 * p.padding[0], wp = g.W + 2 * p.padding[1];
  QAT_REQUIRE(ekh <= hp && ekw <= wp, "conv2d", "kernel ", g.kh, "x", g.kw, " (dilated ", ekh, "x", ekw,
              ") is larger than the padded input ", hp, "x", wp);
  g.Ho = (hp - ekh) / p.stride[0] + 1;
  g.Wo = (wp - ekw) / p.stride[1] + 1;
  if (b.defined()) {
    QAT_REQUIRE(b.dtype() == x.dtype() && b.dim() == 1 && b.size(0) == O, "conv2d", "bias must be ",
                dtype_name(x.dtype()), "[", O, "], got ", dtype_name(b.dtype()), b.shape());
  }
  return g;
}

// Zero-padded copy of `ch` planes (h, w) at src into the (hp, wp) planes at dst, with the top
// left corner at (top, left). Only the interior is written: the border keeps the zeros the
// buffer was created with.
template <class T>
void pad_planes(const T* src, i64 ch, i64 h, i64 w, T* dst, i64 hp, i64 wp, i64 top, i64 left) {
  for (i64 c = 0; c < ch; ++c)
    for (i64 r = 0; r < h; ++r)
      std::copy_n(src + (c * h + r) * w, w, dst + (c * hp + r + top) * wp + left);
}

// dst (cols, rows) = src (rows, cols)^T
template <class T>
void transpose(const T* src, i64 rows, i64 cols, T* dst) {
  for (i64 r = 0; r < rows; ++r)
    for (i64 c = 0; c < cols; ++c) dst[c * rows + r] = src[r * cols + c];
}

// The im2col matrix of `ch` padded planes (hp, wp), as offsets: col[k][p] = xp[tap[k] + pos[p]],
//   tap[(c*kh + i)*kw + j] = (c*hp + i*dh)*wp + j*dw,   pos[oh*wo + ow] = oh*sh*wp + ow*sw
struct Offsets {
  std::vector<i64> tap, pos;
};

Offsets im2col_offsets(i64 ch, i64 hp, i64 wp, i64 kh, i64 kw, Pair dilation, i64 ho, i64 wo,
                       Pair stride) {
  Offsets o;
  for (i64 c = 0; c < ch; ++c)
    for (i64 i = 0; i < kh; ++i)
      for (i64 j = 0; j < kw; ++j) o.tap.push_back((c * hp + i * dilation[0]) * wp + j * dilation[1]);
  for (i64 oh = 0; oh < ho; ++oh)
    for (i64 ow = 0; ow < wo; ++ow) o.pos.push_back(oh * stride[0] * wp + ow * stride[1]);
  return o;
}

Offsets im2col_offsets(const ConvGeom& g) {  // of x_n, padded
  return im2col_offsets(g.Cg, g.Hp(), g.Wp(), g.kh, g.kw, g.dilation, g.Ho, g.Wo, g.stride);
}

Offsets dx_offsets(const ConvGeom& g) {  // of dY_n, padded to (Hd, Wd), for dx_as_convolution
  return im2col_offsets(g.Og, g.Hd(), g.Wd(), g.kh, g.kw, g.dilation, g.H, g.W, {1, 1});
}

// wf (Cg, Kd) = the flipped kernel: wf[c][(o*kh + i)*kw + j] = w[o][c][kh-1-i][kw-1-j];
// transposed: wf (Kd, Cg), the same element at wf[(o*kh + i)*kw + j][c]
template <class T>
void flip_kernel(const T* w, const ConvGeom& g, T* wf, bool transposed = false) {
  const i64 taps = g.kh * g.kw;
  for (i64 c = 0; c < g.Cg; ++c)
    for (i64 o = 0; o < g.Og; ++o)
      for (i64 t = 0; t < taps; ++t) {
        const i64 k = o * taps + t;
        wf[transposed ? k * g.Cg + c : c * g.Kd() + k] = w[(o * g.Cg + c) * taps + taps - 1 - t];
      }
}

// y (Og, P) = yt (P, Og)^T + b
template <class T>
void transpose_add_bias(const T* yt, i64 P, i64 Og, const T* b, T* y) {
  for (i64 o = 0; o < Og; ++o) {
    const T bo = b ? b[o] : T(0);
    for (i64 p = 0; p < P; ++p) y[o * P + p] = yt[p * Og + o] + bo;
  }
}

// The adjoint of im2col, in a fixed order:
//   xp[c][oh*sh + i*dh][ow*sw + j*dw] += col[(c*kh + i)*kw + j][oh*Wo + ow]
template <class T>
void col2im(const T* col, T* xp, const ConvGeom& g) {
  const i64 P = g.P(), hp = g.Hp(), wp = g.Wp(), Ho = g.Ho, Wo = g.Wo, kh = g.kh, kw = g.kw;
  const i64 sh = g.stride[0], sw = g.stride[1], dh = g.dilation[0], dw = g.dilation[1];
  const T* src = col;
  for (i64 c = 0; c < g.Cg; ++c)
    for (i64 i = 0; i < kh; ++i)
      for (i64 j = 0; j < kw; ++j, src += P) {
        T* dst = xp + (c * hp + i * dh) * wp + j * dw;
        for (i64 oh = 0; oh < Ho; ++oh)
          for (i64 ow = 0; ow < Wo; ++ow) dst[oh * sh * wp + ow * sw] += src[oh * Wo + ow];
      }
}

}  // namespace

// Per image n and group g (dY_ng: the (Og, P) gradient rows):
//   y_ng = W_g col + b;  dW_g^T = sum_n col dY_ng^T;  dx_n = col2im(W_g^T dY_ng) (for stride 1
//   computed as the convolution in ConvGeom::dx_as_convolution);  db = sum_{n,p} dY
// Threads: the forward pass and dx split the images (each image's outputs are its own); dW_g^T
// splits its rows, each row block summed over all images in order by one thread, or (few rows)
// fixed parts of the batch, each summed into its own partial. No sum changes order with the
// thread count, so the results are bit-identical for any number of threads.
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, const Conv2dParams& p) {
  const Device dev = common_device("conv2d", {{"x", &x}, {"weight", &weight}, {"bias", &bias}});
  const ConvGeom g = conv_geom(x, weight, bias, p);
  if (dev == Device::CUDA) return conv_detail::conv2d_cuda(x, weight, bias, g);
  const i64 K = g.K(), P = g.P(), plane = g.H * g.W, padded = g.Cg * g.Hp() * g.Wp();
  const bool direct = direct_fits(g, x.dtype());
  Tensor out = Tensor::empty(Shape{g.N, g.O, g.Ho, g.Wo}, x.dtype());
  if (!direct && winograd_fits(g, x.dtype())) {
    const kernels::WinogradGeom wg{g.Cg, g.H,          g.W,          g.Og,        g.Ho,   g.Wo,
                                   g.kh, g.padding[0], g.padding[1], g.C * plane, g.O * P};
    winograd_conv2d(x.data<float>(), weight.data<float>(), bias.defined() ? bias.data<float>() : nullptr,
                    g.N, g.groups, wg, out.data<float>());
  } else {
    const bool channels = !direct && g.channels_as_columns();
    // images split over threads once the batch's multiply-adds pay for a parallel region
    const int slots = g.N * g.O * K * P >= kParallelMinMacs ? parallel_slots(g.N) : 1;
    detail::dispatch_float(x.dtype(), "conv2d", [&]<class T>() {
      const Offsets off = im2col_offsets(g);
      Tensor xpad = Tensor::zeros(Shape{slots * padded}, x.dtype());                 // per thread
      Tensor yt = Tensor::empty(Shape{channels ? slots * P * g.Og : 1}, x.dtype());  // y_ng^T
      Tensor wt = Tensor::empty(Shape{channels ? K * g.O : 1}, x.dtype());           // W_g^T per group
      T* pwt = wt.data<T>();
      const T* pw = weight.data<T>();
      const T* pb = bias.defined() ? bias.data<T>() : nullptr;
      if (channels)
        for (i64 grp = 0; grp < g.groups; ++grp)
          transpose(pw + grp * g.Og * K, g.Og, K, pwt + grp * K * g.Og);
      parallel_for_each(g.N, slots, [&](i64 n, int slot) {
        T* xp = xpad.data<T>() + slot * padded;
        T* pyt = yt.data<T>() + (channels ? slot * P * g.Og : 0);
        for (i64 grp = 0; grp < g.groups; ++grp) {
          pad_planes(x.data<T>() + (n * g.C + grp * g.Cg) * plane, g.Cg, g.H, g.W, xp, g.Hp(), g.Wp(),
                     g.padding[0], g.padding[1]);
          T* y = out.data<T>() + (n * g.O + grp * g.Og) * P;
          const T* b = pb ? pb + grp * g.Og : nullptr;
          if constexpr (std::is_same_v<T, float>)
            if (direct) {
              const kernels::DirectConvGeom dg{off.tap.data(), K, g.Wp(), g.stride[0], g.Ho, g.Wo};
              kernels::conv_direct_forward(xp, dg, pw + grp * g.Og * K, b, g.Og, y);
              continue;
            }
          if (channels) {  // y^T (P, Og) = col^T W_g^T
            gemm_gather_a<T>(P, g.Og, K, 1, xp, off.pos.data(), off.tap.data(), false,
                             pwt + grp * K * g.Og, g.Og, 0, pyt, g.Og);
            transpose_add_bias(pyt, P, g.Og, b, y);
          } else {  // y = W_g col + b
            for (i64 o = 0; o < g.Og; ++o) std::fill_n(y + o * P, P, b ? b[o] : T(0));
            gemm_gather_b<T>(false, g.Og, P, K, 1, pw + grp * g.Og * K, K, xp, off.tap.data(),
                             off.pos.data(), 1, y, P);
          }
        }
      });
    });
  }
  const int slots = g.N * g.O * K * P >= kParallelMinMacs ? parallel_slots(g.N) : 1;
  autograd::record(
      out, "conv2d", {x, weight, bias}, [g, slots](const Tensor& gout, const Inputs& in, Grads& gi) {
        const Tensor &X = in[0], &Wt = in[1], &B = in[2];
        const i64 K = g.K(), P = g.P(), plane = g.H * g.W, padded = g.Cg * g.Hp() * g.Wp();
        detail::dispatch_float(gout.dtype(), "conv2d_backward", [&]<class T>() {
          const T* pg = gout.data<T>();
          const bool need_b = B.defined() && B.requires_grad();
          const bool need_x = X.requires_grad();
          // dW by Winograd (below), else by the GEMMs in `image` / by rows (need_w)
          bool dw_wino = false;
          if constexpr (std::is_same_v<T, float>)
            dw_wino = Wt.requires_grad() && winograd_fits(g, gout.dtype()) &&
                      2 * g.Cg >= kernels::winograd_lanes();  // its vectors hold input channels
          const bool need_w = Wt.requires_grad() && !dw_wino;
          const bool dx_conv = need_x && g.dx_as_convolution();
          // dx by Winograd: the convolution of dY, padded, with the flipped kernel
          bool dx_wino = false;
          if constexpr (std::is_same_v<T, float>) dx_wino = dx_conv && winograd_fits(g, gout.dtype());
          // dx^T (H*W, Cg) = im2col(dY)^T flipped W_g^T where Cg fills whole column tiles of the
          // GEMM (16 on AVX2): a plane's rows of W pixels would leave partial vectors as columns
          const i64 nr = std::is_same_v<T, float> ? detail::sgemm_col_tile() : 0;
          const bool dx_t = dx_conv && !dx_wino && nr > 0 && g.Cg % nr == 0;
          const Offsets off = im2col_offsets(g), doff = dx_conv ? dx_offsets(g) : Offsets{};
          const i64 dpadded = dx_conv ? g.Og * g.Hd() * g.Wd() : padded;
          const i64 wsize = K * g.Og;  // a group's weights
          // dW_g^T (K, Og) = sum_n col_n dY_ng^T, in one of two deterministic orders:
          //  - by rows (split_w): blocks of dW's rows on threads, each summed over all images
          //    in order; blocks start at multiples of the GEMM's tile height, so each row lands
          //    in the same tile (hence the same sums) as in one call;
          //  - by images (parts > 0), where dW has too few row tiles to share out evenly
          //    (conv1's 25 taps: 4 tiles of 8, one of them 1 row): kImageParts fixed parts of
          //    the batch, each summed in order into its own partial, the partials then added in
          //    order. The parts depend on the batch only, not on the thread count.
          // Else (one thread, many tiles) dW is summed image by image while x_n is in cache.
          const i64 tile = std::is_same_v<T, float> ? detail::sgemm_row_tile() : 0;
          const i64 parts = need_w && tile > 0 && (K + tile - 1) / tile < kRowTilesPerThread * 2
                                ? std::min(kImageParts, g.N)
                                : 0;
          const bool split_w = need_w && parts == 0 && slots > 1;
          // padded x_ng: of every image and group when dW's row blocks run on threads (all read
          // them), else one per thread, dW accumulated while it is in cache
          Tensor xall =
              split_w ? Tensor::empty(Shape{g.N * g.groups * padded}, gout.dtype())  // zeroed below
                      : Tensor::zeros(Shape{need_w ? slots * padded : 1}, gout.dtype());
          Tensor dpad = Tensor::zeros(Shape{need_x && !dx_wino ? slots * dpadded : 1},
                                      gout.dtype());  // per thread
          Tensor wt = Tensor::empty(Shape{need_x ? g.groups * wsize : 1},
                                    gout.dtype());  // flipped W_g, or W_g^T
          const i64 col_size = !need_x || dx_wino ? 0 : !dx_conv ? K * P : dx_t ? plane * g.Cg : 0;
          Tensor cols = Tensor::empty(Shape{std::max<i64>(1, slots * col_size)}, gout.dtype());
          std::vector<double> dbn(need_b ? g.N * g.O : 0);  // db of each image
          Tensor dwt = Tensor::empty(Shape{need_w ? g.groups * wsize : 1}, gout.dtype());  // dW_g^T
          // dW by images: one partial dW^T per part
          const Tensor partial =
              parts > 0 ? Tensor::empty(Shape{parts * g.groups * wsize}, gout.dtype()) : Tensor();
          T *xa = xall.data<T>(), *pwt = wt.data<T>();
          if (Wt.requires_grad()) gi[1] = Tensor::empty(Wt.shape(), Wt.dtype());
          if (need_x) gi[0] = Tensor::empty(X.shape(), X.dtype());
          if (need_x)
            for (i64 grp = 0; grp < g.groups; ++grp) {
              const T* w = Wt.data<T>() + grp * wsize;
              if (dx_conv)  // flipped W_g, as (Kd, Cg) for dx_t
                flip_kernel(w, g, pwt + grp * wsize, dx_t);
              else
                transpose(w, g.Og, K, pwt + grp * wsize);
            }
          // image n on thread `slot`; dW_g^T summed into dw (unless by rows), onto what it
          // holds unless n is the first image of its sum
          const auto image = [&](i64 n, int slot, T* dw, bool first_of_sum) {
            T* dp = dpad.data<T>() + (need_x && !dx_wino ? slot * dpadded : 0);
            T* col = cols.data<T>() + slot * col_size;
            for (i64 grp = 0; grp < g.groups; ++grp) {
              const T* dy = pg + (n * g.O + grp * g.Og) * P;  // (Og, P)
              const i64 first = (n * g.C + grp * g.Cg) * plane;
              T* dx = need_x ? gi[0].data<T>() + first : nullptr;
              if (need_b)
                for (i64 o = 0; o < g.Og; ++o)
                  dbn[n * g.O + grp * g.Og + o] = kernels::sum(dy + o * P, P);
              if (need_w) {
                T* xp = xa + (split_w ? (n * g.groups + grp) * padded : slot * padded);
                if (split_w) std::fill_n(xp, padded, T(0));  // the border (on this image's thread)
                pad_planes(X.data<T>() + first, g.Cg, g.H, g.W, xp, g.Hp(), g.Wp(), g.padding[0],
                           g.padding[1]);
                if (!split_w)  // dW_g^T += col dY^T
                  gemm_gather_a<T>(K, g.Og, P, 1, xp, off.tap.data(), off.pos.data(), true, dy, P,
                                   first_of_sum ? 0 : 1, dw + grp * wsize, g.Og);
              }
              const T* pw = pwt + grp * wsize;
              if (dx_wino) {         // below, by blocks of images
              } else if (dx_conv) {  // dx (Cg, H*W) = flipped W_g (Cg, Kd) x im2col(dY padded) (Kd, H*W)
                pad_planes(dy, g.Og, g.Ho, g.Wo, dp, g.Hd(), g.Wd(), g.eh(), g.ew());
                if (dx_t) {
                  gemm_gather_a<T>(plane, g.Cg, g.Kd(), 1, dp, doff.pos.data(), doff.tap.data(), false,
                                   pw, g.Cg, 0, col, g.Cg);
                  transpose(col, plane, g.Cg, dx);
                } else {
                  gemm_gather_b<T>(false, g.Cg, plane, g.Kd(), 1, pw, g.Kd(), dp, doff.tap.data(),
                                   doff.pos.data(), 0, dx, plane);
                }
              } else if (need_x) {  // dx = col2im(W_g^T dY)
                gemm<T>(false, false, K, P, g.Og, 1, pw, g.Og, dy, P, 0, col, P);
                std::fill_n(dp, padded, T(0));
                col2im(col, dp, g);
                for (i64 c = 0; c < g.Cg; ++c)
                  for (i64 h = 0; h < g.H; ++h)
                    std::copy_n(dp + (c * g.Hp() + h + g.padding[0]) * g.Wp() + g.padding[1], g.W,
                                dx + (c * g.H + h) * g.W);
              }
            }
          };
          if (parts > 0) {  // by images: part f holds images [f N / parts, (f + 1) N / parts)
            T* pp = partial.data<T>();
            parallel_for_each(parts, slots, [&](i64 f, int slot) {
              const i64 n0 = f * g.N / parts, n1 = (f + 1) * g.N / parts;
              for (i64 n = n0; n < n1; ++n) image(n, slot, pp + f * g.groups * wsize, n == n0);
            });
            T* d = dwt.data<T>();
            std::copy_n(pp, g.groups * wsize, d);
            for (i64 f = 1; f < parts; ++f)
              kernels::add_inplace(d, pp + f * g.groups * wsize, g.groups * wsize);
          } else {
            parallel_for_each(g.N, slots,
                              [&](i64 n, int slot) { image(n, slot, dwt.data<T>(), n == 0); });
          }
          if (split_w) {
            // by rows: dW_g^T (K, Og) += col_n dY_ng^T over n in order, rows [r0, r1) of it per
            // item; the tiles are shared out evenly. Where the system BLAS runs the GEMM (no tile
            // height known), one block.
            const i64 tiles = tile > 0 ? (K + tile - 1) / tile : 1;
            const i64 step = tile > 0 ? (tiles + slots - 1) / slots * tile : K;
            const i64 per_group = (K + step - 1) / step;
            parallel_for_each(g.groups * per_group, slots, [&](i64 item, int) {
              const i64 grp = item / per_group, r0 = item % per_group * step,
                        r1 = std::min(K, r0 + step);
              T* c = dwt.data<T>() + grp * wsize + r0 * g.Og;
              for (i64 n = 0; n < g.N; ++n)
                gemm_gather_a<T>(r1 - r0, g.Og, P, 1, xa + (n * g.groups + grp) * padded,
                                 off.tap.data() + r0, off.pos.data(), true,
                                 pg + (n * g.O + grp * g.Og) * P, P, n > 0 ? 1 : 0, c, g.Og);
            });
          }
          if constexpr (std::is_same_v<T, float>)
            if (dw_wino) {
              const kernels::WinogradGeom wg{g.Cg, g.H,          g.W,          g.Og,        g.Ho,   g.Wo,
                                             g.kh, g.padding[0], g.padding[1], g.C * plane, g.O * P};
              winograd_conv2d_weight_grad(X.data<float>(), pg, g.N, g.groups, wg, gi[1].data<float>());
            }
          if constexpr (std::is_same_v<T, float>)
            if (dx_wino) {  // dx = conv(dY padded by (eh, ew), flipped W) by Winograd
              const kernels::WinogradGeom wg{g.Og, g.Ho,   g.Wo,   g.Cg,    g.H,        g.W,
                                             g.kh, g.eh(), g.ew(), g.O * P, g.C * plane};
              winograd_conv2d(pg, pwt, nullptr, g.N, g.groups, wg, gi[0].data<float>());
            }
          if (need_w) {
            for (i64 grp = 0; grp < g.groups; ++grp)
              transpose(dwt.data<T>() + grp * wsize, K, g.Og, gi[1].data<T>() + grp * wsize);
          }
          if (need_b) {  // db = sum over n in order of each image's sums
            gi[2] = Tensor::empty(B.shape(), B.dtype());
            for (i64 o = 0; o < g.O; ++o) {
              double s = 0;
              for (i64 n = 0; n < g.N; ++n) s += dbn[n * g.O + o];
              gi[2].data<T>()[o] = static_cast<T>(s);
            }
          }
        });
      });
  return out;
}

}  // namespace qat
