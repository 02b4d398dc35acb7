#include "framework/nn/init.h"

#include <cmath>

#include "framework/autograd/grad_mode.h"
#include "framework/tensor/dispatch.h"

namespace qat::nn::init {

std::int64_t fan_in(const Tensor& weight) {
  QAT_REQUIRE(weight.dim() >= 2, "init::fan_in", "weight must have rank >= 2, got shape ",
              weight.shape());
  return weight.numel() / weight.size(0);
}

void uniform_(Tensor& t, double lo, double hi, Generator& gen) {
  QAT_REQUIRE(lo <= hi, "init::uniform_", "lo (", lo, ") exceeds hi (", hi, ")");
  detail::dispatch_float(t.dtype(), "init::uniform_", [&]<class T>() {
    T* p = t.data<T>();
    for (std::int64_t i = 0; i < t.numel(); ++i) p[i] = static_cast<T>(lo + (hi - lo) * gen.uniform());
  });
}

void kaiming_uniform_(Tensor& weight, double a, Generator& gen) {
  const double gain = std::sqrt(2.0 / (1.0 + a * a));
  const double bound = gain * std::sqrt(3.0 / static_cast<double>(fan_in(weight)));
  uniform_(weight, -bound, bound, gen);
}

}  // namespace qat::nn::init
