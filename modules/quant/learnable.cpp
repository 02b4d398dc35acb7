// Learnable quantizers: LSQ scale / zero point (PyTorch 1.13 semantics) and a PACT-style
// learnable clipping range. Gradients are summed per parameter in double. On CUDA (float32):
// the forward and dx bit-exact with the CPU, the parameter gradients summed in double in a fixed
// order of their own (kernels/cuda/learnable.cu), within ~1e-7 relative of the CPU's.
#include <algorithm>
#include <cmath>
#include <type_traits>

#include "framework/autograd/node.h"
#include "framework/tensor/dispatch.h"
#include "modules/quant/detail/fq_kernels.h"
#include "modules/quant/detail/layout.h"
#include "modules/quant/fake_quant.h"
#include "modules/quant/kernels/cpu/kernels.h"
#include "modules/quant/kernels/cuda/kernels.h"
#include "modules/quant/kernels/cuda/learnable_math.h"

namespace qat::quant {

using detail::Layout;
using Grads = std::vector<Tensor>;
using Inputs = std::vector<Tensor>;

namespace {

// One run of PyTorch's fake_quantize_learnable_*_grad_kernel_cpu, float64 (float32 runs
// kernels::lsq_backward: the same gradients with their common factors out of the sums), with zp
// the backward zero point (a float holding an integer):
//   q = round_half_even(zp + x/s);  dx = dy [qmin <= q <= qmax]
//   inside:  dscale += dy * ((q - zp) s - x) / s * gf
//   outside: dscale += dy * (qmin|qmax - zp) * gf,  dzp += -dy * s * gf
// zp + x/s and (q - zp) s - x are fused multiply-adds (one rounding each), as PyTorch's AVX2 /
// AVX-512 kernel computes them in float32 (the compiler contracts them there; PyTorch has no
// float64 backward, which takes the same form here); explicit, so builds without FMA agree.
// q stays floating: PyTorch casts it to int64, which overflows for |x/s| >= 2^63 or +-inf;
// here those count as above / below the range as in the forward, and NaN as below (-> qmin).
template <class T>
void lsq_grad_run(const T* __restrict x, const T* __restrict dy, T* __restrict dx, std::int64_t n,
                  float s, float zp, std::int64_t qmin, std::int64_t qmax, float gf, double& dscale,
                  double& dzp) {
  const float inv = 1.0f / s;
  const T small = static_cast<T>(static_cast<float>(qmin) - zp);
  const T big = static_cast<T>(static_cast<float>(qmax) - zp);
  const T lo = static_cast<T>(qmin), hi = static_cast<T>(qmax);
  double ds = 0, dz = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    const T q = std::nearbyint(std::fma(x[i], static_cast<T>(inv), static_cast<T>(zp)));
    const bool below = !(q >= lo), above = q > hi, inside = !below && !above;
    dx[i] = inside ? dy[i] : T(0);
    if (inside) {
      const T r = std::fma(static_cast<T>(static_cast<float>(q) - zp), static_cast<T>(s), -x[i]);
      ds += dy[i] * r * static_cast<T>(inv) * static_cast<T>(gf);
    } else {
      ds += (below ? dy[i] * small : dy[i] * big) * static_cast<T>(gf);
      dz += dy[i] * T(-1) * static_cast<T>(s) * static_cast<T>(gf);
    }
  }
  dscale += ds;
  dzp += dz;
}

// kernels::lsq_backward on a run of one element (no vector set-up; per-channel parameters along
// the innermost axis have runs of one): the terms of learnable_math.h (shared with CUDA), and
// chunk256 of one term is 0.0f + the term (A's: fma(dx, r, 0.0f)).
void lsq_grad_one(const float* x, const float* dy, float* dx, float s, float zp, std::int64_t qmin,
                  std::int64_t qmax, float gf, double& dscale, double& dzp) {
  namespace lm = kernels::cuda::learnable;
  const lm::LsqGrad k =
      lm::lsq_grad_consts(s, zp, static_cast<float>(qmin), static_cast<float>(qmax), gf);
  float a, b, z;
  *dx = lm::lsq_grad_terms(*x, *dy, k, &a, &b, &z);
  kernels::lsq_combine(lm::fused_multiply_add(*dx, a, 0.0f), 0.0f + b, 0.0f + z, s, gf, &dscale, &dzp);
}

namespace kcuda = kernels::cuda;

kcuda::ParamLayout param_layout(const Layout& l) { return {l.outer, l.len, l.inner}; }
float* cuda_ptr_or_null(const Tensor& t) { return t.defined() ? t.cuda_data<float>() : nullptr; }

// Parameters on the device are not read here (that would cost a host sync per call).
void require_learnable(const Tensor& x, const Tensor& scale, const Tensor& zero_point, std::int64_t n,
                       std::int64_t qmin, std::int64_t qmax, const char* fn) {
  require_float(x, fn, "x");
  require_dtype(scale, DType::Float32, fn, "scale");
  require_dtype(zero_point, DType::Float32, fn, "zero_point");
  QAT_REQUIRE(scale.numel() == n && zero_point.numel() == n, fn, "expected ", n,
              " scales and zero points, got scale ", scale.shape(), " and zero_point ",
              zero_point.shape());
  QAT_REQUIRE(qmin < qmax, fn, "quant_min (", qmin, ") must be below quant_max (", qmax, ")");
  if (x.device() == Device::CUDA) {
    QAT_REQUIRE(x.dtype() == DType::Float32, fn, "not implemented on CUDA yet for ",
                dtype_name(x.dtype()), " (float32 only), x of shape ", x.shape());
    return;
  }
  for (std::int64_t p = 0; p < n; ++p) {
    QAT_REQUIRE(scale.data<float>()[p] > 0 && std::isfinite(scale.data<float>()[p]), fn,
                "scale must be positive and finite, got ", scale.data<float>()[p], " at index ", p);
    // the zero point is rounded and cast to an integer: NaN / inf would be undefined there
    QAT_REQUIRE(std::isfinite(zero_point.data<float>()[p]), fn, "zero_point must be finite, got ",
                zero_point.data<float>()[p], " at index ", p);
  }
}

// Shared by the per-tensor and per-channel ops; `zp_backward` maps the learned zero point to
// the one the backward pass uses (they differ between PyTorch's two ops).
template <class ZpBackward>
Tensor learnable_impl(const Tensor& x, const Tensor& scale, const Tensor& zero_point,
                      const Layout& layout, std::int64_t qmin, std::int64_t qmax, double grad_factor,
                      const char* name, ZpBackward zp_backward) {
  const float lo = static_cast<float>(qmin), hi = static_cast<float>(qmax);
  std::vector<std::int32_t> zp_fwd(layout.num_params);
  for (std::int64_t p = 0; p < layout.num_params; ++p)  // round half to even, then clamp
    zp_fwd[p] =
        static_cast<std::int32_t>(std::clamp(std::nearbyint(zero_point.data<float>()[p]), lo, hi));
  Tensor out = Tensor::empty(x.shape(), x.dtype());
  qat::detail::dispatch_float(x.dtype(), name, [&]<class T>() {
    if constexpr (std::is_same_v<T, float>) {
      detail::fake_quant_f32(x.data<float>(), out.data<float>(), nullptr, layout, scale.data<float>(),
                             zp_fwd.data(), qmin, qmax);
    } else {
      layout.for_each_run([&](std::int64_t off, std::int64_t n, std::int64_t p) {
        detail::fq_run<T>(x.data<T>() + off, out.data<T>() + off, nullptr, n, scale.data<float>()[p],
                          zp_fwd[p], qmin, qmax);
      });
    }
  });
  autograd::record(
      out, name, {x, scale, zero_point},
      [layout, qmin, qmax, grad_factor, zp_backward](const Tensor& g, const Inputs& in, Grads& gi) {
        const Tensor &X = in[0], &S = in[1], &Z = in[2];
        Tensor dx = Tensor::empty(X.shape(), X.dtype());
        std::vector<double> ds(layout.num_params, 0.0), dz(layout.num_params, 0.0);
        qat::detail::dispatch_float(X.dtype(), "fake_quantize_learnable_backward", [&]<class T>() {
          layout.for_each_run([&](std::int64_t off, std::int64_t n, std::int64_t p) {
            const float s = S.data<float>()[p], zp = zp_backward(Z.data<float>()[p], qmin, qmax);
            if constexpr (std::is_same_v<T, float>) {
              if (n == 1) {
                lsq_grad_one(X.data<float>() + off, g.data<float>() + off, dx.data<float>() + off, s, zp,
                             qmin, qmax, static_cast<float>(grad_factor), ds[p], dz[p]);
                return;
              }
              kernels::lsq_backward(X.data<float>() + off, g.data<float>() + off, dx.data<float>() + off,
                                    n, s, zp, qmin, qmax, static_cast<float>(grad_factor), &ds[p],
                                    &dz[p]);
              return;
            }
            lsq_grad_run<T>(X.data<T>() + off, g.data<T>() + off, dx.data<T>() + off, n, s, zp, qmin,
                            qmax, static_cast<float>(grad_factor), ds[p], dz[p]);
          });
        });
        if (X.requires_grad()) gi[0] = dx;
        if (S.requires_grad()) {
          gi[1] = Tensor::empty(S.shape(), DType::Float32);
          for (std::int64_t p = 0; p < layout.num_params; ++p)
            gi[1].data<float>()[p] = static_cast<float>(ds[p]);
        }
        if (Z.requires_grad()) {
          gi[2] = Tensor::empty(Z.shape(), DType::Float32);
          for (std::int64_t p = 0; p < layout.num_params; ++p)
            gi[2].data<float>()[p] = static_cast<float>(dz[p]);
        }
      });
  return out;
}

// CUDA: the same op with kernels::cuda::lsq_forward / lsq_backward; `truncated_zero_point`
// picks the per-tensor op's backward zero point (see the ops below).
Tensor learnable_cuda(const Tensor& x, const Tensor& scale, const Tensor& zero_point,
                      const Layout& layout, std::int64_t qmin, std::int64_t qmax, double grad_factor,
                      bool truncated_zero_point, const char* name) {
  const kcuda::ParamLayout pl = param_layout(layout);
  Tensor out = Tensor::empty(x.shape(), x.dtype(), Device::CUDA);
  kcuda::lsq_forward(x.cuda_data<float>(), out.cuda_data<float>(), pl, scale.cuda_data<float>(),
                     zero_point.cuda_data<float>(), qmin, qmax);
  autograd::record(out, name, {x, scale, zero_point},
                   [pl, qmin, qmax, grad_factor, truncated_zero_point, name](
                       const Tensor& g, const Inputs& in, Grads& gi) {
                     const Tensor &X = in[0], &S = in[1], &Z = in[2];
                     common_device(name, {{"grad", &g}, {"x", &X}});
                     for (int k = 0; k < 3; ++k)
                       if (in[k].requires_grad())
                         gi[k] = Tensor::empty(in[k].shape(), DType::Float32, Device::CUDA);
                     kcuda::lsq_backward(X.cuda_data<float>(), g.cuda_data<float>(),
                                         cuda_ptr_or_null(gi[0]), pl, S.cuda_data<float>(),
                                         Z.cuda_data<float>(), truncated_zero_point, qmin, qmax,
                                         static_cast<float>(grad_factor), cuda_ptr_or_null(gi[1]),
                                         cuda_ptr_or_null(gi[2]));
                   });
  return out;
}

}  // namespace

Tensor fake_quantize_learnable_per_tensor_affine(const Tensor& x, const Tensor& scale,
                                                 const Tensor& zero_point, std::int64_t quant_min,
                                                 std::int64_t quant_max, double grad_factor) {
  constexpr const char* fn = "fake_quantize_learnable_per_tensor_affine";
  const Device device = common_device(fn, {{"x", &x}, {"scale", &scale}, {"zero_point", &zero_point}});
  require_learnable(x, scale, zero_point, 1, quant_min, quant_max, fn);
  if (device == Device::CUDA)
    return learnable_cuda(x, scale, zero_point, Layout::per_tensor(x.shape()), quant_min, quant_max,
                          grad_factor, /*truncated_zero_point=*/true, fn);
  // backward zero point: trunc(clamp(zp + 0.5)), PyTorch's _get_zero_point_from_tensor
  auto zp_backward = [](float zp, std::int64_t qmin, std::int64_t qmax) {
    const float c = std::clamp(zp + 0.5f, static_cast<float>(qmin), static_cast<float>(qmax));
    return static_cast<float>(static_cast<std::int64_t>(c));
  };
  return learnable_impl(x, scale, zero_point, Layout::per_tensor(x.shape()), quant_min, quant_max,
                        grad_factor, fn, zp_backward);
}

Tensor fake_quantize_learnable_per_channel_affine(const Tensor& x, const Tensor& scale,
                                                  const Tensor& zero_point, int axis,
                                                  std::int64_t quant_min, std::int64_t quant_max,
                                                  double grad_factor) {
  constexpr const char* fn = "fake_quantize_learnable_per_channel_affine";
  const Device device = common_device(fn, {{"x", &x}, {"scale", &scale}, {"zero_point", &zero_point}});
  require_float(x, fn, "x");
  const Layout layout = Layout::per_channel(x.shape(), x.shape().axis(axis, fn));
  require_learnable(x, scale, zero_point, layout.num_params, quant_min, quant_max, fn);
  if (device == Device::CUDA)
    return learnable_cuda(x, scale, zero_point, layout, quant_min, quant_max, grad_factor,
                          /*truncated_zero_point=*/false, fn);
  // backward zero point: clamp(round_half_even(zp)), PyTorch's _get_rounded_zero_point
  auto zp_backward = [](float zp, std::int64_t qmin, std::int64_t qmax) {
    return std::clamp(std::nearbyint(zp), static_cast<float>(qmin), static_cast<float>(qmax));
  };
  return learnable_impl(x, scale, zero_point, layout, quant_min, quant_max, grad_factor, fn,
                        zp_backward);
}

namespace {
// y = clamp(round(clamp(x, lo, amax) / s), qmin, qmax) * s, s = amax / qmax;  mask: lo <= x <= amax
template <class T>
void amax_run(const T* __restrict x, T* __restrict y, std::uint8_t* __restrict mask, std::int64_t n,
              float amax, bool is_signed, std::int64_t qmin, std::int64_t qmax) {
  const float scale = amax / static_cast<float>(qmax);
  const T inv = static_cast<T>(1.0f / scale), s = static_cast<T>(scale);
  const T hi_x = static_cast<T>(amax), lo_x = is_signed ? -hi_x : T(0);
  const T lo = static_cast<T>(qmin), hi = static_cast<T>(qmax);
  for (std::int64_t i = 0; i < n; ++i) {
    const T v = x[i];
    // bit 0: outside [lo, amax] or NaN (no dx); bit 1: x >= amax (+dy to damax); bit 2: x <= -amax
    mask[i] = static_cast<std::uint8_t>((!(v >= lo_x && v <= hi_x)) | ((v >= hi_x) << 1) |
                                        ((is_signed && v <= lo_x) << 2));
    T c = v > lo_x ? v : lo_x;
    c = c < hi_x ? c : hi_x;
    const T q = std::nearbyint(c * inv);
    const T qc = q > lo ? q : lo;
    y[i] = (qc < hi ? qc : hi) * s;
  }
}

// CUDA (float32, amax on the device, not read here): kernels::cuda::amax_forward / amax_backward.
Tensor learnable_amax_cuda(const Tensor& x, const Tensor& amax, const QuantSpec& spec,
                           const Layout& layout, const char* fn) {
  QAT_REQUIRE(x.dtype() == DType::Float32, fn, "not implemented on CUDA yet for ", dtype_name(x.dtype()),
              " (float32 only), x of shape ", x.shape());
  const kcuda::ParamLayout pl = param_layout(layout);
  Tensor out = Tensor::empty(x.shape(), x.dtype(), Device::CUDA);
  Tensor mask = Tensor::empty(x.shape(), DType::UInt8, Device::CUDA);
  kcuda::amax_forward(x.cuda_data<float>(), out.cuda_data<float>(), mask.cuda_data<std::uint8_t>(), pl,
                      amax.cuda_data<float>(), spec.is_signed, spec.quant_min(), spec.quant_max());
  autograd::record(out, fn, {x, amax}, [pl, mask, fn](const Tensor& g, const Inputs& in, Grads& gi) {
    common_device(fn, {{"grad", &g}, {"mask", &mask}});
    for (int k = 0; k < 2; ++k)
      if (in[k].requires_grad()) gi[k] = Tensor::empty(in[k].shape(), DType::Float32, Device::CUDA);
    kcuda::amax_backward(g.cuda_data<float>(), mask.cuda_data<std::uint8_t>(), cuda_ptr_or_null(gi[0]),
                         pl, cuda_ptr_or_null(gi[1]));
  });
  return out;
}

}  // namespace

Tensor fake_quantize_learnable_amax(const Tensor& x, const Tensor& amax, const QuantSpec& spec) {
  constexpr const char* fn = "fake_quantize_learnable_amax";
  const Device device = common_device(fn, {{"x", &x}, {"amax", &amax}});
  require_float(x, fn, "x");
  require_dtype(amax, DType::Float32, fn, "amax");
  spec.validate_for(x.shape(), fn);
  QAT_REQUIRE(spec.format == Format::Int && spec.symmetric && spec.granularity != Granularity::PerBlock,
              fn, "needs a symmetric integer per-tensor or per-channel spec, got ", spec.str());
  const Layout layout = Layout::of(spec, x.shape());
  QAT_REQUIRE(amax.numel() == layout.num_params, fn, "expected ", layout.num_params,
              " amax values, got shape ", amax.shape());
  if (device == Device::CUDA) return learnable_amax_cuda(x, amax, spec, layout, fn);
  for (std::int64_t p = 0; p < layout.num_params; ++p)
    QAT_REQUIRE(amax.data<float>()[p] > 0 && std::isfinite(amax.data<float>()[p]), fn,
                "amax must be positive and finite, got ", amax.data<float>()[p], " at index ", p);
  const std::int64_t qmin = spec.quant_min(), qmax = spec.quant_max();
  Tensor out = Tensor::empty(x.shape(), x.dtype());
  Tensor mask = Tensor::empty(x.shape(), DType::UInt8);
  qat::detail::dispatch_float(x.dtype(), fn, [&]<class T>() {
    layout.for_each_run([&](std::int64_t off, std::int64_t n, std::int64_t p) {
      if constexpr (std::is_same_v<T, float>) {
        kernels::amax_forward(x.data<T>() + off, out.data<T>() + off, mask.data<std::uint8_t>() + off, n,
                              amax.data<float>()[p], spec.is_signed, qmin, qmax);
        return;
      }
      amax_run<T>(x.data<T>() + off, out.data<T>() + off, mask.data<std::uint8_t>() + off, n,
                  amax.data<float>()[p], spec.is_signed, qmin, qmax);
    });
  });
  // dx = dy where lo <= x <= amax;  damax = sum(dy [x >= amax]) - sum(dy [x <= -amax])
  autograd::record(out, fn, {x, amax}, [layout, mask](const Tensor& g, const Inputs& in, Grads& gi) {
    Tensor dx = Tensor::empty(g.shape(), g.dtype());
    std::vector<double> da(layout.num_params, 0.0);
    qat::detail::dispatch_float(g.dtype(), "fake_quantize_learnable_amax_backward", [&]<class T>() {
      const std::uint8_t* m = mask.data<std::uint8_t>();
      layout.for_each_run([&](std::int64_t off, std::int64_t n, std::int64_t p) {
        const T* dy = g.data<T>() + off;
        T* d = dx.data<T>() + off;
        if constexpr (std::is_same_v<T, float>) {
          da[p] += kernels::amax_backward(dy, m + off, d, n);
          return;
        }
        double acc = 0;
        for (std::int64_t i = 0; i < n; ++i) {
          const std::uint8_t k = m[off + i];
          d[i] = (k & 1) ? T(0) : dy[i];
          if (k & 2) acc += dy[i];
          if (k & 4) acc -= dy[i];
        }
        da[p] += acc;
      });
    });
    if (in[0].requires_grad()) gi[0] = dx;
    if (in[1].requires_grad()) {
      gi[1] = Tensor::empty(in[1].shape(), DType::Float32);
      for (std::int64_t p = 0; p < layout.num_params; ++p)
        gi[1].data<float>()[p] = static_cast<float>(da[p]);
    }
  });
  return out;
}

}  // namespace qat::quant
