// Fake quantization with fixed qparams and the straight-through estimator.
#include "modules/quant/fake_quant.h"

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <utility>
#include <vector>

#include "framework/autograd/node.h"
#include "framework/tensor/dispatch.h"
#include "framework/tensor/parallel.h"
#include "modules/quant/detail/fq_kernels.h"
#include "modules/quant/detail/layout.h"
#include "modules/quant/kernels/cpu/kernels.h"
#include "modules/quant/kernels/cuda/kernels.h"

namespace qat::quant {

namespace {
constexpr std::int64_t kParallelMin = 1 << 16;  // elements below which threads cost more than they save
}  // namespace

using detail::fq_run;
using detail::Layout;
using detail::ste_run;
using Grads = std::vector<Tensor>;
using Inputs = std::vector<Tensor>;

Shape param_shape(const QuantSpec& spec, const Shape& x) {
  switch (spec.granularity) {
    case Granularity::PerChannel:
      return Shape{x.at(spec.axis)};
    case Granularity::PerBlock: {
      Shape s = x;
      const int a = x.axis(spec.axis, "param_shape");
      s[a] = x[a] / spec.block_size;
      return s;
    }
    default:
      return Shape{1};
  }
}

namespace detail {

void fake_quant_f32(const float* x, float* y, std::uint8_t* mask_bits, const Layout& layout,
                    const float* scale, const std::int32_t* zero_point, std::int64_t qmin,
                    std::int64_t qmax) {
  if (!layout.blocked && layout.num_params > 1 && layout.inner < kShortRun) {
    // parameters along the row: expand them to the row's elements
    const std::int64_t cols = layout.len * layout.inner;
    std::vector<float> inv(cols), s(cols), z(cols);
    for (std::int64_t a = 0; a < layout.len; ++a)
      for (std::int64_t i = 0; i < layout.inner; ++i) {
        inv[a * layout.inner + i] = 1.0f / scale[a];
        s[a * layout.inner + i] = scale[a];
        z[a * layout.inner + i] = static_cast<float>(zero_point[a]);
      }
    kernels::fake_quant_rows(x, y, mask_bits, layout.outer, cols, inv.data(), s.data(), z.data(), qmin,
                             qmax);
    return;
  }
  if (!layout.blocked && layout.outer == 1 && layout.num_params > 1) {
    // runs of one parameter each, back to back (a weight's rows): chunks of runs per thread,
    // split on whole bytes of the mask (else on one thread)
    const std::int64_t n = layout.inner,
                       grain = n % 8 == 0 ? std::max<std::int64_t>(1, kParallelMin / n) : layout.len + 1;
    parallel_for(layout.len, grain, [&](std::int64_t b, std::int64_t e) {
      kernels::fake_quant_runs(x + b * n, y + b * n, mask_bits, b * n, e - b, n, scale + b,
                               zero_point + b, qmin, qmax);
    });
    return;
  }
  // runs one after another (a byte of the mask may hold bits of two runs)
  layout.for_each_run([&](std::int64_t off, std::int64_t n, std::int64_t p) {
    if (n < kShortRun) {  // the scalar loop gives the same bits without the vector setup
      std::uint8_t m[kShortRun];
      fq_run<float>(x + off, y + off, m, n, scale[p], zero_point[p], qmin, qmax);
      if (mask_bits != nullptr)
        for (std::int64_t i = off; i < off + n; ++i) {
          const auto bit = static_cast<std::uint8_t>(1u << (i & 7));
          mask_bits[i >> 3] = m[i - off] ? mask_bits[i >> 3] | bit : mask_bits[i >> 3] & ~bit;
        }
      return;
    }
    // each element alone: any split over threads gives the same bits; splits fall on whole
    // bytes of the mask (8 elements, after a head up to the first), so threads share none
    const std::int64_t head = std::min(n, (8 - (off & 7)) & 7);
    if (head > 0)
      kernels::fake_quant(x + off, y + off, mask_bits, off, head, scale[p], zero_point[p], qmin, qmax);
    parallel_for((n - head + 7) / 8, kParallelMin / 8, [&](std::int64_t b, std::int64_t e) {
      const std::int64_t from = off + head + 8 * b, to = std::min(off + n, off + head + 8 * e);
      kernels::fake_quant(x + from, y + from, mask_bits, from, to - from, scale[p], zero_point[p], qmin,
                          qmax);
    });
  });
}

void require_qparams(const float* scale, const std::int32_t* zero_point, std::int64_t n,
                     std::int64_t qmin, std::int64_t qmax, const char* name) {
  for (std::int64_t p = 0; p < n; ++p) {
    QAT_REQUIRE(scale[p] > 0 && std::isfinite(scale[p]), name, "scale must be positive and finite, got ",
                scale[p], " at index ", p);
    QAT_REQUIRE(qmin <= zero_point[p] && zero_point[p] <= qmax, name, "zero_point ", zero_point[p],
                " at index ", p, " is outside [", qmin, ", ", qmax, "]");
  }
}

void record_ste_bits(Tensor& out, const char* name, const Tensor& x, Tensor mask_bits) {
  autograd::record(
      out, name, {x}, [mask_bits = std::move(mask_bits)](const Tensor& g, const Inputs&, Grads& gi) {
        QAT_CHECK(mask_bits.numel() * 8 >= g.numel());
        const std::uint8_t* m = mask_bits.data<std::uint8_t>();
        if (g.dtype() != DType::Float32) {
          gi[0] = Tensor::empty(g.shape(), g.dtype());
          qat::detail::dispatch_float(g.dtype(), "fake_quantize backward", [&]<class T>() {
            for (std::int64_t i = 0; i < g.numel(); ++i)
              gi[0].data<T>()[i] = (m[i >> 3] >> (i & 7)) & 1 ? g.data<T>()[i] : T(0);
          });
          return;
        }
        // groups of 64 elements (8 bytes of the mask) per thread
        const auto split = [&](auto kernel) {
          parallel_for((g.numel() + 63) / 64, kParallelMin / 64, [&](std::int64_t b, std::int64_t e) {
            kernel(64 * b, std::min(g.numel(), 64 * e) - 64 * b);
          });
        };
        // nobody else sees g: zero its masked elements in place
        if (autograd::is_exclusive(g)) {
          gi[0] = g;
          split([&](std::int64_t b, std::int64_t n) {
            kernels::masked_zero_bits(g.data<float>() + b, m + b / 8, n);
          });
          return;
        }
        gi[0] = Tensor::empty(g.shape(), g.dtype());
        split([&](std::int64_t b, std::int64_t n) {
          kernels::masked_copy_bits(g.data<float>() + b, m + b / 8, gi[0].data<float>() + b, n);
        });
      });
}

void record_ste(Tensor& out, const char* name, const Tensor& x, Tensor mask) {
  if (mask.device() == Device::CUDA) {
    autograd::record(
        out, name, {x}, [mask = std::move(mask), name](const Tensor& g, const Inputs&, Grads& gi) {
          common_device(name, {{"grad", &g}, {"mask", &mask}});
          gi[0] = Tensor::empty(g.shape(), g.dtype(), Device::CUDA);
          quant::kernels::cuda::masked_copy(g.cuda_data<float>(), mask.cuda_data<std::uint8_t>(),
                                            gi[0].cuda_data<float>(), g.numel());
        });
    return;
  }
  autograd::record(out, name, {x},
                   [mask = std::move(mask), name](const Tensor& g, const Inputs&, Grads& gi) {
                     const std::uint8_t* m = mask.data<std::uint8_t>();
                     // float32 and nobody else sees g: zero its masked elements in place
                     if (g.dtype() == DType::Float32 && autograd::is_exclusive(g)) {
                       gi[0] = g;
                       parallel_for(g.numel(), kParallelMin, [&](std::int64_t b, std::int64_t e) {
                         kernels::masked_zero(g.data<float>() + b, m + b, e - b);
                       });
                       return;
                     }
                     gi[0] = Tensor::empty(g.shape(), g.dtype());
                     qat::detail::dispatch_float(g.dtype(), name, [&]<class T>() {
                       if constexpr (std::is_same_v<T, float>)
                         parallel_for(g.numel(), kParallelMin, [&](std::int64_t b, std::int64_t e) {
                           kernels::masked_copy(g.data<T>() + b, m + b, gi[0].data<T>() + b, e - b);
                         });
                       else
                         ste_run<T>(g.data<T>(), mask.data<std::uint8_t>(), gi[0].data<T>(), g.numel());
                     });
                   });
}

}  // namespace detail

namespace {

// CUDA: float32, per tensor (host qparams) or per channel / block (device qparams, not validated
// here: reading them would cost a host sync per call); the mask for the STE stays on the device.
Tensor fake_quantize_cuda(const Tensor& x, const quant::kernels::cuda::FqParams& params,
                          std::int64_t qmin, std::int64_t qmax, const char* name) {
  QAT_REQUIRE(x.dtype() == DType::Float32, name, "not implemented on CUDA yet for ",
              dtype_name(x.dtype()), " (float32 only), x of shape ", x.shape());
  QAT_REQUIRE(qmin < qmax, name, "quant_min (", qmin, ") must be below quant_max (", qmax, ")");
  Tensor out = Tensor::empty(x.shape(), x.dtype(), Device::CUDA);
  Tensor mask = Tensor::empty(x.shape(), DType::UInt8, Device::CUDA);
  quant::kernels::cuda::fake_quant(x.cuda_data<float>(), out.cuda_data<float>(),
                                   mask.cuda_data<std::uint8_t>(), x.numel(), params, qmin, qmax);
  detail::record_ste(out, name, x, std::move(mask));
  return out;
}

// Per-tensor / per-channel / per-block qparams as device arrays for the CUDA kernel.
quant::kernels::cuda::FqParams device_params(const Tensor& scale, const Tensor& zero_point,
                                             const Layout& layout) {
  quant::kernels::cuda::FqParams p;
  p.scale = scale.cuda_data<float>();
  p.zero_point = zero_point.cuda_data<std::int32_t>();
  p.len = layout.len;
  p.inner = layout.inner;
  p.block = layout.blocked ? layout.block : 0;
  return p;
}

Tensor fake_quantize_impl(const Tensor& x, const float* scale, const std::int32_t* zero_point,
                          const Layout& layout, std::int64_t qmin, std::int64_t qmax, const char* name) {
  require_float(x, name, "x");
  QAT_REQUIRE(qmin < qmax, name, "quant_min (", qmin, ") must be below quant_max (", qmax, ")");
  detail::require_qparams(scale, zero_point, layout.num_params, qmin, qmax, name);
  Tensor out = Tensor::empty(x.shape(), x.dtype());
  const bool grad = autograd::should_record(x);  // else no mask: nothing would read it
  if (x.dtype() == DType::Float32) {
    Tensor bits = grad ? Tensor::empty(Shape{(x.numel() + 7) / 8}, DType::UInt8) : Tensor();
    detail::fake_quant_f32(x.data<float>(), out.data<float>(),
                           grad ? bits.data<std::uint8_t>() : nullptr, layout, scale, zero_point, qmin,
                           qmax);
    detail::record_ste_bits(out, name, x, std::move(bits));
    return out;
  }
  Tensor mask = Tensor::empty(x.shape(), DType::UInt8);
  qat::detail::dispatch_float(x.dtype(), name, [&]<class T>() {
    const T* px = x.data<T>();
    T* py = out.data<T>();
    std::uint8_t* pm = mask.data<std::uint8_t>();
    layout.for_each_run([&](std::int64_t off, std::int64_t n, std::int64_t p) {
      fq_run<T>(px + off, py + off, pm + off, n, scale[p], zero_point[p], qmin, qmax);
    });
  });
  detail::record_ste(out, name, x, mask);
  return out;
}

void require_params(const Tensor& scale, const Tensor& zero_point, std::int64_t n, const char* fn) {
  require_dtype(scale, DType::Float32, fn, "scale");
  require_dtype(zero_point, DType::Int32, fn, "zero_point");
  QAT_REQUIRE(scale.numel() == n && zero_point.numel() == n, fn, "expected ", n,
              " scales and zero points, got scale ", scale.shape(), " and zero_point ",
              zero_point.shape());
}

}  // namespace

Tensor fake_quantize_per_tensor_affine(const Tensor& x, float scale, std::int64_t zero_point,
                                       std::int64_t quant_min, std::int64_t quant_max) {
  constexpr const char* fn = "fake_quantize_per_tensor_affine";
  require_float(x, fn, "x");
  // checked before narrowing to int32 (2^32 + 5 would pass as 5)
  QAT_REQUIRE(quant_min <= zero_point && zero_point <= quant_max, fn, "zero_point ", zero_point,
              " at index 0 is outside [", quant_min, ", ", quant_max, "]");
  const auto zp = static_cast<std::int32_t>(zero_point);
  if (x.device() == Device::CUDA) {
    QAT_REQUIRE(scale > 0 && std::isfinite(scale), fn, "scale must be positive and finite, got ", scale,
                " at index 0");
    quant::kernels::cuda::FqParams p;
    p.scale0 = scale;
    p.zp0 = zp;
    p.inner = x.numel();
    return fake_quantize_cuda(x, p, quant_min, quant_max, fn);
  }
  return fake_quantize_impl(x, &scale, &zp, Layout::per_tensor(x.shape()), quant_min, quant_max, fn);
}

Tensor fake_quantize_per_channel_affine(const Tensor& x, const Tensor& scale, const Tensor& zero_point,
                                        int axis, std::int64_t quant_min, std::int64_t quant_max) {
  constexpr const char* fn = "fake_quantize_per_channel_affine";
  require_float(x, fn, "x");
  const Layout layout = Layout::per_channel(x.shape(), x.shape().axis(axis, fn));
  require_params(scale, zero_point, layout.num_params, fn);
  if (common_device(fn, {{"x", &x}, {"scale", &scale}, {"zero_point", &zero_point}}) == Device::CUDA)
    return fake_quantize_cuda(x, device_params(scale, zero_point, layout), quant_min, quant_max, fn);
  return fake_quantize_impl(x, scale.data<float>(), zero_point.data<std::int32_t>(), layout, quant_min,
                            quant_max, fn);
}

Tensor fake_quantize(const Tensor& x, const QParams& qparams, const QuantSpec& spec) {
  constexpr const char* fn = "fake_quantize";
  require_float(x, fn, "x");
  spec.validate_for(x.shape(), fn);
  QAT_REQUIRE(spec.format == Format::Int, fn, "spec ", spec.str(),
              " is not an integer format; "
              "use fake_quantize_fp8");
  const Layout layout = Layout::of(spec, x.shape());
  require_params(qparams.scale, qparams.zero_point, layout.num_params, fn);
  if (common_device(fn, {{"x", &x}, {"scale", &qparams.scale}, {"zero_point", &qparams.zero_point}}) ==
      Device::CUDA)
    return fake_quantize_cuda(x, device_params(qparams.scale, qparams.zero_point, layout),
                              spec.quant_min(), spec.quant_max(), fn);
  return fake_quantize_impl(x, qparams.scale.data<float>(), qparams.zero_point.data<std::int32_t>(),
                            layout, spec.quant_min(), spec.quant_max(), fn);
}

}  // namespace qat::quant
