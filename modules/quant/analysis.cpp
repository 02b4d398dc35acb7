// The measures use xtensor adaptors over the tensors' buffers (no copies).
#include "modules/quant/analysis.h"

#include <cmath>
#include <limits>
#include <xtensor/xadapt.hpp>
#include <xtensor/xarray.hpp>
#include <xtensor/xmath.hpp>
#include <xtensor/xreducer.hpp>

#include "framework/autograd/grad_mode.h"
#include "framework/tensor/dispatch.h"
#include "modules/quant/detail/layout.h"
#include "modules/quant/fake_quant.h"

namespace qat::quant {

namespace {
auto flat(const Tensor& t) {
  return xt::adapt(t.data<float>(), static_cast<std::size_t>(t.numel()), xt::no_ownership(),
                   std::vector<std::size_t>{static_cast<std::size_t>(t.numel())});
}

void require_params(const Tensor& x, const QParams& q, const QuantSpec& spec, const char* fn) {
  spec.validate_for(x.shape(), fn);
  QAT_REQUIRE(spec.format == Format::Int, fn, "needs an integer spec, got ", spec.str());
  const std::int64_t n = detail::Layout::of(spec, x.shape()).num_params;
  require_dtype(q.scale, DType::Float32, fn, "scale");
  require_dtype(q.zero_point, DType::Int32, fn, "zero_point");
  QAT_REQUIRE(q.scale.numel() == n && q.zero_point.numel() == n, fn, "expected ", n,
              " scales and zero points for ", spec.str(), " on ", x.shape(), ", got ", q.scale.shape());
}
}  // namespace

DType storage_dtype(const QuantSpec& spec) {
  QAT_REQUIRE(spec.format == Format::Int, "storage_dtype", "needs an integer spec, got ", spec.str());
  if (spec.bits <= 8) return spec.is_signed ? DType::Int8 : DType::UInt8;
  return spec.is_signed ? DType::Int16 : DType::Int32;
}

Tensor quantize(const Tensor& x, const QParams& q, const QuantSpec& spec) {
  require_dtype(x, DType::Float32, "quantize", "x");
  require_params(x, q, spec, "quantize");
  Tensor out = Tensor::empty(x.shape(), storage_dtype(spec));
  const float lo = static_cast<float>(spec.quant_min()), hi = static_cast<float>(spec.quant_max());
  const float* px = x.data<float>();
  qat::detail::dispatch_any(out.dtype(), [&]<class I>() {
    I* po = out.data<I>();
    detail::Layout::of(spec, x.shape())
        .for_each_run([&](std::int64_t off, std::int64_t n, std::int64_t p) {
          const float inv = 1.0f / q.scale.data<float>()[p];
          const auto zp = static_cast<float>(q.zero_point.data<std::int32_t>()[p]);
          for (std::int64_t i = off; i < off + n; ++i) {
            const float v = std::nearbyint(px[i] * inv) + zp;
            po[i] = static_cast<I>(v > lo ? (v < hi ? v : hi) : lo);  // NaN -> qmin, as fake_quantize
          }
        });
  });
  if (spec.granularity == Granularity::PerTensor && out.dtype() != DType::Int16)
    out.set_quant_info({q.scale.data<float>()[0], q.zero_point.data<std::int32_t>()[0]});
  return out;
}

Tensor dequantize(const Tensor& qt, const QParams& q, const QuantSpec& spec) {
  QAT_REQUIRE(qt.defined() && qt.dtype() == storage_dtype(spec), "dequantize", "expected ",
              dtype_name(storage_dtype(spec)), " codes for ", spec.str(), ", got ",
              qt.defined() ? dtype_name(qt.dtype()) : "undefined");
  require_params(qt, q, spec, "dequantize");
  Tensor out = Tensor::empty(qt.shape(), DType::Float32);
  float* po = out.data<float>();
  qat::detail::dispatch_any(qt.dtype(), [&]<class I>() {
    const I* pq = qt.data<I>();
    detail::Layout::of(spec, qt.shape())
        .for_each_run([&](std::int64_t off, std::int64_t n, std::int64_t p) {
          const float s = q.scale.data<float>()[p];
          const std::int32_t zp = q.zero_point.data<std::int32_t>()[p];
          for (std::int64_t i = off; i < off + n; ++i)
            po[i] = static_cast<float>(static_cast<std::int32_t>(pq[i]) - zp) * s;
        });
  });
  return out;
}

double quantization_mse(const Tensor& x, const QParams& q, const QuantSpec& spec) {
  require_dtype(x, DType::Float32, "quantization_mse", "x");
  QAT_REQUIRE(x.numel() > 0, "quantization_mse", "empty input");
  NoGradGuard no_grad;
  const Tensor xq = fake_quantize(x, q, spec);
  const auto a = flat(x), b = flat(xq);
  return xt::mean(xt::square(xt::cast<double>(a) - xt::cast<double>(b)))();
}

double sqnr_db(const Tensor& x, const Tensor& xq) {
  require_dtype(x, DType::Float32, "sqnr_db", "x");
  require_dtype(xq, DType::Float32, "sqnr_db", "x_quantized");
  QAT_REQUIRE(x.shape() == xq.shape(), "sqnr_db", "shapes ", x.shape(), " and ", xq.shape(), " differ");
  const auto a = xt::cast<double>(flat(x)), b = xt::cast<double>(flat(xq));
  const double signal = xt::sum(xt::square(a))(), noise = xt::sum(xt::square(a - b))();
  if (noise == 0) return std::numeric_limits<double>::infinity();
  return 10.0 * std::log10(signal / noise);
}

double error_bound(const QParams& q) {
  require_dtype(q.scale, DType::Float32, "error_bound", "scale");
  QAT_REQUIRE(q.scale.numel() > 0, "error_bound", "no scales");
  return static_cast<double>(xt::amax(flat(q.scale))()) / 2.0;
}

double compression_ratio(const QuantSpec& spec, const Shape& shape) {
  spec.validate_for(shape, "compression_ratio");
  const auto n = static_cast<double>(shape.numel());
  const auto params = static_cast<double>(detail::Layout::of(spec, shape).num_params);
  double param_bits = params * (spec.symmetric ? 32.0 : 64.0);  // float32 scale (+ int32 zero point)
  if (spec.granularity == Granularity::PerBlock && spec.block_scale_bits > 0)
    param_bits = params * spec.block_scale_bits + 32.0;  // integer block scales + one float scale
  return n * 32.0 / (n * spec.bits + param_bits);
}

}  // namespace qat::quant
