// Inverted dropout (Srivastava et al. 2014): training scales the kept values by 1/(1-p) so
// that evaluation is the identity.
#include "framework/autograd/node.h"
#include "framework/autograd/ops.h"
#include "framework/autograd/ops/pointwise.h"
#include "framework/tensor/random.h"

namespace qat {

using Grads = std::vector<Tensor>;
using Inputs = std::vector<Tensor>;

// y = x * m,  m = [u >= p] / (1 - p) with u ~ U[0, 1) drawn from gen per element (m = 0 when
// p = 1);  dx = g * m
Tensor dropout(const Tensor& x, double p, bool training, Generator& gen) {
  require_float(x, "dropout", "x");
  QAT_REQUIRE(p >= 0 && p <= 1, "dropout", "p must be in [0, 1], got ", p);
  if (!training || p == 0) return x;
  Tensor mask = Tensor::empty(x.shape(), x.dtype());
  detail::dispatch_float(x.dtype(), "dropout", [&]<class T>() {
    const T keep = p < 1 ? static_cast<T>(1.0 / (1.0 - p)) : T(0);
    T* m = mask.data<T>();
    const std::int64_t n = mask.numel();
    for (std::int64_t i = 0; i < n; ++i) m[i] = gen.uniform() >= p ? keep : T(0);
  });
  Tensor out = detail::map2(x, mask, "dropout", [](auto xv, auto mv) { return xv * mv; });
  autograd::record(out, "dropout", {x}, [mask](const Tensor& g, const Inputs&, Grads& gi) {
    gi[0] = detail::map2(g, mask, "dropout_backward", [](auto gv, auto mv) { return gv * mv; });
  });
  return out;
}

}  // namespace qat
