#pragma once
// Internal: the per-element index math of the im2col / col2im and pooling kernels (nn.cu), host
// and device, so that the CPU tests run the very code the GPU runs against the CPU ops. Each
// function computes one element of its kernel's output.
#include <cmath>
#include <cstdint>

#include "framework/kernels/cuda/kernels.h"

#include "framework/kernels/cuda/host_device.h"

namespace qat::kernels::cuda::window {

using i64 = std::int64_t;

// ---- convolution ----

/// col[idx] of im2col (kernels.h): idx = (n * C*kh*kw + (c*kh + i)*kw + j) * P + oh*Wo + ow
template <class T>
QAT_HOST_DEVICE inline T im2col_at(const T* x, const ConvDims& d, i64 idx) {
  const i64 P = d.Ho * d.Wo, CK = d.C * d.kh * d.kw;
  const i64 p = idx % P, r = idx / P % CK, n = idx / (P * CK);
  const i64 j = r % d.kw, i = r / d.kw % d.kh, c = r / (d.kh * d.kw);
  const i64 h = p / d.Wo * d.sh - d.ph + i * d.dh, w = p % d.Wo * d.sw - d.pw + j * d.dw;
  return h >= 0 && h < d.H && w >= 0 && w < d.W ? x[((n * d.C + c) * d.H + h) * d.W + w] : T(0);
}

/// dx[idx] of col2im, idx = ((n*C + c)*H + h)*W + w: the col entries that read x[n][c][h][w]
/// (h = oh*sh - ph + i*dh, w = ow*sw - pw + j*dw), summed in tap order
template <class T>
QAT_HOST_DEVICE inline T col2im_at(const T* col, const ConvDims& d, i64 idx) {
  const i64 P = d.Ho * d.Wo, CK = d.C * d.kh * d.kw;
  const i64 w = idx % d.W, h = idx / d.W % d.H, c = idx / (d.H * d.W) % d.C, n = idx / (d.C * d.H * d.W);
  const T* base = col + (n * CK + c * d.kh * d.kw) * P;
  T acc = 0;
  for (i64 i = 0; i < d.kh; ++i) {
    const i64 hh = h + d.ph - i * d.dh;
    if (hh < 0 || hh % d.sh != 0 || hh / d.sh >= d.Ho) continue;
    for (i64 j = 0; j < d.kw; ++j) {
      const i64 ww = w + d.pw - j * d.dw;
      if (ww < 0 || ww % d.sw != 0 || ww / d.sw >= d.Wo) continue;
      acc += base[(i * d.kw + j) * P + hh / d.sh * d.Wo + ww / d.sw];
    }
  }
  return acc;
}

// ---- pooling ----

struct Window {
  i64 lo, hi;    // inputs [lo, hi) along the axis
  double count;  // the average's divisor along the axis
};

/// Window o along an axis of n_in inputs and n_out outputs (kernel k, stride s, padding p).
QAT_HOST_DEVICE inline Window axis_window(i64 o, i64 n_in, i64 n_out, i64 k, i64 s, i64 p,
                                          const PoolDims& d) {
  if (d.adaptive) {
    const i64 lo = o * n_in / n_out, hi = ((o + 1) * n_in + n_out - 1) / n_out;
    return {lo, hi, static_cast<double>(hi - lo)};
  }
  const i64 start = o * s - p, end = start + k < n_in + p ? start + k : n_in + p;
  const i64 lo = start > 0 ? start : 0, hi = end < n_in ? end : n_in;
  return {lo, hi, static_cast<double>(d.count_include_pad ? end - start : hi - lo)};
}
QAT_HOST_DEVICE inline Window row_window(i64 oh, const PoolDims& d) {
  return axis_window(oh, d.H, d.Ho, d.kh, d.sh, d.ph, d);
}
QAT_HOST_DEVICE inline Window col_window(i64 ow, const PoolDims& d) {
  return axis_window(ow, d.W, d.Wo, d.kw, d.sw, d.pw, d);
}
/// The first window along an axis that may hold input h: no earlier one does.
QAT_HOST_DEVICE inline i64 first_window(i64 h, i64 n_in, i64 n_out, i64 k, i64 s, i64 p,
                                        const PoolDims& d) {
  if (d.adaptive) return h * n_out / n_in;
  return h + p < k ? 0 : (h + p - k) / s + 1;
}

/// f(o, count) for the windows o = oh*Wo + ow holding input (h, w), in output order.
template <class F>
QAT_HOST_DEVICE inline void for_each_window(i64 h, i64 w, const PoolDims& d, F&& f) {
  for (i64 oh = first_window(h, d.H, d.Ho, d.kh, d.sh, d.ph, d); oh < d.Ho; ++oh) {
    const Window rw = row_window(oh, d);
    if (rw.lo > h) break;
    if (h >= rw.hi) continue;
    for (i64 ow = first_window(w, d.W, d.Wo, d.kw, d.sw, d.pw, d); ow < d.Wo; ++ow) {
      const Window cw = col_window(ow, d);
      if (cw.lo > w) break;
      if (w >= cw.hi) continue;
      f(oh * d.Wo + ow, rw.count * cw.count);
    }
  }
}

/// Output idx = (plane*Ho + oh)*Wo + ow of max pooling: the window scanned row-major, taking v
/// if v > best or v is NaN; *at = its index in the plane.
template <class T>
QAT_HOST_DEVICE inline T max_pool_at(const T* x, const PoolDims& d, i64 idx, i64* at) {
  const i64 ow = idx % d.Wo, oh = idx / d.Wo % d.Ho, pl = idx / (d.Ho * d.Wo);
  const Window rw = row_window(oh, d), cw = col_window(ow, d);
  const T* in = x + pl * d.H * d.W;
  T best = -INFINITY;
  i64 arg = rw.lo * d.W + cw.lo;
  for (i64 h = rw.lo; h < rw.hi; ++h)
    for (i64 c = cw.lo; c < cw.hi; ++c) {
      const T v = in[h * d.W + c];
      if (v > best || v != v) best = v, arg = h * d.W + c;
    }
  *at = arg;
  return best;
}

/// dx[idx], idx = (plane*H + h)*W + w: g of the windows (in order) whose argmax is (h, w)
template <class T>
QAT_HOST_DEVICE inline T max_pool_grad_at(const T* g, const i64* at, const PoolDims& d, i64 idx) {
  const i64 w = idx % d.W, h = idx / d.W % d.H, pl = idx / (d.H * d.W);
  const i64 self = h * d.W + w, first = pl * d.Ho * d.Wo;
  T acc = 0;
  for_each_window(h, w, d, [&](i64 o, double) {
    if (at[first + o] == self) acc += g[first + o];
  });
  return acc;
}

/// Output idx of average pooling: the window's sum (row-major, in T) / its count
template <class T>
QAT_HOST_DEVICE inline T avg_pool_at(const T* x, const PoolDims& d, i64 idx) {
  const i64 ow = idx % d.Wo, oh = idx / d.Wo % d.Ho, pl = idx / (d.Ho * d.Wo);
  const Window rw = row_window(oh, d), cw = col_window(ow, d);
  const T* in = x + pl * d.H * d.W;
  T s = 0;
  for (i64 h = rw.lo; h < rw.hi; ++h)
    for (i64 c = cw.lo; c < cw.hi; ++c) s += in[h * d.W + c];
  return s / static_cast<T>(rw.count * cw.count);
}

/// dx[idx]: g / count of each window holding the input, summed in output order
template <class T>
QAT_HOST_DEVICE inline T avg_pool_grad_at(const T* g, const PoolDims& d, i64 idx) {
  const i64 w = idx % d.W, h = idx / d.W % d.H, pl = idx / (d.H * d.W);
  const T* gp = g + pl * d.Ho * d.Wo;
  T acc = 0;
  for_each_window(h, w, d, [&](i64 o, double count) { acc += gp[o] / static_cast<T>(count); });
  return acc;
}

}  // namespace qat::kernels::cuda::window
