// conv2d on CUDA (autograd/ops/conv.cpp dispatches here): cuDNN where the build has it
// (conv2d_cudnn), else im2col of a chunk of images into a column buffer and cuBLAS GEMMs
// (conv2d_im2col_cuda); cuda::conv_path() says which.
#include <algorithm>
#include <vector>

#include "framework/autograd/node.h"
#include "framework/autograd/ops.h"
#include "framework/autograd/ops/conv_geom.h"
#include "framework/kernels/cuda/cudnn_conv.h"
#include "framework/kernels/cuda/kernels.h"
#include "framework/tensor/cuda.h"
#include "framework/tensor/dispatch.h"

namespace qat::conv_detail {

using Grads = std::vector<Tensor>;
using Inputs = std::vector<Tensor>;

namespace {

// ---- CUDA: im2col + cuBLAS ----
// For a chunk of nc images, col (nc, C*kh*kw, P) = im2col(x), group g's rows [g K, (g+1) K):
//   y_ng (Og, P) = W_g (Og, K) col_ng (K, P) + b      (one strided-batched GEMM per group)
//   dW_g (Og, K) = sum_n dY_ng (Og, P) col_ng^T         (image by image, in order)
//   col_ng = W_g^T dY_ng (batched),  dx = col2im(col)    (gathered: no atomics)
//   db = sum over n, p of dY                             (the fixed-tree sum kernel)
// Everything is deterministic; the sums run in another order than the CPU's (float tolerance).
constexpr i64 kColumnBudget = i64(1) << 24;  // elements of the column buffer (64 MiB in float)

kernels::cuda::ConvDims cuda_dims(const ConvGeom& g) {
  return {g.C,          g.H,          g.W,           g.kh,          g.kw, g.stride[0], g.stride[1],
          g.padding[0], g.padding[1], g.dilation[0], g.dilation[1], g.Ho, g.Wo};
}

// db[o] = sum over n < N, p < P of dy[n][o][p]
template <class T>
void kc_sum_channels(const T* dy, T* db, i64 N, i64 O, i64 P) {
  kernels::cuda::ReduceDims rd;
  rd.kept_rank = 1, rd.kept_size[0] = O, rd.kept_stride[0] = P;
  rd.red_rank = 2, rd.red_size[0] = N, rd.red_stride[0] = O * P, rd.red_size[1] = P,
  rd.red_stride[1] = 1;
  rd.n_out = O, rd.n_red = N * P;
  kernels::cuda::sum(dy, db, rd, 1.0);
}

i64 images_per_chunk(const ConvGeom& g) {
  return std::clamp<i64>(kColumnBudget / (g.C * g.kh * g.kw * g.P()), 1, g.N);
}

Tensor conv2d_im2col_cuda(const Tensor& x, const Tensor& weight, const Tensor& bias, const ConvGeom& g) {
  namespace kc = kernels::cuda;
  const i64 K = g.K(), P = g.P(), CK = g.groups * K, chunk = images_per_chunk(g);
  const kc::ConvDims d = cuda_dims(g);
  Tensor out = Tensor::empty(Shape{g.N, g.O, g.Ho, g.Wo}, x.dtype(), Device::CUDA);
  detail::dispatch_float(x.dtype(), "conv2d", [&]<class T>() {
    Tensor col = Tensor::empty(Shape{chunk * CK * P}, x.dtype(), Device::CUDA);
    const T* pw = weight.cuda_data<T>();
    T *py = out.cuda_data<T>(), *pc = col.cuda_data<T>();
    if (bias.defined()) kc::channel_fill(bias.cuda_data<T>(), py, g.N, g.O, P);
    for (i64 n0 = 0; n0 < g.N; n0 += chunk) {
      const i64 nc = std::min(chunk, g.N - n0);
      kc::im2col(x.cuda_data<T>() + n0 * g.C * g.H * g.W, pc, d, nc);
      for (i64 grp = 0; grp < g.groups; ++grp)
        kc::gemm_batched(false, false, g.Og, P, K, T(1), pw + grp * g.Og * K, K, 0, pc + grp * K * P, P,
                         CK * P, T(bias.defined() ? 1 : 0), py + (n0 * g.O + grp * g.Og) * P, P, g.O * P,
                         nc);
    }
  });
  autograd::record(
      out, "conv2d", {x, weight, bias}, [g, d](const Tensor& gout, const Inputs& in, Grads& gi) {
        const Tensor &X = in[0], &Wt = in[1], &B = in[2];
        common_device("conv2d_backward", {{"grad", &gout}, {"x", &X}, {"weight", &Wt}});
        const i64 K = g.K(), P = g.P(), CK = g.groups * K, chunk = images_per_chunk(g);
        const bool need_x = X.requires_grad(), need_w = Wt.requires_grad(),
                   need_b = B.defined() && B.requires_grad();
        detail::dispatch_float(gout.dtype(), "conv2d_backward", [&]<class T>() {
          const T* pg = gout.cuda_data<T>();
          if (need_b) {  // db[o] = sum over n, p of dY[n][o][p]
            gi[2] = Tensor::empty(B.shape(), B.dtype(), Device::CUDA);
            kc_sum_channels(pg, gi[2].cuda_data<T>(), g.N, g.O, P);
          }
          if (!need_x && !need_w) return;
          Tensor col = Tensor::empty(Shape{chunk * CK * P}, gout.dtype(), Device::CUDA);
          T* pc = col.cuda_data<T>();
          const T* pw = Wt.cuda_data<T>();
          if (need_w) gi[1] = Tensor::empty(Wt.shape(), Wt.dtype(), Device::CUDA);
          if (need_x) gi[0] = Tensor::empty(X.shape(), X.dtype(), Device::CUDA);
          for (i64 n0 = 0; n0 < g.N; n0 += chunk) {
            const i64 nc = std::min(chunk, g.N - n0);
            if (need_w) {
              kernels::cuda::im2col(X.cuda_data<T>() + n0 * g.C * g.H * g.W, pc, d, nc);
              for (i64 n = 0; n < nc; ++n)
                for (i64 grp = 0; grp < g.groups; ++grp)
                  kernels::cuda::gemm(false, true, g.Og, K, P, T(1),
                                      pg + ((n0 + n) * g.O + grp * g.Og) * P, P,
                                      pc + (n * CK + grp * K) * P, P, T(n0 + n > 0 ? 1 : 0),
                                      gi[1].cuda_data<T>() + grp * g.Og * K, K);
            }
            if (need_x) {  // the column buffer is reused: the stream orders it after dW's GEMMs
              for (i64 grp = 0; grp < g.groups; ++grp)
                kernels::cuda::gemm_batched(true, false, K, P, g.Og, T(1), pw + grp * g.Og * K, K, 0,
                                            pg + (n0 * g.O + grp * g.Og) * P, P, g.O * P, T(0),
                                            pc + grp * K * P, P, CK * P, nc);
              kernels::cuda::col2im(pc, gi[0].cuda_data<T>() + n0 * g.C * g.H * g.W, d, nc);
            }
          }
        });
      });
  return out;
}

// ---- CUDA: cuDNN (kernels/cuda/cudnn_conv.cpp: deterministic algorithms, no TF32) ----
//   y = conv(x, W) + b (b broadcast first, added by the forward call's beta = 1)
//   dx = conv^T(dY, W),  dW = sum_n x_n * dY_n (cuDNN's backward data / filter),  db as above
// Tensors past 2^31 elements (cuDNN's int indexing) take the im2col path.
bool cudnn_fits(const ConvGeom& g) {
  constexpr i64 kMax = (i64(1) << 31) - 1;
  return g.N * g.C * g.H * g.W <= kMax && g.N * g.O * g.P() <= kMax && g.O * g.K() <= kMax;
}

Tensor conv2d_cudnn(const Tensor& x, const Tensor& weight, const Tensor& bias, const ConvGeom& g) {
  namespace kc = kernels::cuda;
  const kc::CudnnConv c{cuda_dims(g), g.N, g.O, g.groups};
  Tensor out = Tensor::empty(Shape{g.N, g.O, g.Ho, g.Wo}, x.dtype(), Device::CUDA);
  detail::dispatch_float(x.dtype(), "conv2d", [&]<class T>() {
    T* py = out.cuda_data<T>();
    if (bias.defined()) kc::channel_fill(bias.cuda_data<T>(), py, g.N, g.O, g.P());
    kc::cudnn_conv_forward(x.cuda_data<T>(), weight.cuda_data<T>(), T(bias.defined() ? 1 : 0), py, c);
  });
  autograd::record(out, "conv2d", {x, weight, bias},
                   [g, c](const Tensor& gout, const Inputs& in, Grads& gi) {
                     const Tensor &X = in[0], &Wt = in[1], &B = in[2];
                     common_device("conv2d_backward", {{"grad", &gout}, {"x", &X}, {"weight", &Wt}});
                     detail::dispatch_float(gout.dtype(), "conv2d_backward", [&]<class T>() {
                       const T* pg = gout.cuda_data<T>();
                       if (B.defined() && B.requires_grad()) {
                         gi[2] = Tensor::empty(B.shape(), B.dtype(), Device::CUDA);
                         kc_sum_channels(pg, gi[2].cuda_data<T>(), g.N, g.O, g.P());
                       }
                       if (Wt.requires_grad()) {
                         gi[1] = Tensor::empty(Wt.shape(), Wt.dtype(), Device::CUDA);
                         kc::cudnn_conv_backward_filter(X.cuda_data<T>(), pg, gi[1].cuda_data<T>(), c);
                       }
                       if (X.requires_grad()) {
                         gi[0] = Tensor::empty(X.shape(), X.dtype(), Device::CUDA);
                         kc::cudnn_conv_backward_data(Wt.cuda_data<T>(), pg, gi[0].cuda_data<T>(), c);
                       }
                     });
                   });
  return out;
}

}  // namespace

Tensor conv2d_cuda(const Tensor& x, const Tensor& weight, const Tensor& bias, const ConvGeom& g) {
  return cuda::conv_path() == cuda::ConvPath::Cudnn && cudnn_fits(g)
             ? conv2d_cudnn(x, weight, bias, g)
             : conv2d_im2col_cuda(x, weight, bias, g);
}

}  // namespace qat::conv_detail
