// 2-D convolution as im2col + GEMM, one image at a time so that the column buffer (K = Cg*kh*kw
// rows, P = Ho*Wo columns) stays in cache:  y_n[g] (Og, P) = W_g (Og, K) x col (K, P).
// Each image is first copied into a zero-padded buffer, so im2col and col2im need no bounds
// checks. BLAS threads the GEMMs; the rest runs serially in a fixed order (deterministic).
// One GEMM per group over the whole batch (plus two permutes) timed slower on the CNN shapes.
#include <algorithm>
#include <cstring>
#include <string>

#include "framework/autograd/node.h"
#include "framework/autograd/ops.h"
#include "framework/tensor/blas.h"
#include "framework/tensor/dispatch.h"

namespace qat {

using Grads = std::vector<Tensor>;
using Inputs = std::vector<Tensor>;
using detail::gemm;
using i64 = std::int64_t;

namespace {

struct ConvGeom {
  i64 N, C, H, W, O, kh, kw, groups, Cg, Og, Ho, Wo;
  Pair stride, padding, dilation;
  i64 K() const { return Cg * kh * kw; }  // rows of a group's column buffer
  i64 P() const { return Ho * Wo; }       // output positions per image
  i64 Hp() const { return H + 2 * padding[0]; }
  i64 Wp() const { return W + 2 * padding[1]; }
};

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
  QAT_REQUIRE(p.dilation[0] > 0 && p.dilation[1] > 0, "conv2d",
              "dilation must be positive, got ", str(p.dilation));
  QAT_REQUIRE(p.padding[0] >= 0 && p.padding[1] >= 0, "conv2d",
              "padding must be non-negative, got ", str(p.padding));
  const i64 C = x.size(1), O = w.size(0), G = p.groups;
  QAT_REQUIRE(G > 0 && C % G == 0 && O % G == 0, "conv2d", "groups=", G,
              " must be positive and divide both the input channels (", C,
              ") and the output channels (", O, ")");
  QAT_REQUIRE(w.size(1) * G == C, "conv2d", "weight of shape ", w.shape(), " with groups=", G,
              " expects ", w.size(1) * G, " input channels, but x of shape ", x.shape(), " has ", C);
  ConvGeom g{x.size(0), C, x.size(2), x.size(3), O, w.size(2), w.size(3), G, C / G, O / G, 0, 0,
             p.stride, p.padding, p.dilation};
  const i64 ekh = p.dilation[0] * (g.kh - 1) + 1, ekw = p.dilation[1] * (g.kw - 1) + 1;
  const i64 hp = g.H + 2 * p.padding[0], wp = g.W + 2 * p.padding[1];
  QAT_REQUIRE(ekh <= hp && ekw <= wp, "conv2d", "kernel ", g.kh, "x", g.kw, " (dilated ", ekh, "x",
              ekw, ") is larger than the padded input ", hp, "x", wp);
  g.Ho = (hp - ekh) / p.stride[0] + 1;
  g.Wo = (wp - ekw) / p.stride[1] + 1;
  if (b.defined()) {
    QAT_REQUIRE(b.dtype() == x.dtype() && b.dim() == 1 && b.size(0) == O, "conv2d", "bias must be ",
                dtype_name(x.dtype()), "[", O, "], got ", dtype_name(b.dtype()), b.shape());
  }
  return g;
}

// Zero-padded copy of the `ch` planes (H, W) at src into the (Hp, Wp) planes at dst. Only the
// interior is written: the border keeps the zeros the buffer was created with.
template <class T>
void pad_planes(const T* src, T* dst, const ConvGeom& g, i64 ch) {
  const i64 hp = g.Hp(), wp = g.Wp();
  for (i64 c = 0; c < ch; ++c)
    for (i64 h = 0; h < g.H; ++h)
      std::copy_n(src + (c * g.H + h) * g.W, g.W, dst + (c * hp + h + g.padding[0]) * wp + g.padding[1]);
}

// Rows of n elements moved in 64-byte vectors (GCC/Clang vector extension: AVX-512, AVX2 or SSE).
// copy_over may read and write up to one vector past the row, which its buffers leave room for
// (kSlack); add masks the last vector, but still reads and rewrites it whole.
constexpr i64 kSlack = 64;
template <class T>
struct Row {
  static constexpr i64 V = 64 / sizeof(T);
  typedef T Vec __attribute__((vector_size(64)));

  static void copy_over(const T* src, T* dst, i64 n) {
    for (i64 t = 0; t < n; t += V) std::memcpy(dst + t, src + t, 64);
  }
  static void add(const T* src, T* dst, i64 n) {  // dst += src
    Vec a, b, lane;
    for (i64 l = 0; l < V; ++l) lane[l] = T(l);
    for (i64 t = 0; t < n; t += V) {
      std::memcpy(&a, src + t, 64);
      std::memcpy(&b, dst + t, 64);
      b += lane < T(n - t) ? a : Vec{};
      std::memcpy(dst + t, &b, 64);
    }
  }
};

// sum of p[0..n) in a fixed order, with V independent double partial sums (vectorises)
template <class T>
double sum_lanes(const T* p, i64 n) {
  constexpr i64 V = 8;
  double acc[V] = {}, s = 0;
  i64 i = 0;
  for (; i + V <= n; i += V)
    for (i64 l = 0; l < V; ++l) acc[l] += p[i + l];
  for (; i < n; ++i) s += p[i];
  for (i64 l = 0; l < V; ++l) s += acc[l];
  return s;
}

// col (K, P) from one image's padded group planes xp (Cg, Hp, Wp):
//   col[(c*kh + i)*kw + j][oh*Wo + ow] = xp[c][oh*sh + i*dh][ow*sw + j*dw]
// Rows are written in increasing order, so the chunked copy's overrun is overwritten.
template <class T>
void im2col(const T* xp, T* col, const ConvGeom& g) {
  const i64 P = g.P(), hp = g.Hp(), wp = g.Wp(), sh = g.stride[0], sw = g.stride[1];
  for (i64 k = 0; k < g.K(); ++k) {
    const i64 c = k / (g.kh * g.kw), i = k / g.kw % g.kh, j = k % g.kw;
    const T* src = xp + (c * hp + i * g.dilation[0]) * wp + j * g.dilation[1];
    T* dst = col + k * P;
    for (i64 oh = 0; oh < g.Ho; ++oh) {
      const T* s = src + oh * sh * wp;
      T* d = dst + oh * g.Wo;
      if (sw == 1) {
        Row<T>::copy_over(s, d, g.Wo);
      } else {
        for (i64 ow = 0; ow < g.Wo; ++ow) d[ow] = s[ow * sw];
      }
    }
  }
}

// The adjoint of im2col, in a fixed order:
//   xp[c][oh*sh + i*dh][ow*sw + j*dw] += col[(c*kh + i)*kw + j][oh*Wo + ow]
template <class T>
void col2im(const T* col, T* xp, const ConvGeom& g) {
  const i64 P = g.P(), hp = g.Hp(), wp = g.Wp(), sh = g.stride[0], sw = g.stride[1];
  for (i64 k = 0; k < g.K(); ++k) {
    const i64 c = k / (g.kh * g.kw), i = k / g.kw % g.kh, j = k % g.kw;
    T* dst = xp + (c * hp + i * g.dilation[0]) * wp + j * g.dilation[1];
    const T* src = col + k * P;
    for (i64 oh = 0; oh < g.Ho; ++oh) {
      T* d = dst + oh * sh * wp;
      const T* s = src + oh * g.Wo;
      if (sw == 1) {
        Row<T>::add(s, d, g.Wo);
      } else {
        for (i64 ow = 0; ow < g.Wo; ++ow) d[ow * sw] += s[ow];
      }
    }
  }
}

}  // namespace

// Per image n and group g, with col = im2col(x_n) and dY_ng the (Og, P) gradient rows:
// y_ng = W_g col + b;  dW_g = sum_n dY_ng col^T,  dx_n = col2im(W_g^T dY_ng),  db = sum_{n,p} dY
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, const Conv2dParams& p) {
  const ConvGeom g = conv_geom(x, weight, bias, p);
  const i64 K = g.K(), P = g.P(), plane = g.H * g.W, padded = g.Cg * g.Hp() * g.Wp();
  Tensor out = Tensor::empty(Shape{g.N, g.O, g.Ho, g.Wo}, x.dtype());
  detail::dispatch_float(x.dtype(), "conv2d", [&]<class T>() {
    Tensor xpad = Tensor::zeros(Shape{padded + kSlack}, x.dtype());
    Tensor cols = Tensor::empty(Shape{K * P + kSlack}, x.dtype());
    T *xp = xpad.data<T>(), *col = cols.data<T>();
    const T* pb = bias.defined() ? bias.data<T>() : nullptr;
    for (i64 n = 0; n < g.N; ++n) {
      T* yn = out.data<T>() + n * g.O * P;
      if (pb)
        for (i64 o = 0; o < g.O; ++o) std::fill_n(yn + o * P, P, pb[o]);
      for (i64 grp = 0; grp < g.groups; ++grp) {
        pad_planes(x.data<T>() + (n * g.C + grp * g.Cg) * plane, xp, g, g.Cg);
        im2col(xp, col, g);
        gemm<T>(false, false, g.Og, P, K, 1, weight.data<T>() + grp * g.Og * K, K, col, P,
                pb ? 1 : 0, yn + grp * g.Og * P, P);
      }
    }
  });
  autograd::record(out, "conv2d", {x, weight, bias},
                   [g](const Tensor& gout, const Inputs& in, Grads& gi) {
    const Tensor &X = in[0], &Wt = in[1], &B = in[2];
    const i64 K = g.K(), P = g.P(), plane = g.H * g.W, padded = g.Cg * g.Hp() * g.Wp();
    detail::dispatch_float(gout.dtype(), "conv2d_backward", [&]<class T>() {
      const T* pg = gout.data<T>();
      if (B.defined() && B.requires_grad()) {
        gi[2] = Tensor::empty(B.shape(), B.dtype());
        for (i64 o = 0; o < g.O; ++o) {
          double s = 0;
          for (i64 n = 0; n < g.N; ++n) s += sum_lanes(pg + (n * g.O + o) * P, P);
          gi[2].data<T>()[o] = static_cast<T>(s);
        }
      }
      const bool need_w = Wt.requires_grad(), need_x = X.requires_grad();
      Tensor xpad = Tensor::zeros(Shape{padded + kSlack}, gout.dtype());  // padded x_n
      Tensor dpad = Tensor::empty(Shape{padded + kSlack}, gout.dtype());  // padded dx_n
      Tensor cols = Tensor::empty(Shape{K * P + kSlack}, gout.dtype());
      T *xp = xpad.data<T>(), *dp = dpad.data<T>(), *col = cols.data<T>();
      if (need_w) gi[1] = Tensor::empty(Wt.shape(), Wt.dtype());
      if (need_x) gi[0] = Tensor::empty(X.shape(), X.dtype());
      for (i64 n = 0; n < g.N; ++n)
        for (i64 grp = 0; grp < g.groups; ++grp) {
          const T* dy = pg + (n * g.O + grp * g.Og) * P;  // (Og, P)
          const i64 first = (n * g.C + grp * g.Cg) * plane;
          if (need_w) {
            pad_planes(X.data<T>() + first, xp, g, g.Cg);
            im2col(xp, col, g);
            gemm<T>(false, true, g.Og, K, P, 1, dy, P, col, P, n > 0 ? 1 : 0,
                    gi[1].data<T>() + grp * g.Og * K, K);
          }
          if (need_x) {
            gemm<T>(true, false, K, P, g.Og, 1, Wt.data<T>() + grp * g.Og * K, K, dy, P, 0,
                    col, P);
            std::fill_n(dp, padded, T(0));
            col2im(col, dp, g);
            T* dx = gi[0].data<T>() + first;
            for (i64 c = 0; c < g.Cg; ++c)
              for (i64 h = 0; h < g.H; ++h)
                std::copy_n(dp + (c * g.Hp() + h + g.padding[0]) * g.Wp() + g.padding[1], g.W,
                            dx + (c * g.H + h) * g.W);
          }
        }
    });
  });
  return out;
}

}  // namespace qat
