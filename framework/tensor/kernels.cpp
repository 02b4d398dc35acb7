#include "framework/tensor/kernels.h"

#include "framework/kernels/cpu/elementwise.h"
#include "framework/tensor/dispatch.h"

namespace qat::detail {

void add_inplace(Tensor& dst, const Tensor& src) {
  QAT_CHECK(dst.shape() == src.shape() && dst.dtype() == src.dtype());
  dispatch_float(dst.dtype(), "add_inplace",
                 [&]<class T>() { kernels::add_inplace(dst.data<T>(), src.data<T>(), dst.numel()); });
}

Tensor add(const Tensor& a, const Tensor& b) {
  QAT_CHECK(a.shape() == b.shape() && a.dtype() == b.dtype());
  Tensor out = Tensor::empty(a.shape(), a.dtype());
  dispatch_float(a.dtype(), "add",
                 [&]<class T>() { kernels::add(a.data<T>(), b.data<T>(), out.data<T>(), a.numel()); });
  return out;
}

void scale_inplace(Tensor& dst, double s) {
  dispatch_float(dst.dtype(), "scale_inplace", [&]<class T>() {
    kernels::scale_inplace(dst.data<T>(), static_cast<T>(s), dst.numel());
  });
}

}  // namespace qat::detail
