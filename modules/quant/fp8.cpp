// FP8 fake quantization (E4M3 / E5M2, Micikevicius et al. 2022): round to the nearest FP8 value
// with ties to even, saturating at +-max, with a straight-through gradient inside the range.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>

#include "framework/autograd/node.h"
#include "framework/tensor/dispatch.h"
#include "modules/quant/detail/float_round.h"
#include "modules/quant/detail/fq_kernels.h"
#include "modules/quant/detail/layout.h"
#include "modules/quant/fake_quant.h"
#include "modules/quant/kernels/cpu/kernels.h"
#include "modules/quant/kernels/cuda/kernels.h"

namespace qat::quant {

using detail::Layout;
using Grads = std::vector<Tensor>;
using Inputs = std::vector<Tensor>;

namespace {

using Fp8Format = ElementFormat;

Fp8Format fp8_format(Format f) { return element_format(f); }

template <class T>
T round_fp8(T v, const Fp8Format& f) {
  return detail::round_element(v, f);
}

// CUDA: float32, per tensor or per channel, scale on the device (not read here: a host sync per
// call); bit-exact with the CPU (the rounding is kernels/cuda/fp8_math.h on both).
Tensor fp8_cuda(const Tensor& x, const Tensor& scale, const QuantSpec& spec, const Layout& layout,
                const char* fn) {
  QAT_REQUIRE(x.dtype() == DType::Float32, fn, "not implemented on CUDA yet for ", dtype_name(x.dtype()),
              " (float32 only), x of shape ", x.shape());
  QAT_REQUIRE(!layout.blocked, fn, "per-block FP8 fake quantization is not implemented on CUDA yet");
  const Fp8Format f = fp8_format(spec.format);
  Tensor out = Tensor::empty(x.shape(), x.dtype(), Device::CUDA);
  Tensor mask = Tensor::empty(x.shape(), DType::UInt8, Device::CUDA);
  kernels::cuda::fp8_fake_quant(x.cuda_data<float>(), out.cuda_data<float>(),
                                mask.cuda_data<std::uint8_t>(), {layout.outer, layout.len, layout.inner},
                                scale.cuda_data<float>(), f.mantissa_bits, f.min_exponent,
                                static_cast<float>(f.max));
  detail::record_ste(out, fn, x, std::move(mask));
  return out;
}

}  // namespace

float round_to_fp8(float v, Format format) {
  QAT_REQUIRE(format == Format::FP8_E4M3 || format == Format::FP8_E5M2, "round_to_fp8",
              "format must be FP8_E4M3 or FP8_E5M2");
  return round_fp8(v, fp8_format(format));
}

// y = round_fp8(x / s) * s;  dx = dy [|x / s| <= max]
Tensor fake_quantize_fp8(const Tensor& x, const Tensor& scale, const QuantSpec& spec) {
  constexpr const char* fn = "fake_quantize_fp8";
  const Device device = common_device(fn, {{"x", &x}, {"scale", &scale}});
  require_float(x, fn, "x");
  require_dtype(scale, DType::Float32, fn, "scale");
  spec.validate_for(x.shape(), fn);
  QAT_REQUIRE(spec.is_fp8(), fn, "spec ", spec.str(),
              spec.is_microscaled() ? " has data-driven block scales: use fake_quantize_mx"
                                    : " is not an FP8 format");
  const Layout layout = Layout::of(spec, x.shape());
  QAT_REQUIRE(scale.numel() == layout.num_params, fn, "expected ", layout.num_params,
              " scales, got shape ", scale.shape());
  if (device == Device::CUDA) return fp8_cuda(x, scale, spec, layout, fn);
  for (std::int64_t p = 0; p < layout.num_params; ++p)
    QAT_REQUIRE(scale.data<float>()[p] > 0 && std::isfinite(scale.data<float>()[p]), fn,
                "scale must be positive and finite, got ", scale.data<float>()[p], " at index ", p);
  const Fp8Format f = fp8_format(spec.format);
  Tensor out = Tensor::empty(x.shape(), x.dtype());
  Tensor mask = Tensor::empty(x.shape(), DType::UInt8);
  qat::detail::dispatch_float(x.dtype(), fn, [&]<class T>() {
    layout.for_each_run([&](std::int64_t off, std::int64_t n, std::int64_t p) {
      if constexpr (std::is_same_v<T, float>) {
        kernels::fp8_fake_quant(x.data<float>() + off, out.data<float>() + off,
                                mask.data<std::uint8_t>() + off, n, scale.data<float>()[p],
                                f.mantissa_bits, f.min_exponent, static_cast<float>(f.max));
        return;
      }
      const T s = static_cast<T>(scale.data<float>()[p]), max = static_cast<T>(f.max);
      const T* px = x.data<T>() + off;
      T* py = out.data<T>() + off;
      std::uint8_t* pm = mask.data<std::uint8_t>() + off;
      for (std::int64_t i = 0; i < n; ++i) {
        const T v = px[i] / s;
        pm[i] = static_cast<std::uint8_t>(std::fabs(v) <= max);
        py[i] = round_fp8(v, f) * s;
      }
    });
  });
  detail::record_ste(out, fn, x, mask);
  return out;
}

}  // namespace qat::quant
