#include "modules/quant/fused_observer.h"

#include <algorithm>
#include <limits>

#include "framework/autograd/node.h"
#include "modules/quant/fake_quant.h"
#include "modules/quant/kernels/cpu/kernels.h"
#include "modules/quant/kernels/cuda/kernels.h"
#include "modules/quant/qparams.h"

namespace qat::quant {

namespace {
constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr const char* kFn = "fused_moving_avg_obs_fake_quant";

// a + c (b - a) in float32, not contracted (the observer's moving_average)
float moving_average(float a, float b, float c) {
  const volatile float step = c * (b - a);
  return a + step;
}
}  // namespace

FusedObserverState FusedObserverState::make(Device device) {
  return {Tensor::full(Shape{1}, kInf, DType::Float32, device),
          Tensor::full(Shape{1}, -kInf, DType::Float32, device),
          Tensor::ones(Shape{1}, DType::Float32, device), Tensor::zeros(Shape{1}, DType::Int32, device),
          Tensor::zeros(Shape{1}, DType::Int32, device)};
}

Tensor fused_moving_avg_obs_fake_quant(const Tensor& x, FusedObserverState& st, const QuantSpec& spec,
                                       double averaging_constant, bool observer_on, bool fake_quant_on) {
  require_dtype(x, DType::Float32, kFn, "x");
  spec.validate();
  QAT_REQUIRE(spec.format == Format::Int && spec.granularity == Granularity::PerTensor, kFn,
              "spec must be an integer per-tensor format, got ", spec.str());
  QAT_REQUIRE(averaging_constant > 0 && averaging_constant <= 1, kFn,
              "averaging_constant must be in (0, 1], got ", averaging_constant);
  require_dtype(st.running_min, DType::Float32, kFn, "running_min");
  require_dtype(st.running_max, DType::Float32, kFn, "running_max");
  require_dtype(st.scale, DType::Float32, kFn, "scale");
  require_dtype(st.zero_point, DType::Int32, kFn, "zero_point");
  require_dtype(st.nonfinite_batches, DType::Int32, kFn, "nonfinite_batches");
  const Device device = common_device(kFn, {{"x", &x},
                                            {"running_min", &st.running_min},
                                            {"running_max", &st.running_max},
                                            {"scale", &st.scale},
                                            {"zero_point", &st.zero_point},
                                            {"nonfinite_batches", &st.nonfinite_batches}});
  const auto c = static_cast<float>(averaging_constant);
  if (device == Device::CUDA) {
    kernels::cuda::FusedObserverArgs a{
        st.running_min.cuda_data<float>(),
        st.running_max.cuda_data<float>(),
        st.scale.cuda_data<float>(),
        st.zero_point.cuda_data<std::int32_t>(),
        st.nonfinite_batches.cuda_data<std::int32_t>(),
        c,
        spec.quant_min(),
        spec.quant_max(),
        spec.symmetric,
        static_cast<std::int32_t>(spec.symmetric ? spec.symmetric_zero_point() : 0),
        observer_on,
        fake_quant_on,
        nullptr,
        nullptr};
    Tensor out = Tensor::empty(x.shape(), x.dtype(), Device::CUDA);
    Tensor mask = Tensor::empty(x.shape(), DType::UInt8, Device::CUDA);
    kernels::cuda::fused_moving_avg_obs_fake_quant(x.cuda_data<float>(), out.cuda_data<float>(),
                                                   mask.cuda_data<std::uint8_t>(), x.numel(), a);
    autograd::record(out, kFn, {x},
                     [mask](const Tensor& g, const std::vector<Tensor>&, std::vector<Tensor>& gi) {
                       gi[0] = Tensor::empty(g.shape(), g.dtype(), Device::CUDA);
                       kernels::cuda::masked_copy(g.cuda_data<float>(), mask.cuda_data<std::uint8_t>(),
                                                  gi[0].cuda_data<float>(), g.numel());
                     });
    return out;
  }
  if (observer_on && x.numel() > 0) {
    float bmin, bmax;
    bool bad = false;
    kernels::min_max(x.data<float>(), x.numel(), &bmin, &bmax, &bad);
    if (bad) {
      ++st.nonfinite_batches.data<std::int32_t>()[0];
    } else {
      float& mn = st.running_min.data<float>()[0];
      float& mx = st.running_max.data<float>()[0];
      if (mn == kInf && mx == -kInf) {
        mn = bmin, mx = bmax;
      } else {
        mn = moving_average(mn, bmin, c);
        mx = moving_average(mx, bmax, c);
      }
      calculate_qparams(&mn, &mx, 1, spec, st.scale.data<float>(), st.zero_point.data<std::int32_t>());
    }
  }
  if (!fake_quant_on) return x;
  return fake_quantize_per_tensor_affine(x, st.scale.data<float>()[0],
                                         st.zero_point.data<std::int32_t>()[0], spec.quant_min(),
                                         spec.quant_max());
}

}  // namespace qat::quant
