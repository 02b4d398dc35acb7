#include "framework/optim/sgd.h"

#include <cstdint>
#include <type_traits>

#include "framework/kernels/cpu/optim.h"
#include "framework/kernels/cuda/kernels.h"
#include "framework/tensor/dispatch.h"
#include "framework/tensor/parallel.h"

namespace qat::optim {
namespace {
// scalars rounded to T first, PyTorch's order of operations (torch/optim/sgd.py,
// _single_tensor_sgd), so float32 results match it to the last bit or so
template <class T>
kernels::SgdScalars<T> scalars(const SGD::Options& o, double lr, bool first) {
  return {.wd = static_cast<T>(o.weight_decay),
          .momentum = static_cast<T>(o.momentum),
          .keep = static_cast<T>(1.0 - o.dampening),
          .neg_lr = static_cast<T>(-lr),
          .decay = o.weight_decay != 0,
          .first = first,
          .nesterov = o.nesterov};
}
}  // namespace

SGD::SGD(NamedTensors params, const Options& o)
    : Optimizer(std::move(params), o.lr, "SGD"), options_(o) {
  QAT_REQUIRE(o.momentum >= 0, "SGD", "momentum must be >= 0, got ", o.momentum);
  QAT_REQUIRE(o.weight_decay >= 0, "SGD", "weight_decay must be >= 0, got ", o.weight_decay);
  QAT_REQUIRE(!o.nesterov || (o.momentum > 0 && o.dampening == 0), "SGD",
              "nesterov requires momentum > 0 and dampening == 0, got momentum ", o.momentum,
              " and dampening ", o.dampening);
}

std::map<std::string, double> SGD::hyperparameters() const {
  return {{"lr", lr()},
          {"momentum", options_.momentum},
          {"dampening", options_.dampening},
          {"weight_decay", options_.weight_decay},
          {"nesterov", options_.nesterov ? 1.0 : 0.0}};
}

std::vector<Optimizer::Slot> SGD::slots() const {
  if (options_.momentum == 0) return {};
  return {{"momentum_buffer", true}};
}

void SGD::update(Tensor& param, const Tensor& grad, std::vector<Tensor>& state) {
  const bool use_momentum = options_.momentum != 0;
  const bool first = use_momentum && !state[0].defined();
  if (first) state[0] = Tensor::empty(param.shape(), param.dtype());
  detail::dispatch_float(param.dtype(), "SGD::step", [&]<class T>() {
    T* p = param.data<T>();
    const T* g = grad.data<T>();
    T* buf = use_momentum ? state[0].data<T>() : nullptr;
    const kernels::SgdScalars<T> s = scalars<T>(options_, lr(), first);
    parallel_for(param.numel(), 1 << 16, [&](std::int64_t b, std::int64_t e) {
      kernels::sgd_step(e - b, p + b, g + b, buf ? buf + b : nullptr, s);
    });
  });
}

// Every CUDA parameter in one launch per dtype (kernels::cuda::sgd_step), the momentum buffers on
// the device; `first` per parameter.
void SGD::update_cuda(std::vector<CudaUpdate>& batch) {
  const bool use_momentum = options_.momentum != 0;
  std::vector<kernels::cuda::StepTensor<float>> f32;
  std::vector<kernels::cuda::StepTensor<double>> f64;
  for (CudaUpdate& u : batch) {
    Tensor& p = *u.param;
    std::vector<Tensor>& state = *u.state;
    const bool first = use_momentum && !state[0].defined();
    if (first) state[0] = Tensor::empty(p.shape(), p.dtype(), Device::CUDA);
    detail::dispatch_float(p.dtype(), "SGD::step", [&]<class T>() {
      kernels::cuda::StepTensor<T> t{p.cuda_data<T>(),
                                     u.grad.cuda_data<T>(),
                                     use_momentum ? state[0].cuda_data<T>() : nullptr,
                                     nullptr,
                                     nullptr,
                                     p.numel(),
                                     first,
                                     T(0),
                                     T(0)};
      if constexpr (std::is_same_v<T, float>)
        f32.push_back(t);
      else
        f64.push_back(t);
    });
  }
  if (!f32.empty()) kernels::cuda::sgd_step(f32, scalars<float>(options_, lr(), false));
  if (!f64.empty()) kernels::cuda::sgd_step(f64, scalars<double>(options_, lr(), false));
}

}  // namespace qat::optim
