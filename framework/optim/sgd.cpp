#include "framework/optim/sgd.h"

#include <cstdint>

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

namespace {
// One fused pass; scalars are rounded to T first and the operations happen in PyTorch's order
// (torch/optim/sgd.py, _single_tensor_sgd), so float32 results match it to the last bit or so.
// PyTorch 1.13 torch.optim.SGD:  g' = g + wd*p;  b = first ? g' : momentum*b + (1-dampening)*g';
// d = nesterov ? g' + momentum*b : b (or g' without momentum);  p = p - lr*d
template <class T>
void sgd_kernel(std::int64_t n, T* __restrict p, const T* __restrict g, T* __restrict buf, T wd, T mom,
                T keep, T neg_lr, bool decay, bool first, bool nesterov) {
  for (std::int64_t i = 0; i < n; ++i) {
    T d = g[i];
    if (decay) d = d + wd * p[i];
    if (buf != nullptr) {
      const T b = first ? d : buf[i] * mom + keep * d;
      buf[i] = b;
      d = nesterov ? d + mom * b : b;
    }
    p[i] = p[i] + neg_lr * d;
  }
}
}  // namespace

void SGD::update(Tensor& param, const Tensor& grad, std::vector<Tensor>& state) {
  const bool use_momentum = options_.momentum != 0;
  const bool first = use_momentum && !state[0].defined();
  if (first) state[0] = Tensor::empty(param.shape(), param.dtype());
  detail::dispatch_float(param.dtype(), "SGD::step", [&]<class T>() {
    T* p = param.data<T>();
    const T* g = grad.data<T>();
    T* buf = use_momentum ? state[0].data<T>() : nullptr;
    const T wd = static_cast<T>(options_.weight_decay), mom = static_cast<T>(options_.momentum);
    const T keep = static_cast<T>(1.0 - options_.dampening), neg_lr = static_cast<T>(-lr());
    const bool decay = options_.weight_decay != 0;
    parallel_for(param.numel(), 1 << 16, [&](std::int64_t b, std::int64_t e) {
      sgd_kernel<T>(e - b, p + b, g + b, buf ? buf + b : nullptr, wd, mom, keep, neg_lr, decay, first,
                    options_.nesterov);
    });
  });
}

}  // namespace qat::optim
