#include "framework/tensor/kernels.h"

#include "framework/tensor/dispatch.h"

namespace qat::detail {

void add_inplace(Tensor& dst, const Tensor& src) {
  QAT_CHECK(dst.shape() == src.shape() && dst.dtype() == src.dtype());
  dispatch_float(dst.dtype(), "add_inplace", [&]<class T>() {
    T* d = dst.data<T>();
    const T* s = src.data<T>();
    const std::int64_t n = dst.numel();
    for (std::int64_t i = 0; i < n; ++i) d[i] += s[i];
  });
}

Tensor add(const Tensor& a, const Tensor& b) {
  QAT_CHECK(a.shape() == b.shape() && a.dtype() == b.dtype());
  Tensor out = Tensor::empty(a.shape(), a.dtype());
  dispatch_float(a.dtype(), "add", [&]<class T>() {
    const T* pa = a.data<T>();
    const T* pb = b.data<T>();
    T* po = out.data<T>();
    const std::int64_t n = a.numel();
    for (std::int64_t i = 0; i < n; ++i) po[i] = pa[i] + pb[i];
  });
  return out;
}

void scale_inplace(Tensor& dst, double s) {
  dispatch_float(dst.dtype(), "scale_inplace", [&]<class T>() {
    T* d = dst.data<T>();
    const T v = static_cast<T>(s);
    const std::int64_t n = dst.numel();
    for (std::int64_t i = 0; i < n; ++i) d[i] *= v;
  });
}

}  // namespace qat::detail
