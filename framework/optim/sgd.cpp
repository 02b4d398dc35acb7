#include "framework/optim/sgd.h"

#include <cstdint>

#include "framework/tensor/dispatch.h"

namespace qat::optim {

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

// One fused pass; scalars are rounded to T first and the operations happen in PyTorch's order
// (torch/optim/sgd.py, _single_tensor_sgd), so float32 results match it to the last bit or so.
void SGD::update(Tensor& param, const Tensor& grad, std::vector<Tensor>& state) {
  const bool use_momentum = options_.momentum != 0;
  const bool first = use_momentum && !state[0].defined();
  if (first) state[0] = Tensor::empty(param.shape(), param.dtype());
  detail::dispatch_float(param.dtype(), "SGD::step", [&]<class T>() {
    const std::int64_t n = param.numel();
    T* p = param.data<T>();
    const T* gr = grad.data<T>();
    T* buf = use_momentum ? state[0].data<T>() : nullptr;
    const T wd = static_cast<T>(options_.weight_decay);
    const T mom = static_cast<T>(options_.momentum);
    const T keep = static_cast<T>(1.0 - options_.dampening);
    const T neg_lr = static_cast<T>(-lr());
    const bool decay = options_.weight_decay != 0, nesterov = options_.nesterov;
#pragma omp parallel for if (n >= (1 << 16))
    for (std::int64_t i = 0; i < n; ++i) {
      T g = gr[i];
      if (decay) g = g + wd * p[i];
      if (use_momentum) {
        const T b = first ? g : buf[i] * mom + keep * g;
        buf[i] = b;
        g = nesterov ? g + mom * b : b;
      }
      p[i] = p[i] + neg_lr * g;
    }
  });
}

}  // namespace qat::optim
