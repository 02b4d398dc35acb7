#pragma once
// Internal: the framework's CUDA kernels (elementwise.cu, reduce.cu, gemm.cpp, nn.cu, loss.cu,
// optim.cu), called by the ops with device pointers; each queues work on the one stream and
// returns (no host sync). An empty range launches nothing. Float and double each. Without the
// CUDA backend they throw (none.cpp).
#include <cstdint>
#include <string>
#include <vector>

#include "framework/kernels/cpu/elementwise.h"  // BinaryOp
#include "framework/kernels/cpu/optim.h"        // SgdScalars, AdamScalars

namespace qat::kernels::cuda {

constexpr int kMaxDims = 8;  // Shape::kMaxDims

/// A broadcast for out = a op b: dimensions of the output with each input's element strides
/// (0 where broadcast), as ops/broadcast.h plans them.
struct BroadcastDims {
  int rank = 0;
  std::int64_t size[kMaxDims] = {}, sa[kMaxDims] = {}, sb[kMaxDims] = {};
};

/// out[i] = a[.] op b[.] over the n output elements.
void binary(BinaryOp op, const float* a, const float* b, float* out, const BroadcastDims& dims,
            std::int64_t n);
void binary(BinaryOp op, const double* a, const double* b, double* out, const BroadcastDims& dims,
            std::int64_t n);

/// Elementwise ops with one scalar s: -x, x + s, x * s, x / s, s - x, s / x, max(x, 0) (NaN -> 0,
/// as the CPU kernel), x^s.
/// Also sigmoid 1 / (1 + e^-x), tanh x, e^x, ln x (the CPU formulas; CUDA's exp / tanh / log
/// differ from glibc's by an ulp or so).
enum class UnaryOp : int {
  Neg,
  AddScalar,
  MulScalar,
  DivScalar,
  RSubScalar,
  RDivScalar,
  Relu,
  Pow,
  Sigmoid,
  Tanh,
  Exp,
  Log
};
void unary(UnaryOp op, const float* x, float* y, std::int64_t n, double s);
void unary(UnaryOp op, const double* x, double* y, std::int64_t n, double s);

/// d[i] = x[i] > 0 ? g[i] : 0
void relu_backward(const float* g, const float* x, float* d, std::int64_t n);
void relu_backward(const double* g, const double* x, double* d, std::int64_t n);
/// The backward of a pointwise op from the gradient g and a saved tensor s (its output y or input x):
/// sigmoid g y (1 - y), tanh g (1 - y^2), exp g y, log g / x.
enum class GradOp : int { Sigmoid, Tanh, Exp, Log };
void unary_backward(GradOp op, const float* g, const float* s, float* d, std::int64_t n);
void unary_backward(GradOp op, const double* g, const double* s, double* d, std::int64_t n);
/// Inverted dropout: m[i] = u_i >= p ? keep : 0 and y[i] = x[i] m[i], with u_i in [0, 1) the 53
/// high bits of Philox4x32-10 (Salmon et al. 2011) at counter i under the 64-bit key `seed`
/// (philox.h): the same seed gives the same mask, whatever the launch geometry.
void dropout(const float* x, float* mask, float* y, std::int64_t n, double p, double keep,
             std::uint64_t seed);
void dropout(const double* x, double* mask, double* y, std::int64_t n, double p, double keep,
             std::uint64_t seed);
/// *counter += 1 (a batch counter kept on the device, e.g. BatchNorm's num_batches_tracked)
void increment(std::int64_t* counter);
/// dst[i] += src[i]
void add_inplace(float* dst, const float* src, std::int64_t n);
void add_inplace(double* dst, const double* src, std::int64_t n);
/// out[r, c] = row[c] for r < rows (a bias broadcast over rows)
void repeat_rows(const float* row, float* out, std::int64_t rows, std::int64_t cols);
void repeat_rows(const double* row, double* out, std::int64_t rows, std::int64_t cols);

/// A sum over some dimensions: output element j sums the input elements whose kept coordinates
/// are j's, over the reduced dimensions in row-major order.
struct ReduceDims {
  int kept_rank = 0, red_rank = 0;
  std::int64_t kept_size[kMaxDims] = {}, kept_stride[kMaxDims] = {};
  std::int64_t red_size[kMaxDims] = {}, red_stride[kMaxDims] = {};
  std::int64_t n_out = 1, n_red = 1;
};
/// out[j] = sum of its inputs, times `scale` in double when not 1 (as the CPU's mean). One block per
/// output; a thread sums a fixed strided subset in order and the block combines the partial sums in a
/// fixed tree: deterministic (no atomics), though not the CPU's order.
void sum(const float* in, float* out, const ReduceDims& dims, double scale);
void sum(const double* in, double* out, const ReduceDims& dims, double scale);

/// Along rows of n values at stride `inner` (outer * inner rows, n > 0): at = the first index of
/// the maximum (NaN counts as maximal: the first NaN), val = that value (null: not written).
void argmax(const float* x, std::int64_t* at, float* val, std::int64_t outer, std::int64_t n,
            std::int64_t inner);
void argmax(const double* x, std::int64_t* at, double* val, std::int64_t outer, std::int64_t n,
            std::int64_t inner);
/// dx[o][at[o][i]][i] = g[o][i], the other entries untouched (each row writes one place)
void put_along(const float* g, const std::int64_t* at, float* dx, std::int64_t outer, std::int64_t n,
               std::int64_t inner);
void put_along(const double* g, const std::int64_t* at, double* dx, std::int64_t outer, std::int64_t n,
               std::int64_t inner);

/// The cuBLAS library file, opened now if no GEMM has opened it yet (gemm.cpp opens it on first
/// use, not at program start); throws naming what failed. Needs no device.
std::string cublas_library();

/// Row-major C (m x n) = alpha op(A) op(B) + beta C through cuBLAS (FP32 / FP64, no TF32),
/// op(A) m x k, op(B) k x n, leading dimensions as stored.
void gemm(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k, float alpha,
          const float* a, std::int64_t lda, const float* b, std::int64_t ldb, float beta, float* c,
          std::int64_t ldc);
void gemm(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k, double alpha,
          const double* a, std::int64_t lda, const double* b, std::int64_t ldb, double beta, double* c,
          std::int64_t ldc);

/// C_i = alpha op(A_i) op(B_i) + beta C_i for i < batch, X_i = X + i * stride_x (a stride 0
/// shares one matrix), through cublas<S|D>gemmStridedBatched; otherwise as gemm.
void gemm_batched(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k,
                  float alpha, const float* a, std::int64_t lda, std::int64_t stride_a, const float* b,
                  std::int64_t ldb, std::int64_t stride_b, float beta, float* c, std::int64_t ldc,
                  std::int64_t stride_c, std::int64_t batch);
void gemm_batched(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k,
                  double alpha, const double* a, std::int64_t lda, std::int64_t stride_a,
                  const double* b, std::int64_t ldb, std::int64_t stride_b, double beta, double* c,
                  std::int64_t ldc, std::int64_t stride_c, std::int64_t batch);

// ---- convolution (nn.cu): im2col + GEMM ----

/// One image's convolution geometry: x (C, H, W), kernel (kh, kw), output (Ho, Wo).
struct ConvDims {
  std::int64_t C, H, W, kh, kw, sh, sw, ph, pw, dh, dw, Ho, Wo;
};
/// col (images, C*kh*kw, Ho*Wo) of x (images, C, H, W):
///   col[n][(c*kh + i)*kw + j][oh*Wo + ow] = x[n][c][oh*sh - ph + i*dh][ow*sw - pw + j*dw] (0 outside)
void im2col(const float* x, float* col, const ConvDims& d, std::int64_t images);
void im2col(const double* x, double* col, const ConvDims& d, std::int64_t images);
/// The adjoint, gathered: dx[n][c][h][w] = sum over the taps (i, j) in order of the col entries
/// that read x[n][c][h][w] (one thread per dx element: deterministic, no atomics).
void col2im(const float* col, float* dx, const ConvDims& d, std::int64_t images);
void col2im(const double* col, double* dx, const ConvDims& d, std::int64_t images);
/// out[n][o][p] = b[o] over (images, O, P): a bias broadcast over the positions
void channel_fill(const float* b, float* out, std::int64_t images, std::int64_t O, std::int64_t P);
void channel_fill(const double* b, double* out, std::int64_t images, std::int64_t O, std::int64_t P);

// ---- pooling (nn.cu) ----

/// Pooling over `planes` (H, W) planes into (Ho, Wo). Sliding windows (PyTorch, floor mode):
/// rows [oh*sh - ph, + kh) clipped to the input, the average dividing by the window clipped to
/// the padded input (count_include_pad) or to the input. Adaptive: rows
/// [floor(oh*H/Ho), ceil((oh+1)*H/Ho)). Columns alike.
struct PoolDims {
  std::int64_t planes, H, W, Ho, Wo, kh, kw, sh, sw, ph, pw;
  bool adaptive, count_include_pad;
};
/// y = max of the window scanned row-major, taking v if v > best or v is NaN (the CPU's rule:
/// the first maximum wins a tie); at = its index in the plane.
void max_pool(const float* x, float* y, std::int64_t* at, const PoolDims& d);
void max_pool(const double* x, double* y, std::int64_t* at, const PoolDims& d);
/// dx[i] = sum of g over the windows (in order) whose argmax is i (gathered, deterministic)
void max_pool_backward(const float* g, const std::int64_t* at, float* dx, const PoolDims& d);
void max_pool_backward(const double* g, const std::int64_t* at, double* dx, const PoolDims& d);
/// y = (sum of the window, row-major in T) / count;  dx[i] = sum over the windows holding i, in
/// order, of g / count: the CPU's operations in the CPU's order (bit-exact).
void avg_pool(const float* x, float* y, const PoolDims& d);
void avg_pool(const double* x, double* y, const PoolDims& d);
void avg_pool_backward(const float* g, float* dx, const PoolDims& d);
void avg_pool_backward(const double* g, double* dx, const PoolDims& d);

// ---- batch normalisation (nn.cu) over x viewed as (N, C, S) ----

/// Per channel c, one block each (double sums in a fixed tree): training, the batch's mean and
/// biased var (shifted by the channel's first value, as the CPU) and, with running_* non-null,
///   running = (1 - momentum) running + momentum batch (var unbiased by M / (M - 1));
/// eval, mean and var from running_*. Writes mean[c], invstd[c] = 1 / sqrt(var + eps) (double)
/// and the affine a[c] = invstd w, shift[c] = b - mean a (T; w = 1, b = 0 when null).
void batch_norm_stats(const float* x, const float* w, const float* b, float* running_mean,
                      float* running_var, double* mean, double* invstd, float* a, float* shift,
                      std::int64_t N, std::int64_t C, std::int64_t S, bool training, double momentum,
                      double eps);
void batch_norm_stats(const double* x, const double* w, const double* b, double* running_mean,
                      double* running_var, double* mean, double* invstd, double* a, double* shift,
                      std::int64_t N, std::int64_t C, std::int64_t S, bool training, double momentum,
                      double eps);
/// y[n][c][s] = x[n][c][s] a[c] + shift[c]
void batch_norm_affine(const float* x, const float* a, const float* shift, float* y, std::int64_t N,
                       std::int64_t C, std::int64_t S);
void batch_norm_affine(const double* x, const double* a, const double* shift, double* y, std::int64_t N,
                       std::int64_t C, std::int64_t S);
/// sg = sum g, sgx = sum g (x - mean) invstd per channel (double, fixed tree); dw = sgx, db = sg
/// where non-null; with dx non-null, dx = k (g - mg) - kx (x - mean), k = invstd w,
/// mg = sg / M, kx = k invstd sgx / M in training (0 in eval), in T as the CPU. `scratch`: 4 C
/// elements of T.
void batch_norm_backward(const float* g, const float* x, const float* w, const double* mean,
                         const double* invstd, float* dx, float* dw, float* db, float* scratch,
                         std::int64_t N, std::int64_t C, std::int64_t S, bool training);
void batch_norm_backward(const double* g, const double* x, const double* w, const double* mean,
                         const double* invstd, double* dx, double* dw, double* db, double* scratch,
                         std::int64_t N, std::int64_t C, std::int64_t S, bool training);

// ---- softmax and losses (loss.cu): one thread per row, the CPU's order within a row ----

/// y = x - max - log(sum exp(x - max)) along rows of n values at stride `inner` (outer * inner rows)
void log_softmax(const float* x, float* y, std::int64_t outer, std::int64_t n, std::int64_t inner);
void log_softmax(const double* x, double* y, std::int64_t outer, std::int64_t n, std::int64_t inner);
/// dx = g - exp(y) sum(g) along the rows
void log_softmax_backward(const float* g, const float* y, float* dx, std::int64_t outer, std::int64_t n,
                          std::int64_t inner);
void log_softmax_backward(const double* g, const double* y, double* dx, std::int64_t outer,
                          std::int64_t n, std::int64_t inner);
/// logp = log_softmax of the (N, C) logits;  *loss = -1/N sum_i logp[i][labels[i]] (double sum
/// in a fixed tree). Labels must be in [0, C) (checked by the op).
void cross_entropy(const float* logits, const std::int64_t* labels, float* logp, float* loss,
                   std::int64_t N, std::int64_t C);
void cross_entropy(const double* logits, const std::int64_t* labels, double* logp, double* loss,
                   std::int64_t N, std::int64_t C);
/// dx = (*g / N) (exp(logp) - onehot(labels))
void cross_entropy_backward(const float* g, const float* logp, const std::int64_t* labels, float* dx,
                            std::int64_t N, std::int64_t C);
void cross_entropy_backward(const double* g, const double* logp, const std::int64_t* labels, double* dx,
                            std::int64_t N, std::int64_t C);
/// *loss = sum (a - b)^2 / n (double sum in a fixed tree);  backward d = (*g * 2 / n) (a - b)
void mse(const float* a, const float* b, float* loss, std::int64_t n);
void mse(const double* a, const double* b, double* loss, std::int64_t n);
void mse_backward(const float* g, const float* a, const float* b, float* d, std::int64_t n);
void mse_backward(const double* g, const double* a, const double* b, double* d, std::int64_t n);

// ---- optimizers (optim.cu): every tensor of a step in one launch ----

/// One parameter of a multi-tensor step: n elements of p, g and the state buffers s0..s2 (SGD:
/// s0 the momentum buffer or null; Adam: s0 = m, s1 = v, s2 = v_max or null), and the scalars
/// that differ per parameter (SGD: first; Adam: neg_step_size, bc2_sqrt, from its step count).
template <class T>
struct StepTensor {
  T* p;
  const T* g;
  T *s0, *s1, *s2;
  std::int64_t n;
  bool first;
  T neg_step_size, bc2_sqrt;
};
/// kernels::sgd_step / adam_step (cpu/optim.h) over every tensor, in one launch: the same
/// operations in the same order (Adam's multiply-adds fused, as the CPU's vector path).
void sgd_step(const std::vector<StepTensor<float>>& ts, const SgdScalars<float>& s);
void sgd_step(const std::vector<StepTensor<double>>& ts, const SgdScalars<double>& s);
void adam_step(const std::vector<StepTensor<float>>& ts, const AdamScalars<float>& s);
void adam_step(const std::vector<StepTensor<double>>& ts, const AdamScalars<double>& s);

}  // namespace qat::kernels::cuda
