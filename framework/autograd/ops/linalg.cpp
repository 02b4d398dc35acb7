// Matrix products through BLAS GEMM; backward passes use transposed GEMMs, never copies.
#include "framework/autograd/node.h"
#include "framework/autograd/ops.h"
#include "framework/kernels/cuda/kernels.h"
#include "framework/tensor/blas.h"
#include "framework/tensor/dispatch.h"

namespace qat {

using Grads = std::vector<Tensor>;
using Inputs = std::vector<Tensor>;
using detail::gemm;

namespace {
struct MatmulDims {
  std::int64_t batch, M, K, N;
};

MatmulDims matmul_dims(const Tensor& a, const Tensor& b) {
  require_float(a, "matmul", "a");
  require_float(b, "matmul", "b");
  QAT_REQUIRE(a.dtype() == b.dtype(), "matmul", "dtype mismatch: a is ", dtype_name(a.dtype()),
              ", b is ", dtype_name(b.dtype()));
  QAT_REQUIRE((a.dim() == 2 && b.dim() == 2) || (a.dim() == 3 && b.dim() == 3), "matmul",
              "expected (M,K)x(K,N) or (B,M,K)x(B,K,N), got ", a.shape(), " x ", b.shape());
  const bool batched = a.dim() == 3;
  QAT_REQUIRE(a.size(-1) == b.size(-2) && (!batched || a.size(0) == b.size(0)), "matmul", "shapes ",
              a.shape(), " and ", b.shape(), " are not compatible");
  return {batched ? a.size(0) : 1, a.size(-2), a.size(-1), b.size(-1)};
}

// A tensor's first element on its device (host or CUDA).
template <class T>
T* ptr(const Tensor& t) {
  return t.device() == Device::CUDA ? t.cuda_data<T>() : t.data<T>();
}

// GEMM on `device`: the CPU's BLAS or cuBLAS.
template <class T>
void mm(Device device, bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k, T alpha,
        const T* a, std::int64_t lda, const T* b, std::int64_t ldb, T beta, T* c, std::int64_t ldc) {
  if (device == Device::CUDA)
    kernels::cuda::gemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  else
    gemm<T>(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
}  // namespace

// C = A B;  dA = G B^T,  dB = A^T G  (per batch)
Tensor matmul(const Tensor& a, const Tensor& b) {
  const MatmulDims d = matmul_dims(a, b);
  const Device dev = common_device("matmul", {{"a", &a}, {"b", &b}});
  Shape os = a.shape();
  os[os.rank() - 1] = d.N;
  Tensor out = Tensor::empty(os, a.dtype(), dev);
  detail::dispatch_float(a.dtype(), "matmul", [&]<class T>() {
    for (std::int64_t i = 0; i < d.batch; ++i)
      mm<T>(dev, false, false, d.M, d.N, d.K, 1, ptr<T>(a) + i * d.M * d.K, d.K,
            ptr<T>(b) + i * d.K * d.N, d.N, 0, ptr<T>(out) + i * d.M * d.N, d.N);
  });
  autograd::record(out, "matmul", {a, b}, [d, dev](const Tensor& g, const Inputs& in, Grads& gi) {
    const Tensor &A = in[0], &B = in[1];
    common_device("matmul_backward", {{"grad", &g}, {"a", &A}});
    detail::dispatch_float(g.dtype(), "matmul_backward", [&]<class T>() {
      if (A.requires_grad()) {
        gi[0] = Tensor::empty(A.shape(), A.dtype(), dev);
        for (std::int64_t i = 0; i < d.batch; ++i)
          mm<T>(dev, false, true, d.M, d.K, d.N, 1, ptr<T>(g) + i * d.M * d.N, d.N,
                ptr<T>(B) + i * d.K * d.N, d.N, 0, ptr<T>(gi[0]) + i * d.M * d.K, d.K);
      }
      if (B.requires_grad()) {
        gi[1] = Tensor::empty(B.shape(), B.dtype(), dev);
        for (std::int64_t i = 0; i < d.batch; ++i)
          mm<T>(dev, true, false, d.K, d.N, d.M, 1, ptr<T>(A) + i * d.M * d.K, d.K,
                ptr<T>(g) + i * d.M * d.N, d.N, 0, ptr<T>(gi[1]) + i * d.K * d.N, d.N);
      }
    });
  });
  return out;
}

// y = x W^T + b, x viewed as (rows, in);  dx = G W,  dW = G^T x,  db = sum_rows(G)
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  require_float(x, "linear", "x");
  require_rank(weight, 2, "linear", "weight");
  QAT_REQUIRE(weight.dtype() == x.dtype(), "linear", "weight is ", dtype_name(weight.dtype()),
              " but x is ", dtype_name(x.dtype()));
  QAT_REQUIRE(x.dim() >= 1 && x.size(-1) == weight.size(1), "linear", "x of shape ", x.shape(),
              " does not match weight of shape ", weight.shape(), " (in_features ", weight.size(1), ")");
  const std::int64_t out_f = weight.size(0), in_f = weight.size(1), rows = x.numel() / in_f;
  if (bias.defined()) {
    QAT_REQUIRE(bias.dtype() == x.dtype() && bias.dim() == 1 && bias.size(0) == out_f, "linear",
                "bias must be ", dtype_name(x.dtype()), "[", out_f, "], got ", dtype_name(bias.dtype()),
                bias.shape());
  }
  const Device dev = common_device("linear", {{"x", &x}, {"weight", &weight}, {"bias", &bias}});
  Shape os = x.shape();
  os[os.rank() - 1] = out_f;
  Tensor out = Tensor::empty(os, x.dtype(), dev);
  detail::dispatch_float(x.dtype(), "linear", [&]<class T>() {
    T* y = ptr<T>(out);
    if (bias.defined() && dev == Device::CUDA) {
      kernels::cuda::repeat_rows(ptr<T>(bias), y, rows, out_f);
    } else if (bias.defined()) {
      const T* b = ptr<T>(bias);
      for (std::int64_t r = 0; r < rows; ++r)
        for (std::int64_t j = 0; j < out_f; ++j) y[r * out_f + j] = b[j];
    }
    mm<T>(dev, false, true, rows, out_f, in_f, 1, ptr<T>(x), in_f, ptr<T>(weight), in_f,
          bias.defined() ? 1 : 0, y, out_f);
  });
  autograd::record(out, "linear", {x, weight, bias},
                   [rows, in_f, out_f, dev](const Tensor& g, const Inputs& in, Grads& gi) {
                     const Tensor &X = in[0], &W = in[1], &b = in[2];
                     common_device("linear_backward", {{"grad", &g}, {"x", &X}});
                     detail::dispatch_float(g.dtype(), "linear_backward", [&]<class T>() {
                       const T* G = ptr<T>(g);
                       if (X.requires_grad()) {
                         gi[0] = Tensor::empty(X.shape(), X.dtype(), dev);
                         mm<T>(dev, false, false, rows, in_f, out_f, 1, G, out_f, ptr<T>(W), in_f, 0,
                               ptr<T>(gi[0]), in_f);
                       }
                       if (W.requires_grad()) {
                         gi[1] = Tensor::empty(W.shape(), W.dtype(), dev);
                         mm<T>(dev, true, false, out_f, in_f, rows, 1, G, out_f, ptr<T>(X), in_f, 0,
                               ptr<T>(gi[1]), in_f);
                       }
                       if (b.defined() && b.requires_grad() && dev == Device::CUDA) {
                         // db[j] = sum over rows of G[r, j]
                         gi[2] = Tensor::zeros(b.shape(), b.dtype(), dev);
                         kernels::cuda::ReduceDims rd;
                         rd.kept_rank = 1, rd.kept_size[0] = out_f, rd.kept_stride[0] = 1;
                         rd.red_rank = 1, rd.red_size[0] = rows, rd.red_stride[0] = out_f;
                         rd.n_out = out_f, rd.n_red = rows;
                         kernels::cuda::sum(G, ptr<T>(gi[2]), rd, 1.0);
                       } else if (b.defined() && b.requires_grad()) {
                         gi[2] = Tensor::zeros(b.shape(), b.dtype());
                         T* db = ptr<T>(gi[2]);
                         for (std::int64_t r = 0; r < rows; ++r)
                           for (std::int64_t j = 0; j < out_f; ++j) db[j] += G[r * out_f + j];
                       }
                     });
                   });
  return out;
}

}  // namespace qat
