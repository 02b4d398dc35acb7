// Max, average and adaptive average pooling over (N, C, H, W). Every op is described by its
// windows: output (oh, ow) pools rows [h0, h1) x cols [w0, w1) of its input plane (clipped to
// the input), and the planes are processed in parallel (each by one thread, in a fixed order).
// On CUDA the kernels compute the same windows from the geometry (kernels::cuda::PoolDims).
#include "framework/kernels/cpu/pool.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <type_traits>

#include "framework/autograd/node.h"
#include "framework/autograd/ops.h"
#include "framework/kernels/cuda/kernels.h"
#include "framework/tensor/dispatch.h"

namespace qat {

using Grads = std::vector<Tensor>;
using Inputs = std::vector<Tensor>;
using i64 = std::int64_t;
constexpr i64 kParallelMin = 1 << 16;  // elements below which threads cost more than they save

namespace {

struct Windows {
  i64 planes, H, W, Ho, Wo;
  Pair kernel, stride, padding;  // sliding windows only
  std::vector<i64> h0, h1, w0, w1;
  std::vector<double> hn, wn;  // the average of window (oh, ow) divides by hn[oh] * wn[ow]
  bool adaptive = false, count_include_pad = false;
  Shape out_shape(const Tensor& x) const { return Shape{x.size(0), x.size(1), Ho, Wo}; }
};

std::string str(Pair p) { return detail::concat("(", p[0], ", ", p[1], ")"); }

void require_input(const Tensor& x, const char* fn) {
  require_float(x, fn, "x");
  QAT_REQUIRE(x.dim() == 4, fn, "x must be (N, C, H, W), got shape ", x.shape());
  QAT_REQUIRE(x.numel() > 0, fn, "x of shape ", x.shape(), " is empty");
}

// Sliding windows, PyTorch semantics (floor mode): start = o*s - p, the average divides by the
// window size clipped to the padded input (count_include_pad) or to the input.
Windows sliding(const Tensor& x, const Pool2dParams& p, bool count_include_pad, const char* fn) {
  require_input(x, fn);
  const Pair k = p.kernel, pad = p.padding;
  const Pair s = (p.stride[0] == 0 && p.stride[1] == 0) ? k : p.stride;
  QAT_REQUIRE(k[0] > 0 && k[1] > 0, fn, "kernel must be positive, got ", str(k));
  QAT_REQUIRE(s[0] > 0 && s[1] > 0, fn, "stride must be positive (or (0, 0) for the kernel), got ",
              str(s));
  QAT_REQUIRE(pad[0] >= 0 && pad[1] >= 0 && 2 * pad[0] <= k[0] && 2 * pad[1] <= k[1], fn,
              "padding must be between 0 and half the kernel ", str(k), ", got ", str(pad));
  Windows w{x.size(0) * x.size(1), x.size(2), x.size(3), 0, 0, k, s, pad, {}, {}, {}, {}, {}, {}, false,
            count_include_pad};
  const i64 hp = w.H + 2 * pad[0], wp = w.W + 2 * pad[1];
  QAT_REQUIRE(hp >= k[0] && wp >= k[1], fn, "kernel ", str(k), " is larger than the padded input ", hp,
              "x", wp, " (x of shape ", x.shape(), ")");
  w.Ho = (hp - k[0]) / s[0] + 1;
  w.Wo = (wp - k[1]) / s[1] + 1;
  auto axis = [&](i64 n_out, i64 n_in, int d, std::vector<i64>& lo, std::vector<i64>& hi,
                  std::vector<double>& count) {
    for (i64 o = 0; o < n_out; ++o) {
      const i64 start = o * s[d] - pad[d], end = std::min(start + k[d], n_in + pad[d]);
      lo.push_back(std::max<i64>(start, 0));
      hi.push_back(std::min(end, n_in));
      count.push_back(static_cast<double>(count_include_pad ? end - start : hi.back() - lo.back()));
    }
  };
  axis(w.Ho, w.H, 0, w.h0, w.h1, w.hn);
  axis(w.Wo, w.W, 1, w.w0, w.w1, w.wn);
  return w;
}

// Adaptive bins: output i pools [floor(i*n/out), ceil((i+1)*n/out)).
Windows adaptive(const Tensor& x, Pair out, const char* fn) {
  require_input(x, fn);
  QAT_REQUIRE(out[0] > 0 && out[1] > 0, fn, "output_size must be positive, got ", str(out));
  Windows w{x.size(0) * x.size(1),
            x.size(2),
            x.size(3),
            out[0],
            out[1],
            {},
            {},
            {},
            {},
            {},
            {},
            {},
            {},
            {},
            true,
            false};
  auto axis = [](i64 n_out, i64 n_in, std::vector<i64>& lo, std::vector<i64>& hi,
                 std::vector<double>& count) {
    for (i64 o = 0; o < n_out; ++o) {
      lo.push_back(o * n_in / n_out);
      hi.push_back(((o + 1) * n_in + n_out - 1) / n_out);
      count.push_back(static_cast<double>(hi.back() - lo.back()));
    }
  };
  axis(w.Ho, w.H, w.h0, w.h1, w.hn);
  axis(w.Wo, w.W, w.w0, w.w1, w.wn);
  return w;
}

// One plane of max pooling with PyTorch's rule: scan each window row-major and take v if
// v > best or v is NaN. Windows [lo, hi) of a row are not clipped horizontally; they are
// scanned together, one kernel offset at a time, which vectorises without branches.
template <class T>
void max_pool_plane(const T* in, T* out, std::int64_t* argmax, const Windows& w) {
  const i64 W = w.W, Wo = w.Wo, sw = w.stride[1], pw = w.padding[1], kw = w.kernel[1];
  const i64 lo = std::min(Wo, (pw + sw - 1) / sw), last = W + pw - kw;  // ow*sw - pw >= 0, ow*sw <= last
  const i64 hi = std::max(lo, last >= 0 ? std::min(Wo, last / sw + 1) : 0);
  for (i64 oh = 0; oh < w.Ho; ++oh) {
    T* best = out + oh * Wo;
    std::int64_t* at = argmax + oh * Wo;
    auto visit = [in, best, at](i64 ow, i64 i) {
      const T v = in[i];
      const bool take = v > best[ow] || v != v;
      best[ow] = take ? v : best[ow];
      at[ow] = take ? i : at[ow];
    };
    auto clipped = [&](i64 ow, i64 h) {
      for (i64 c = w.w0[ow]; c < w.w1[ow]; ++c) visit(ow, h * W + c);
    };
    for (i64 ow = 0; ow < Wo; ++ow) {
      best[ow] = -std::numeric_limits<T>::infinity();
      at[ow] = w.h0[oh] * W + w.w0[ow];
    }
    for (i64 h = w.h0[oh]; h < w.h1[oh]; ++h) {
      for (i64 ow = 0; ow < lo; ++ow) clipped(ow, h);
      for (i64 ow = hi; ow < Wo; ++ow) clipped(ow, h);
      for (i64 c = 0; c < kw; ++c)
        for (i64 ow = lo; ow < hi; ++ow) visit(ow, h * W - pw + c + ow * sw);
    }
  }
}

// The common case -- non-overlapping 2x2 windows (kernel = stride = 2, no padding) -- on float
// planes runs kernels::max_pool_2x2 (same scan order and NaN rule as max_pool_plane). Its argmax
// is the window position, kernels::kTopLeft..kBottomRight (a byte, not an int64 plane index).
bool is_plain_2x2(const Windows& w) {
  return w.kernel == Pair{2, 2} && w.stride == Pair{2, 2} && w.padding == Pair{0, 0};
}

kernels::cuda::PoolDims cuda_dims(const Windows& w) {
  return {w.planes,           w.H,         w.W,         w.Ho,         w.Wo,         w.kernel[0],
          w.kernel[1],        w.stride[0], w.stride[1], w.padding[0], w.padding[1], w.adaptive,
          w.count_include_pad};
}

// The CUDA kernels: forward one thread per output, backward one per input gathering its windows
// in output order, so that avg pooling is bit-exact with the CPU and max pooling's ties and
// gradients are the CPU's.
Tensor avg_pool_cuda(const Tensor& x, const Windows& w, const char* name) {
  const kernels::cuda::PoolDims d = cuda_dims(w);
  Tensor out = Tensor::empty(w.out_shape(x), x.dtype(), Device::CUDA);
  detail::dispatch_float(x.dtype(), name, [&]<class T>() {
    kernels::cuda::avg_pool(x.cuda_data<T>(), out.cuda_data<T>(), d);
  });
  autograd::record(out, name, {x}, [d](const Tensor& g, const Inputs& in, Grads& gi) {
    common_device("avg_pool_backward", {{"grad", &g}, {"x", &in[0]}});
    gi[0] = Tensor::empty(in[0].shape(), g.dtype(), Device::CUDA);
    detail::dispatch_float(g.dtype(), "avg_pool_backward", [&]<class T>() {
      kernels::cuda::avg_pool_backward(g.cuda_data<T>(), gi[0].cuda_data<T>(), d);
    });
  });
  return out;
}

Tensor max_pool_cuda(const Tensor& x, const Windows& w) {
  const kernels::cuda::PoolDims d = cuda_dims(w);
  Tensor out = Tensor::empty(w.out_shape(x), x.dtype(), Device::CUDA);
  Tensor idx = Tensor::empty(out.shape(), DType::Int64, Device::CUDA);  // argmax in its plane
  detail::dispatch_float(x.dtype(), "max_pool2d", [&]<class T>() {
    kernels::cuda::max_pool(x.cuda_data<T>(), out.cuda_data<T>(), idx.cuda_data<std::int64_t>(), d);
  });
  autograd::record(out, "max_pool2d", {x}, [d, idx](const Tensor& g, const Inputs& in, Grads& gi) {
    common_device("max_pool2d_backward", {{"grad", &g}, {"x", &in[0]}});
    gi[0] = Tensor::empty(in[0].shape(), g.dtype(), Device::CUDA);
    detail::dispatch_float(g.dtype(), "max_pool2d_backward", [&]<class T>() {
      kernels::cuda::max_pool_backward(g.cuda_data<T>(), idx.cuda_data<std::int64_t>(),
                                       gi[0].cuda_data<T>(), d);
    });
  });
  return out;
}

// out = mean of each window;  dx[window] += g / count
Tensor avg_pool(const Tensor& x, Windows w, const char* name) {
  if (x.device() == Device::CUDA) return avg_pool_cuda(x, w, name);
  Tensor out = Tensor::empty(w.out_shape(x), x.dtype());
  detail::dispatch_float(x.dtype(), name, [&]<class T>() {
    const T* px = x.data<T>();
    T* po = out.data<T>();
#pragma omp parallel for schedule(static) if (w.planes * w.H * w.W >= kParallelMin)
    for (i64 pl = 0; pl < w.planes; ++pl) {
      const T* in = px + pl * w.H * w.W;
      T* o = po + pl * w.Ho * w.Wo;
      for (i64 oh = 0; oh < w.Ho; ++oh) {
        const i64 h0 = w.h0[oh], h1 = w.h1[oh];
        for (i64 ow = 0; ow < w.Wo; ++ow) {
          const i64 c0 = w.w0[ow], c1 = w.w1[ow];
          T s = 0;
          for (i64 h = h0; h < h1; ++h)
            for (i64 c = c0; c < c1; ++c) s += in[h * w.W + c];
          o[oh * w.Wo + ow] = s / static_cast<T>(w.hn[oh] * w.wn[ow]);
        }
      }
    }
  });
  autograd::record(out, name, {x}, [w = std::move(w)](const Tensor& g, const Inputs& in, Grads& gi) {
    gi[0] = Tensor::zeros(in[0].shape(), g.dtype());
    detail::dispatch_float(g.dtype(), "avg_pool_backward", [&]<class T>() {
      const T* pg = g.data<T>();
      T* pd = gi[0].data<T>();
#pragma omp parallel for schedule(static) if (w.planes * w.H * w.W >= kParallelMin)
      for (i64 pl = 0; pl < w.planes; ++pl) {
        T* d = pd + pl * w.H * w.W;
        const T* gp = pg + pl * w.Ho * w.Wo;
        for (i64 oh = 0; oh < w.Ho; ++oh) {
          const i64 h0 = w.h0[oh], h1 = w.h1[oh];
          for (i64 ow = 0; ow < w.Wo; ++ow) {
            const i64 c0 = w.w0[ow], c1 = w.w1[ow];
            const T v = gp[oh * w.Wo + ow] / static_cast<T>(w.hn[oh] * w.wn[ow]);
            for (i64 h = h0; h < h1; ++h)
              for (i64 c = c0; c < c1; ++c) d[h * w.W + c] += v;
          }
        }
      }
    });
  });
  return out;
}

// out = max of each window (padding counts as -inf; NaN wins);  dx[argmax] += g.
// relu_first: the windows of relu(x) on the 2x2 fast path, in the same pass (relu_max_pool2d).
Tensor max_pool_cpu(const Tensor& x, const Windows& w, bool fast, bool relu_first) {
  const char* name = relu_first ? "relu_max_pool2d" : "max_pool2d";
  Tensor out = Tensor::empty(w.out_shape(x), x.dtype());
  // the argmax: its index in the input plane, or its window position on the fast path
  Tensor idx = Tensor::empty(out.shape(), fast ? DType::UInt8 : DType::Int64);
  detail::dispatch_float(x.dtype(), name, [&]<class T>() {
    const T* px = x.data<T>();
    T* po = out.data<T>();
#pragma omp parallel for schedule(static) if (w.planes * w.H * w.W >= kParallelMin)
    for (i64 pl = 0; pl < w.planes; ++pl) {
      const T* in = px + pl * w.H * w.W;
      T* o = po + pl * w.Ho * w.Wo;
      if constexpr (std::is_same_v<T, float>) {
        if (fast) {
          std::uint8_t* at = idx.data<std::uint8_t>() + pl * w.Ho * w.Wo;
          if (relu_first)
            kernels::max_pool_2x2_relu(in, w.H, w.W, o, at);
          else
            kernels::max_pool_2x2(in, w.H, w.W, o, at);
          continue;
        }
      }
      max_pool_plane(in, o, idx.data<std::int64_t>() + pl * w.Ho * w.Wo, w);
    }
  });
  autograd::record(out, name, {x}, [w, idx, fast](const Tensor& g, const Inputs& in, Grads& gi) {
    const bool covered = fast && w.H % 2 == 0 && w.W % 2 == 0;  // the 2x2 windows tile the input
    gi[0] = covered ? Tensor::empty(in[0].shape(), g.dtype()) : Tensor::zeros(in[0].shape(), g.dtype());
    detail::dispatch_float(g.dtype(), "max_pool2d_backward", [&]<class T>() {
      const T* pg = g.data<T>();
      T* pd = gi[0].data<T>();
      const i64 n_out = w.Ho * w.Wo;
#pragma omp parallel for schedule(static) if (w.planes * w.H * w.W >= kParallelMin)
      for (i64 pl = 0; pl < w.planes; ++pl) {
        T* d = pd + pl * w.H * w.W;
        if constexpr (std::is_same_v<T, float>) {
          if (fast) {
            kernels::max_pool_2x2_backward(pg + pl * n_out, idx.data<std::uint8_t>() + pl * n_out, w.H,
                                           w.W, d);
            continue;
          }
        }
        const std::int64_t* at = idx.data<std::int64_t>() + pl * n_out;
        for (i64 o = 0; o < n_out; ++o) d[at[o]] += pg[pl * n_out + o];
      }
    });
  });
  return out;
}

}  // namespace

Tensor max_pool2d(const Tensor& x, const Pool2dParams& p) {
  Windows w = sliding(x, p, true, "max_pool2d");
  if (x.device() == Device::CUDA) return max_pool_cuda(x, w);
  return max_pool_cpu(x, w, x.dtype() == DType::Float32 && is_plain_2x2(w), false);
}

// max_pool2d(relu(x), p): one pass over x on the CPU's 2x2 fast path, the same values and
// gradients as the two ops (the argmax over relu(x) gets the gradient where that maximum is
// above 0; relu passes none elsewhere); the two ops everywhere else.
Tensor relu_max_pool2d(const Tensor& x, const Pool2dParams& p) {
  Windows w = sliding(x, p, true, "relu_max_pool2d");
  if (x.device() != Device::CPU || x.dtype() != DType::Float32 || !is_plain_2x2(w))
    return max_pool2d(relu(x), p);
  return max_pool_cpu(x, w, true, true);
}

Tensor avg_pool2d(const Tensor& x, const Pool2dParams& p) {
  return avg_pool(x, sliding(x, p, p.count_include_pad, "avg_pool2d"), "avg_pool2d");
}

Tensor adaptive_avg_pool2d(const Tensor& x, Pair output_size) {
  return avg_pool(x, adaptive(x, output_size, "adaptive_avg_pool2d"), "adaptive_avg_pool2d");
}

Tensor global_avg_pool2d(const Tensor& x) {
  return avg_pool(x, adaptive(x, {1, 1}, "global_avg_pool2d"), "global_avg_pool2d");
}

}  // namespace qat
