#include "framework/tensor/kernels.h"

#include "framework/kernels/cpu/elementwise.h"
#include "framework/kernels/cuda/kernels.h"
#include "framework/tensor/dispatch.h"
#include "framework/tensor/parallel.h"

namespace qat::detail {

using i64 = std::int64_t;
constexpr i64 kParallelMin = 1 << 16;  // elements below which threads cost more than they save

void add_inplace(Tensor& dst, const Tensor& src) {
  QAT_CHECK(dst.shape() == src.shape() && dst.dtype() == src.dtype());
  if (common_device("add_inplace", {{"dst", &dst}, {"src", &src}}) == Device::CUDA) {
    dispatch_float(dst.dtype(), "add_inplace", [&]<class T>() {
      kernels::cuda::add_inplace(dst.cuda_data<T>(), src.cuda_data<T>(), dst.numel());
    });
    return;
  }
  dispatch_float(dst.dtype(), "add_inplace", [&]<class T>() {
    T* d = dst.data<T>();
    const T* s = src.data<T>();
    parallel_for(dst.numel(), kParallelMin,
                 [&](i64 b, i64 e) { kernels::add_inplace(d + b, s + b, e - b); });
  });
}

Tensor add(const Tensor& a, const Tensor& b) {
  QAT_CHECK(a.shape() == b.shape() && a.dtype() == b.dtype());
  if (common_device("add", {{"a", &a}, {"b", &b}}) == Device::CUDA) {
    Tensor out = Tensor::empty(a.shape(), a.dtype(), Device::CUDA);
    kernels::cuda::BroadcastDims d;
    d.rank = 1, d.size[0] = a.numel(), d.sa[0] = 1, d.sb[0] = 1;
    dispatch_float(a.dtype(), "add", [&]<class T>() {
      kernels::cuda::binary(kernels::BinaryOp::Add, a.cuda_data<T>(), b.cuda_data<T>(),
                            out.cuda_data<T>(), d, a.numel());
    });
    return out;
  }
  Tensor out = Tensor::empty(a.shape(), a.dtype());
  dispatch_float(a.dtype(), "add", [&]<class T>() {
    const T* pa = a.data<T>();
    const T* pb = b.data<T>();
    T* po = out.data<T>();
    parallel_for(a.numel(), kParallelMin,
                 [&](i64 s, i64 e) { kernels::add(pa + s, pb + s, po + s, e - s); });
  });
  return out;
}

void scale_inplace(Tensor& dst, double s) {
  if (dst.device() == Device::CUDA) {
    dispatch_float(dst.dtype(), "scale_inplace", [&]<class T>() {
      kernels::cuda::unary(kernels::cuda::UnaryOp::MulScalar, dst.cuda_data<T>(), dst.cuda_data<T>(),
                           dst.numel(), s);
    });
    return;
  }
  dispatch_float(dst.dtype(), "scale_inplace", [&]<class T>() {
    kernels::scale_inplace(dst.data<T>(), static_cast<T>(s), dst.numel());
  });
}

}  // namespace qat::detail
