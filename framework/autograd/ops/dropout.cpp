// Inverted dropout (Srivastava et al. 2014): training scales the kept values by 1/(1-p) so
// that evaluation is the identity. On CUDA the mask comes from Philox keyed by one draw of the
// generator (kernels::cuda::dropout): reproducible from the seed, though not the CPU's mask.
#include "framework/autograd/node.h"
#include "framework/autograd/ops.h"
#include "framework/autograd/ops/pointwise.h"
#include "framework/kernels/cpu/elementwise.h"
#include "framework/kernels/cuda/kernels.h"
#include "framework/tensor/random.h"

namespace qat {

using Grads = std::vector<Tensor>;
using Inputs = std::vector<Tensor>;

namespace {
// a * m (same shape and dtype)
Tensor masked(const Tensor& a, const Tensor& m, const char* fn) {
  QAT_CHECK(a.shape() == m.shape() && a.dtype() == m.dtype(), fn);
  Tensor out = Tensor::empty(a.shape(), a.dtype());
  detail::dispatch_float(a.dtype(), fn, [&]<class T>() {
    kernels::binary(kernels::BinaryOp::Mul, a.data<T>(), 1, m.data<T>(), 1, out.data<T>(), a.numel());
  });
  return out;
}
// a * m on CUDA (same shape and dtype)
Tensor masked_cuda(const Tensor& a, const Tensor& m, const char* fn) {
  QAT_CHECK(a.shape() == m.shape() && a.dtype() == m.dtype(), fn);
  common_device(fn, {{"grad", &a}, {"mask", &m}});
  Tensor out = Tensor::empty(a.shape(), a.dtype(), Device::CUDA);
  kernels::cuda::BroadcastDims d;
  d.rank = 1, d.size[0] = a.numel(), d.sa[0] = 1, d.sb[0] = 1;
  detail::dispatch_float(a.dtype(), fn, [&]<class T>() {
    kernels::cuda::binary(kernels::BinaryOp::Mul, a.cuda_data<T>(), m.cuda_data<T>(), out.cuda_data<T>(),
                          d, a.numel());
  });
  return out;
}
}  // namespace

// y = x * m,  m = [u >= p] / (1 - p) with u ~ U[0, 1) drawn from gen per element (m = 0 when
// p = 1);  dx = g * m
Tensor dropout(const Tensor& x, double p, bool training, Generator& gen) {
  require_float(x, "dropout", "x");
  QAT_REQUIRE(p >= 0 && p <= 1, "dropout", "p must be in [0, 1], got ", p);
  if (!training || p == 0) return x;
  if (x.device() == Device::CUDA) {  // m[i] from Philox(counter i, key = one draw of gen)
    const std::uint64_t seed = gen.next_u64();
    Tensor mask = Tensor::empty(x.shape(), x.dtype(), Device::CUDA);
    Tensor out = Tensor::empty(x.shape(), x.dtype(), Device::CUDA);
    detail::dispatch_float(x.dtype(), "dropout", [&]<class T>() {
      const double keep = p < 1 ? static_cast<double>(static_cast<T>(1.0 / (1.0 - p))) : 0.0;
      kernels::cuda::dropout(x.cuda_data<T>(), mask.cuda_data<T>(), out.cuda_data<T>(), x.numel(), p,
                             keep, seed);
    });
    autograd::record(out, "dropout", {x}, [mask](const Tensor& g, const Inputs&, Grads& gi) {
      gi[0] = masked_cuda(g, mask, "dropout_backward");
    });
    return out;
  }
  Tensor mask = Tensor::empty(x.shape(), x.dtype());
  detail::dispatch_float(x.dtype(), "dropout", [&]<class T>() {
    const T keep = p < 1 ? static_cast<T>(1.0 / (1.0 - p)) : T(0);
    T* m = mask.data<T>();
    const std::int64_t n = mask.numel();
    for (std::int64_t i = 0; i < n; ++i) m[i] = gen.uniform() >= p ? keep : T(0);
  });
  Tensor out = masked(x, mask, "dropout");
  autograd::record(out, "dropout", {x}, [mask](const Tensor& g, const Inputs&, Grads& gi) {
    gi[0] = masked(g, mask, "dropout_backward");
  });
  return out;
}

}  // namespace qat
