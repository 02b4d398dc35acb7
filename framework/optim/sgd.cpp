#include "framework/optim/sgd.h"

#include <cstdint>

#include "framework/kernels/cpu/optim.h"
#include "framework/tensor/dispatch.h"
#include "framework/tensor/parallel.h"

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

void SGD::update(Tensor& param, const Tensor& grad, std::vector<Tensor>& state) {
  const bool use_momentum = options_.momentum != 0;
  const bool first = use_momentum && !state[0].defined();
  if (first) state[0] = Tensor::empty(param.shape(), param.dtype());
  detail::dispatch_float(param.dtype(), "SGD::step", [&]<class T>() {
    T* p = param.data<T>();
    const T* g = grad.data<T>();
    T* buf = use_momentum ? state[0].data<T>() : nullptr;
    // scalars rounded to T first, PyTorch's order of operations (torch/optim/sgd.py,
    // _single_tensor_sgd), so float32 results match it to the last bit or so
    const kernels::SgdScalars<T> s{.wd = static_cast<T>(options_.weight_decay),
                                   .momentum = static_cast<T>(options_.momentum),
                                   .keep = static_cast<T>(1.0 - options_.dampening),
                                   .neg_lr = static_cast<T>(-lr()),
                                   .decay = options_.weight_decay != 0,
                                   .first = first,
                                   .nesterov = options_.nesterov};
    parallel_for(param.numel(), 1 << 16, [&](std::int64_t b, std::int64_t e) {
      kernels::sgd_step(e - b, p + b, g + b, buf ? buf + b : nullptr, s);
    });
  });
}

}  // namespace qat::optim
