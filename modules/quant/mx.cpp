// Microscaling fake quantization with a straight-through gradient.
//  OCP MX v1.0 (section 6.3, Algorithm 1): per block of k elements, X = 2^(floor(log2 amax) -
//  emax_elem) as E8M0 (clamped to 2^-127; a block holding NaN or inf gets the NaN scale, so all
//  of it is NaN, as Microsoft's microxcaling reference does), P_i = the element format's value
//  nearest V_i / X, ties to even, saturating at its largest normal.
//  NVFP4 (torchao prototype/mx_formats/nvfp4_tensor.py, nvfp4_quantize with a per-tensor scale):
//  per_tensor_scale = amax / (448 * 6); per block of 16, s = per_tensor_scale *
//  e4m3(clamp(block_amax / 6 / per_tensor_scale, 2^-6, 448)), P_i = e2m1(V_i / s), y = P_i s.
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "framework/autograd/node.h"
#include "framework/tensor/dispatch.h"
#include "modules/quant/detail/float_round.h"
#include "modules/quant/detail/fq_kernels.h"
#include "modules/quant/fake_quant.h"
#include "modules/quant/kernels/cpu/kernels.h"

namespace qat::quant {

using Grads = std::vector<Tensor>;
using Inputs = std::vector<Tensor>;

namespace {

// The scalar reference for float64 inputs (float32 runs the kernels, which follow the same steps).
template <class T>
void mx_row(const T* x, T* y, std::uint8_t* m, std::int64_t n, const QuantSpec& spec, float pts) {
  const ElementFormat f =
      element_format(spec.scale_format == ScaleFormat::E4M3 ? Format::FP4_E2M1 : spec.format);
  for (std::int64_t b0 = 0; b0 < n; b0 += spec.block_size) {
    const std::int64_t len = std::min(spec.block_size, n - b0);
    T amax = 0;
    bool bad = false;
    for (std::int64_t i = b0; i < b0 + len; ++i) {
      const T a = std::fabs(x[i]);
      bad = bad || !(a < std::numeric_limits<T>::infinity());
      amax = std::max(amax, a);
    }
    T in = 1, out = 1;  // v = x * in (MX) or x / in (NVFP4); y = round(v) * out
    if (spec.scale_format == ScaleFormat::E8M0) {
      int e = 0;
      std::frexp(amax, &e);  // floor(log2 amax) = e - 1
      const int shared = amax > 0 ? std::max(e - 1 - f.emax, -127) : -127;
      bad = bad || shared > 127;  // beyond E8M0: the NaN scale
      in = std::ldexp(T(1), -shared);
      out = std::ldexp(T(1), shared);
    } else {
      in = out = kernels::nvfp4_block_scale(static_cast<float>(amax), pts);  // float32, as torchao
    }
    for (std::int64_t i = b0; i < b0 + len; ++i) {
      const T v = spec.scale_format == ScaleFormat::E8M0 ? x[i] * in : x[i] / in;
      m[i] = !bad && std::fabs(v) <= static_cast<T>(f.max);
      y[i] = bad ? std::numeric_limits<T>::quiet_NaN() : detail::round_element(v, f) * out;
    }
  }
}

}  // namespace

float round_to_element(float v, Format format) {
  return detail::round_element(v, element_format(format));
}

// max(amax / (448 * 6), FLT_MIN) over the finite values
float nvfp4_per_tensor_scale(const Tensor& x) {
  constexpr const char* fn = "nvfp4_per_tensor_scale";
  require_float(x, fn, "x");
  double amax = 0;
  bool bad = true;
  if (x.dtype() == DType::Float32 && x.numel() > 0) {  // one vectorised pass when all is finite
    float mn = 0, mx = 0;
    bad = false;
    kernels::min_max(x.data<float>(), x.numel(), &mn, &mx, &bad);
    amax = std::max(-static_cast<double>(mn), static_cast<double>(mx));
  }
  if (bad) {
    amax = 0;
    qat::detail::dispatch_float(x.dtype(), fn, [&]<class T>() {
      const T* p = x.data<T>();
      for (std::int64_t i = 0; i < x.numel(); ++i)
        if (std::isfinite(p[i])) amax = std::max(amax, static_cast<double>(std::fabs(p[i])));
    });
  }
  return std::max(static_cast<float>(amax) / (448.0f * 6.0f), FLT_MIN);
}

// y = mx(x), dx = dy [|v| <= element max] (v = x in units of the block scale)
Tensor fake_quantize_mx(const Tensor& x, const QuantSpec& spec, float per_tensor_scale) {
  constexpr const char* fn = "fake_quantize_mx";
  require_float(x, fn, "x");
  spec.validate_for(x.shape(), fn);
  QAT_REQUIRE(spec.is_microscaled(), fn, "spec ", spec.str(),
              " has no E8M0 (MX) or E4M3 (NVFP4) block scales");
  const bool nv = spec.scale_format == ScaleFormat::E4M3;
  QAT_REQUIRE(
      !nv || per_tensor_scale == 0 || (per_tensor_scale >= FLT_MIN && std::isfinite(per_tensor_scale)),
      fn, "per_tensor_scale must be 0 (from x) or a positive normal float, got ", per_tensor_scale);
  if (nv && per_tensor_scale == 0) per_tensor_scale = nvfp4_per_tensor_scale(x);
  const int a = x.shape().axis(spec.axis, fn);
  std::int64_t rows = 1;
  for (int d = 0; d < a; ++d) rows *= x.shape()[d];
  const std::int64_t row_len = rows == 0 ? 0 : x.numel() / rows;
  const ElementFormat f = element_format(nv ? Format::FP4_E2M1 : spec.format);
  Tensor out = Tensor::empty(x.shape(), x.dtype());
  Tensor mask = Tensor::empty(x.shape(), DType::UInt8);
  qat::detail::dispatch_float(x.dtype(), fn, [&]<class T>() {
    for (std::int64_t r = 0; r < rows; ++r) {
      const std::int64_t off = r * row_len;
      const T* px = x.data<T>() + off;
      T* py = out.data<T>() + off;
      std::uint8_t* pm = mask.data<std::uint8_t>() + off;
      if constexpr (std::is_same_v<T, float>) {
        if (nv)
          kernels::nvfp4_fake_quant(px, py, pm, row_len, spec.block_size, per_tensor_scale);
        else
          kernels::mx_fake_quant(px, py, pm, row_len, spec.block_size, f.mantissa_bits, f.min_exponent,
                                 static_cast<float>(f.max), f.emax);
      } else {
        mx_row(px, py, pm, row_len, spec, per_tensor_scale);
      }
    }
  });
  detail::record_ste(out, fn, x, mask);
  return out;
}

}  // namespace qat::quant
