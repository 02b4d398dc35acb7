#include "framework/optim/adam.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "framework/kernels/cpu/optim.h"
#include "framework/kernels/cuda/kernels.h"
#include "framework/tensor/dispatch.h"
#include "framework/tensor/parallel.h"

namespace qat::optim {

Adam::Adam(NamedTensors params, const Options& o) : Adam(std::move(params), o, "Adam", false) {}

Adam::Adam(NamedTensors params, const Options& o, const char* fn, bool decoupled)
    : Optimizer(std::move(params), o.lr, fn), options_(o), decoupled_(decoupled) {
  for (int k = 0; k < 2; ++k)
    QAT_REQUIRE(o.betas[k] >= 0 && o.betas[k] < 1, fn, "betas[", k, "] must be in [0, 1), got ",
                o.betas[k]);
  QAT_REQUIRE(o.eps > 0, fn, "eps must be > 0, got ", o.eps);
  QAT_REQUIRE(o.weight_decay >= 0, fn, "weight_decay must be >= 0, got ", o.weight_decay);
}

AdamW::AdamW(NamedTensors params, const Options& o)
    : Adam(std::move(params), {o.lr, o.betas, o.eps, o.weight_decay, o.amsgrad}, "AdamW", true) {}

std::map<std::string, double> Adam::hyperparameters() const {
  return {{"lr", lr()},
          {"beta1", options_.betas[0]},
          {"beta2", options_.betas[1]},
          {"eps", options_.eps},
          {"weight_decay", options_.weight_decay},
          {"amsgrad", options_.amsgrad ? 1.0 : 0.0}};
}

std::vector<Optimizer::Slot> Adam::slots() const {
  std::vector<Slot> s{{"step", false}, {"exp_avg", true}, {"exp_avg_sq", true}};
  if (options_.amsgrad) s.push_back({"max_exp_avg_sq", true});
  return s;
}

namespace {
// The scalars at step count t, rounded to T.
template <class T>
kernels::AdamScalars<T> adam_scalars(const Adam::Options& o, double lr, bool decoupled, std::int64_t t) {
  const double beta1 = o.betas[0], beta2 = o.betas[1];
  const double bias_correction1 = 1 - std::pow(beta1, static_cast<double>(t));
  const double bias_correction2 = 1 - std::pow(beta2, static_cast<double>(t));
  return {
      .b1 = static_cast<T>(beta1),
      .b2 = static_cast<T>(beta2),
      .one_minus_b1 = static_cast<T>(1 - beta1),
      .one_minus_b2 = static_cast<T>(1 - beta2),
      .wd = static_cast<T>(o.weight_decay),
      .shrink = static_cast<T>(1 - lr * o.weight_decay),
      .bc2_sqrt = static_cast<T>(std::sqrt(bias_correction2)),
      .eps = static_cast<T>(o.eps),
      .neg_step_size = static_cast<T>(-(lr / bias_correction1)),
      .l2 = !decoupled && o.weight_decay != 0,
      .decoupled = decoupled,
  };
}
}  // namespace

// One fused pass (kernels::adam_step); scalars are rounded to T first and the operations happen
// in PyTorch's order (torch/optim/adam.py and adamw.py, _single_tensor_adam[w]), so float32
// results match it to the last bit or so (Kingma & Ba 2015; Loshchilov & Hutter 2019).
void Adam::update(Tensor& param, const Tensor& grad, std::vector<Tensor>& state) {
  if (!state[0].defined()) {
    state[0] = Tensor::zeros(Shape{}, DType::Int64);
    for (std::size_t s = 1; s < state.size(); ++s)
      state[s] = Tensor::zeros(param.shape(), param.dtype());
  }
  const std::int64_t t = ++*state[0].data<std::int64_t>();
  detail::dispatch_float(param.dtype(), decoupled_ ? "AdamW::step" : "Adam::step", [&]<class T>() {
    const kernels::AdamScalars<T> s = adam_scalars<T>(options_, lr(), decoupled_, t);
    T* p = param.data<T>();
    const T* g = grad.data<T>();
    T* m = state[1].data<T>();
    T* v = state[2].data<T>();
    T* v_max = options_.amsgrad ? state[3].data<T>() : nullptr;
    parallel_for(param.numel(), 1 << 16, [&](std::int64_t b, std::int64_t e) {
      kernels::adam_step(e - b, p + b, g + b, m + b, v + b, v_max ? v_max + b : nullptr, s);
    });
  });
}

// Every CUDA parameter in one launch per dtype (kernels::cuda::adam_step): m, v (and v_max) on
// the device, the step count on the host, so each parameter's bias corrections are its own.
void Adam::update_cuda(std::vector<CudaUpdate>& batch) {
  std::vector<kernels::cuda::StepTensor<float>> f32;
  std::vector<kernels::cuda::StepTensor<double>> f64;
  for (CudaUpdate& u : batch) {
    Tensor& p = *u.param;
    std::vector<Tensor>& state = *u.state;
    if (!state[0].defined()) {
      state[0] = Tensor::zeros(Shape{}, DType::Int64);
      for (std::size_t s = 1; s < state.size(); ++s)
        state[s] = Tensor::zeros(p.shape(), p.dtype(), Device::CUDA);
    }
    const std::int64_t t = ++*state[0].data<std::int64_t>();
    detail::dispatch_float(p.dtype(), decoupled_ ? "AdamW::step" : "Adam::step", [&]<class T>() {
      const kernels::AdamScalars<T> s = adam_scalars<T>(options_, lr(), decoupled_, t);
      kernels::cuda::StepTensor<T> st{p.cuda_data<T>(),
                                      u.grad.cuda_data<T>(),
                                      state[1].cuda_data<T>(),
                                      state[2].cuda_data<T>(),
                                      options_.amsgrad ? state[3].cuda_data<T>() : nullptr,
                                      p.numel(),
                                      false,
                                      s.neg_step_size,
                                      s.bc2_sqrt};
      if constexpr (std::is_same_v<T, float>)
        f32.push_back(st);
      else
        f64.push_back(st);
    });
  }
  // the shared scalars: those of step 1 (bc2_sqrt and neg_step_size come per tensor)
  if (!f32.empty()) kernels::cuda::adam_step(f32, adam_scalars<float>(options_, lr(), decoupled_, 1));
  if (!f64.empty()) kernels::cuda::adam_step(f64, adam_scalars<double>(options_, lr(), decoupled_, 1));
}

}  // namespace qat::optim
