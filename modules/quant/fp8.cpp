// FP8 fake quantization (E4M3 / E5M2, Micikevicius et al. 2022): round to the nearest FP8 value
// with ties to even, saturating at +-max, with a straight-through gradient inside the range.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "framework/autograd/node.h"
#include "framework/tensor/dispatch.h"
#include "modules/quant/detail/layout.h"
#include "modules/quant/fake_quant.h"
#include "modules/quant/kernels/cpu/kernels.h"

namespace qat::quant {

using detail::Layout;
using Grads = std::vector<Tensor>;
using Inputs = std::vector<Tensor>;

namespace {

struct Fp8Format {
  int mantissa_bits;  // 3 (E4M3), 2 (E5M2)
  int min_exponent;   // exponent of the smallest normal: -6 (E4M3), -14 (E5M2)
  double max;         // 448 (E4M3), 57344 (E5M2)
};

Fp8Format fp8_format(Format f) {
  return f == Format::FP8_E4M3 ? Fp8Format{3, -6, 448.0} : Fp8Format{2, -14, 57344.0};
}

// Values are spaced 2^(e - m) in the binade [2^e, 2^(e+1)) and 2^(emin - m) below 2^emin
// (subnormals); the spacing is a power of two, so v / step and r * step are exact.
template <class T>
T round_fp8(T v, const Fp8Format& f);

// float32: the binade exponent comes from the bit pattern (kernels::fp8_fake_quant vectorises
// the same steps).
template <>
float round_fp8<float>(float v, const Fp8Format& f) {
  const float a = std::fabs(v);
  std::uint32_t bits;
  std::memcpy(&bits, &a, sizeof bits);
  const int e = std::max(static_cast<int>(bits >> 23) - 127, f.min_exponent);  // floor(log2 a)
  const int k = f.mantissa_bits - e;                                           // 1/step = 2^k
  const std::uint32_t up_bits = static_cast<std::uint32_t>(127 + k) << 23;
  const std::uint32_t down_bits = static_cast<std::uint32_t>(127 - k) << 23;
  float up, down;
  std::memcpy(&up, &up_bits, sizeof up);
  std::memcpy(&down, &down_bits, sizeof down);
  const float max = static_cast<float>(f.max);
  float r = std::nearbyint(a * up) * down;
  r = r < max ? r : max;  // saturate (also +inf)
  r = a != a ? a : r;     // NaN stays NaN
  return std::copysign(r, v);
}

template <class T>
T round_fp8(T v, const Fp8Format& f) {
  if (std::isnan(v)) return v;
  const T a = std::fabs(v);
  if (a >= static_cast<T>(f.max)) return std::copysign(static_cast<T>(f.max), v);
  int e = 0;
  std::frexp(a, &e);  // a = m 2^e with m in [0.5, 1): the binade is [2^(e-1), 2^e)
  const int exponent = std::max(e - 1, f.min_exponent);
  const T step = std::ldexp(T(1), exponent - f.mantissa_bits);
  const T r = std::fmin(std::nearbyint(a / step) * step, static_cast<T>(f.max));
  return std::copysign(r, v);
}

}  // namespace

float round_to_fp8(float v, Format format) {
  QAT_REQUIRE(format != Format::Int, "round_to_fp8", "format must be FP8_E4M3 or FP8_E5M2");
  return round_fp8(v, fp8_format(format));
}

// y = round_fp8(x / s) * s;  dx = dy [|x / s| <= max]
Tensor fake_quantize_fp8(const Tensor& x, const Tensor& scale, const QuantSpec& spec) {
  constexpr const char* fn = "fake_quantize_fp8";
  require_float(x, fn, "x");
  require_dtype(scale, DType::Float32, fn, "scale");
  spec.validate_for(x.shape(), fn);
  QAT_REQUIRE(spec.is_float(), fn, "spec ", spec.str(), " is not an FP8 format");
  const Layout layout = Layout::of(spec, x.shape());
  QAT_REQUIRE(scale.numel() == layout.num_params, fn, "expected ", layout.num_params,
              " scales, got shape ", scale.shape());
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
  autograd::record(out, fn, {x}, [mask](const Tensor& g, const Inputs&, Grads& gi) {
    gi[0] = Tensor::empty(g.shape(), g.dtype());
    qat::detail::dispatch_float(g.dtype(), "fake_quantize_fp8_backward", [&]<class T>() {
      const std::uint8_t* m = mask.data<std::uint8_t>();
      const T* dy = g.data<T>();
      T* dx = gi[0].data<T>();
      if constexpr (std::is_same_v<T, float>) {
        kernels::masked_copy(dy, m, dx, g.numel());
        return;
      }
      for (std::int64_t i = 0; i < g.numel(); ++i) dx[i] = m[i] ? dy[i] : T(0);
    });
  });
  return out;
}

}  // namespace qat::quant
