// QuantizedConv2d (quantized_layers.h): the int8 convolution as an implicit GEMM over the
// padded input, optionally with the 2 x 2 max pool after it in the GEMM's output stage.
#include <algorithm>
#include <array>
#include <cstring>
#include <optional>
#include <vector>

#include "framework/tensor/parallel.h"
#include "modules/quant/detail/output_quant.h"
#include "modules/quant/detail/prepared.h"
#include "modules/quant/int8_kernels.h"
#include "modules/quant/kernels/cpu/int8_gemm.h"
#include "modules/quant/kernels/cpu/int8_ops.h"
#include "modules/quant/quantized_layers.h"

namespace qat::quant {

QuantizedConv2d::QuantizedConv2d(const Tensor& weight_q, const Tensor& weight_scale,
                                 const Tensor& bias_q, QuantInfo input, const ActivationQuant& output,
                                 bool fused_relu, const Conv2dParams& params)
    : QuantizedWeightLayer("QuantizedConv2d", weight_q, weight_scale, bias_q, input, output, fused_relu),
      params_(params) {
  QAT_REQUIRE(weight_q.dim() == 4, "QuantizedConv2d", "weight must be (O, C/groups, kh, kw), got ",
              weight_q.shape());
}

// Implicit GEMM per group, for a chunk of images: the input channels-last inside a border of
// the input zero point (real 0), xp (n, Hp, Wp, C) (widened to uint16 on the int16-pairs paths),
// then output pixel m = (n, oh, ow) reads its kernel window in place, one run per kernel row
// (kw C contiguous elements when dw = 1 and there is one group; else one run of Cg per tap):
// y^T (P, O) = requant(A . W_g^T - zx rowsum(W_g) + bias), transposed into (O, P) per image
// (kept as is when convert chose a channels-last output; a channels-last input skips the
// transpose in).
Tensor QuantizedConv2d::forward(const Tensor& x) { return run(x, false); }

// A 2 x 2 max pool with stride 2 and no padding (max_pool2d's floor: an odd last row or column
// of the convolution's output is dropped) in the GEMM's output stage (int8::PooledRows).
Tensor QuantizedConv2d::forward_max_pooled(const Tensor& x, const Pool2dParams& pool) {
  const bool two_by_two = pool.kernel == Pair{2, 2} &&
                          (pool.stride == Pair{0, 0} || pool.stride == Pair{2, 2}) &&
                          pool.padding == Pair{0, 0};
  return two_by_two ? run(x, true) : Tensor();
}

namespace {

// Where the implicit GEMM reads (int8::gemm_u8s8_implicit) for a chunk of images: row m =
// (image i, oh, ow) at row_off[m], its kernel rows (or taps) at piece_off[p] past it, and with
// a pool each window's 4 rows (pool_map). They depend on the geometry only, so each thread keeps
// them per geometry it has run: rebuilt every forward they took ~4% of the int8 CNN's time.
struct GemmRows {
  // chunk, Ho, Wo, pool, timg (tall windows, else 0), img, Wp, run, C, eb, sh, sw, dh, dw, runs,
  // kernel rows read (1 when tall), kw
  using Key = std::array<std::int64_t, 17>;
  Key key;
  std::vector<std::int64_t> row_off, piece_off, pool_map;
  // the pixels' places for the excess of narrow quads (int8::ExcessTaps), built at first need
  std::optional<int8::ExcessTaps> taps;
};

GemmRows make_gemm_rows(const GemmRows::Key& key) {
  const auto [chunk, Ho, Wo, pool, timg, img, Wp, run, C, eb, sh, sw, dh, dw, runs, kr, kw] = key;
  const bool tall = timg > 0;
  GemmRows g{key, {}, {}, {}, {}};
  g.row_off.resize(chunk * Ho * Wo);
  for (std::int64_t i = 0; i < chunk; ++i)
    for (std::int64_t oh = 0; oh < Ho; ++oh)
      for (std::int64_t ow = 0; ow < Wo; ++ow)
        g.row_off[(i * Ho + oh) * Wo + ow] =
            (tall ? i * timg + (oh * Wp + ow * sw) * run : i * img + (oh * sh * Wp + ow * sw) * C) * eb;
  for (std::int64_t r = 0; r < kr; ++r)
    for (std::int64_t j = 0; j < (runs ? 1 : kw); ++j)
      g.piece_off.push_back((r * dh * Wp + j * dw) * C * eb);
  // pooled: the GEMM visits each window's 4 convolution rows in a row
  const std::int64_t Hq = Ho / 2, Wq = Wo / 2;
  for (std::int64_t i = 0; pool && i < chunk; ++i)
    for (std::int64_t qh = 0; qh < Hq; ++qh)
      for (std::int64_t qw = 0; qw < Wq; ++qw)
        for (std::int64_t dy = 0; dy < 2; ++dy)
          for (std::int64_t dx = 0; dx < 2; ++dx)
            g.pool_map.push_back((i * Ho + 2 * qh + dy) * Wo + 2 * qw + dx);
  return g;
}

// This thread's tables for `key` (up to 16 geometries, the oldest dropped first).
GemmRows& gemm_rows(const GemmRows::Key& key) {
  thread_local std::vector<GemmRows> seen;
  for (GemmRows& g : seen)
    if (g.key == key) return g;
  if (seen.size() == 16) seen.erase(seen.begin());
  seen.push_back(make_gemm_rows(key));
  return seen.back();
}

}  // namespace

Tensor QuantizedConv2d::run(const Tensor& x, bool pool) {
  check_input(x);
  QAT_REQUIRE(x.dim() == 4, type_name(), "expects (N, C, H, W), got ", x.shape());
  const std::int64_t N = x.size(0), C = x.size(in_nhwc_ ? 3 : 1), H = x.size(in_nhwc_ ? 1 : 2),
                     W = x.size(in_nhwc_ ? 2 : 3);
  const std::int64_t O = weight_.size(0), Cg = weight_.size(1), kh = weight_.size(2),
                     kw = weight_.size(3);
  const std::int64_t G = params_.groups, Og = O / G;
  QAT_REQUIRE(Cg * G == C, type_name(), "input has ", C, " channels, the weight expects ", Cg * G);
  // plain variables, not structured bindings: lambdas below use them (clang 14 cannot capture
  // a binding)
  const std::int64_t sh = params_.stride[0], sw = params_.stride[1];
  const std::int64_t ph = params_.padding[0], pw = params_.padding[1];
  const std::int64_t dh = params_.dilation[0], dw = params_.dilation[1];
  const std::int64_t Ho = (H + 2 * ph - dh * (kh - 1) - 1) / sh + 1,
                     Wo = (W + 2 * pw - dw * (kw - 1) - 1) / sw + 1;
  QAT_REQUIRE(Ho > 0 && Wo > 0, type_name(), "input ", x.shape(), " is smaller than the kernel");
  // output pixels per image: the convolution's, or the pooled ones (Hq, Wq)
  const std::int64_t Hq = pool ? Ho / 2 : Ho, Wq = pool ? Wo / 2 : Wo, P = Hq * Wq;
  if (pool && P == 0) return Tensor();  // (max_pool2d refuses such an input)
  const std::int32_t zx = input_quant().zero_point;
  const std::uint8_t* px = x.data<std::uint8_t>();
  // Winograd's minimal filtering along the rows (int8::conv_u8s8_row_winograd) where the path
  // multiplies int16 pairs, for 3 or 5 taps at stride and dilation 1 along the rows, and the
  // weights' bound allows: the same bytes, fewer multiplies (from 8 channels: below, the
  // transforms cost more than they save, conv1 of the demo CNN (1 channel) 2.1x slower)
  const std::int64_t wm = G == 1 && sw == 1 && dw == 1 && C >= 8 ? int8::row_winograd_tile(kw, Wo) : 0;
  const Prepared* wst = wm > 0 ? &prepared(1, KOrder::RowWinograd, wm, false) : nullptr;
  const bool wino = wst != nullptr && wst->row.has_value();
  // F(5, 5)'s last tile partly used (14 outputs: 5 + 5 + 4): the row's rest by F(4, 5) instead,
  // one point fewer (8 multiplies, not 9); pooled: from an even column
  const std::int64_t wcols =
      wino && wm == 5 && Wo % 5 != 0 && Wo > 5 && (!pool || Wo / 5 % 2 == 0) ? Wo / 5 * 5 : Wo;
  const Prepared* wrest = wcols < Wo ? &prepared(1, KOrder::RowWinograd, 4, false) : nullptr;
  const bool split = wrest != nullptr && wrest->row.has_value();
  const std::int64_t wmain = split ? wcols : Wo;  // the outputs of the first table
  const bool runs = dw == 1 && G == 1;  // a kernel row is kw C contiguous elements
  // an input (and border, the input zero point) in [0, 127] but for a few: int8 quads through
  // vpmaddubsw where that is faster, read from a copy clamped to 127 (xnarrow) when some are
  // above, whose excess the GEMM adds from the image itself
  // (a border zero point above 127 counts as if every input were)
  const std::int64_t above = wino ? 0 : int8::count_wide(px, x.numel()) + (zx > 127 ? x.numel() : 0);
  const bool narrow = !wino && int8::quads_pay(above, x.numel(), int8::kQuadsPayConv),
             clamp = narrow && above > 0;
  // Tall windows: each kernel row's run is padded to whole K steps, which wastes multiplies when
  // kw C is short (conv1: 5 of 8 bytes). Laying each output row's kh input rows side by side,
  // xt (n, oh, w, (r, c)) = xp (n, oh sh + r, w, c), turns the window into one run of kw kh C
  // elements, K ordered (kw, kh, C). Taken where it saves at least a fifth of the steps.
  const std::int64_t kps = int8::kernels::k_per_step(int8::kernels::pack_format(narrow));
  const auto steps = [kps](std::int64_t n) { return (n + kps - 1) / kps; };
  const bool tall = !wino && runs && dh == 1 && kh > 1 && kh * C <= 64 &&
                    5 * steps(kh * kw * C) <= 4 * kh * steps(kw * C);
  const std::int64_t pieces = tall ? 1 : runs ? kh : kh * kw;
  const Prepared& st = wino ? *wst : prepared(G, tall ? KOrder::KwKhC : KOrder::KhKwC, pieces, narrow);
  // pooling before requantizing is exact where the output stage is monotone in the sum
  if (pool && !(st.requant.inv_scale > 0 &&
                std::all_of(st.scales.begin(), st.scales.end(), [](float v) { return v >= 0; })))
    return Tensor();
  Tensor y = Tensor::empty(out_nhwc_ ? Shape{N, Hq, Wq, O} : Shape{N, O, Hq, Wq}, DType::UInt8);
  std::uint8_t* py = y.data<std::uint8_t>();
  const std::int64_t eb = wino ? 1 : int8::activation_bytes(narrow);
  // (the row Winograd's tiles of wm outputs read up to wm ceil(wmain / wm) + kw - 1 columns, the
  // F(4, 5) rest up to Wo + 3 + kw - 1)
  const std::int64_t Hp = H + 2 * ph,
                     Wp = wino ? std::max({W + 2 * pw, (wmain + wm - 1) / wm * wm + kw - 1,
                                           split ? Wo + 3 + kw - 1 : 0})
                               : W + 2 * pw,
                     img = Hp * Wp * C;
  // what the GEMM reads per image: the padded image, or its tall windows (+ 8: the last run's
  // 8-byte copies spill into it)
  const std::int64_t run = kh * C, timg = tall ? Ho * Wp * run + 8 : 0, aimg = tall ? timg : img;
  // images per chunk: padded input and output of about 256 KiB
  const std::int64_t chunk =
      std::clamp<std::int64_t>((std::int64_t{1} << 18) / (aimg * eb + P * O), 1, N);
  // The calling thread's buffers, kept between forwards (no allocation in steady state).
  struct Scratch {
    std::vector<std::uint8_t> xpad, xtall, yt, xnarrow;
    std::vector<std::uint16_t> xwide;
  };
  thread_local Scratch scratch;
  Scratch& sc = scratch;  // captured by the parallel lambdas: this thread's instance
  auto& xpad = sc.xpad;
  auto& xtall = sc.xtall;
  auto& yt = sc.yt;
  auto& xwide = sc.xwide;
  auto& xnarrow = sc.xnarrow;
  // + 64: the implicit GEMM reads a few elements past a run; zx fills the borders (the
  // interiors are overwritten)
  xpad.assign(chunk * img + 64, static_cast<std::uint8_t>(zx));
  xtall.resize(tall ? chunk * timg + 64 : 0);
  yt.resize(out_nhwc_ ? 0 : chunk * P * O);
  xwide.resize(eb == 2 ? chunk * aimg + 32 : 0);
  xnarrow.resize(clamp ? chunk * aimg + 64 : 0);
  const auto clamp127 = [](const std::uint8_t* from, std::int64_t n, std::uint8_t* to) {
    for (std::int64_t j = 0; j < n; ++j) to[j] = std::min<std::uint8_t>(from[j], 127);
  };
  const std::uint8_t* a8 = tall ? xtall.data() : xpad.data();  // (the u8 activations)
  const std::uint8_t* base = eb == 2 ? reinterpret_cast<const std::uint8_t*>(xwide.data()) : a8;
  GemmRows* grp = wino ? nullptr
                       : &gemm_rows({chunk, Ho, Wo, pool ? 1 : 0, timg, img, Wp, run, C, eb, sh, sw, dh,
                                     dw, runs ? 1 : 0, tall ? 1 : kh, kw});
  static const GemmRows none{};
  const GemmRows& gr = grp ? *grp : none;
  // the excess lists from each pixel's places (one run of kw C bytes per kernel row) instead of
  // a search per byte above 127 and kernel row
  const bool taps = clamp && runs && !tall;
  if (taps && !grp->taps)
    grp->taps = int8::excess_taps(gr.row_off.data(), Ho * Wo, img, gr.piece_off.data(), pieces, kw * C,
                                  st.packed[0].piece_steps, C);
  const std::vector<std::int64_t>&row_off = gr.row_off, &piece_off = gr.piece_off,
        &pool_map = gr.pool_map;
  QAT_CHECK(wino || static_cast<std::int64_t>(piece_off.size()) == pieces);  // the packing's runs
  for (std::int64_t n0 = 0; n0 < N; n0 += chunk) {
    const std::int64_t nc = std::min(chunk, N - n0);
    parallel_for(nc, 2, [&](std::int64_t i0, std::int64_t i1) {
      thread_local std::vector<std::uint8_t> hwc, wh;  // the executing thread's image (C, H, W)^T
      hwc.resize(in_nhwc_ ? 0 : C * H * W);
      wh.resize(tall ? img + 8 : 0);            // tall windows: the padded image as (Wp, Hp, C)
      for (std::int64_t i = i0; i < i1; ++i) {  // xi[(h + ph, w + pw, c)] = x[n, c, h, w]
        const std::uint8_t* src = px + (n0 + i) * C * H * W;
        if (!in_nhwc_) int8::kernels::transpose_u8(src, C, H * W, H * W, hwc.data(), C);
        const std::uint8_t* rows = in_nhwc_ ? src : hwc.data();
        std::uint8_t* xi = xpad.data() + i * img;
        for (std::int64_t h = 0; h < H; ++h)
          std::memcpy(xi + ((h + ph) * Wp + pw) * C, rows + h * W * C, W * C);
        if (tall) {
          if (C == 1) {
            int8::kernels::transpose_u8(xi, Hp, Wp, Wp, wh.data(), Hp);
          } else {
            for (std::int64_t h = 0; h < Hp; ++h)
              for (std::int64_t w = 0; w < Wp; ++w)
                std::memcpy(wh.data() + (w * Hp + h) * C, xi + (h * Wp + w) * C, C);
          }
          // xt (oh, w) = the kh C bytes wh (w, oh sh .. oh sh + kh), in 8-byte copies whose
          // spill the next one overwrites
          std::uint8_t* __restrict to = xtall.data() + i * timg;
          const std::uint8_t* __restrict t = wh.data();
          const std::int64_t n = run, col = Hp * C, down = sh * C;
          for (std::int64_t oh = 0; oh < Ho; ++oh)
            for (std::int64_t w = 0; w < Wp; ++w, to += n) {
              const std::uint8_t* from = t + w * col + oh * down;
              for (std::int64_t k = 0; k < n; k += 8) std::memcpy(to + k, from + k, 8);
            }
        }
        if (eb == 2) int8::kernels::widen_u8_u16(a8 + i * aimg, aimg, xwide.data() + i * aimg);
        if (clamp) clamp127(a8 + i * aimg, aimg, xnarrow.data() + i * aimg);
      }
    });
    if (eb == 2) int8::kernels::widen_u8_u16(a8 + nc * aimg, 32, xwide.data() + nc * aimg);
    if (clamp) clamp127(a8 + nc * aimg, 64, xnarrow.data() + nc * aimg);
    std::uint8_t* yc = out_nhwc_ ? py + n0 * P * O : yt.data();  // (nc P, O) rows
    if (wino) {
      const std::int64_t y_row = pool ? Wo / 2 : Wo;
      int8::conv_u8s8_row_winograd(xpad.data(), nc, Hp, Wp, Ho, wmain, sh, dh, zx, *st.row, st.requant,
                                   pool, yc, 0, y_row, P * O);
      if (split)
        int8::conv_u8s8_row_winograd(xpad.data(), nc, Hp, Wp, Ho, Wo - wmain, sh, dh, zx, *wrest->row,
                                     st.requant, pool, yc, wmain, y_row, P * O);
    }
    for (std::int64_t g = 0; g < G && !wino; ++g) {
      int8::Requant rq = st.requant;
      rq.scale = st.scales.data() + g * Og;
      rq.bias = st.bias.data() + g * Og;
      const int8::PooledRows rows{pool_map.data(), nc * P * int8::kernels::kPoolWindow};
      int8::gemm_u8s8_implicit(base + g * Cg * eb, nc * Ho * Wo, row_off.data(), piece_off.data(), zx,
                               st.packed[g], rq, yc + g * Og, O,
                               clamp ? xnarrow.data() + g * Cg : nullptr, pool ? &rows : nullptr,
                               taps ? &*gr.taps : nullptr);
    }
    if (out_nhwc_) continue;
    parallel_for(nc, 2, [&](std::int64_t i0, std::int64_t i1) {
      for (std::int64_t i = i0; i < i1; ++i)
        int8::kernels::transpose_u8(yt.data() + i * P * O, P, O, O, py + (n0 + i) * O * P, P);
    });
  }
  y.set_quant_info(output_quant());
  return y;
}

std::string QuantizedConv2d::extra_repr() const {
  return "weight " + weight_.shape().str() + (fused_relu_ ? ", relu" : "") + ", output " +
         detail::quant_str(output_quant());
}

}  // namespace qat::quant
