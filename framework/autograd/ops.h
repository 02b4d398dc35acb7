#pragma once
// Differentiable ops. Each records its backward on the tape when grad mode is on and an input
// requires a gradient; forward and backward of each op sit side by side in autograd/ops/*.cpp.
// All float ops accept float32 and float64 (float64 is what the gradient checks use).
#include <array>
#include <cstdint>
#include <vector>

#include "framework/tensor/tensor.h"

namespace qat {

class Generator;
using Pair = std::array<std::int64_t, 2>;

// ---- elementwise, NumPy broadcasting (ops/elementwise.cpp) --------------------------------
Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor neg(const Tensor& x);
Tensor add(const Tensor& x, double s);
Tensor mul(const Tensor& x, double s);
Tensor div(const Tensor& x, double s);
Tensor rsub(double s, const Tensor& x);  // s - x
Tensor rdiv(double s, const Tensor& x);  // s / x
Tensor pow(const Tensor& x, double exponent);

inline Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
inline Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
inline Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
inline Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
inline Tensor operator-(const Tensor& x) { return neg(x); }
inline Tensor operator+(const Tensor& x, double s) { return add(x, s); }
inline Tensor operator+(double s, const Tensor& x) { return add(x, s); }
inline Tensor operator-(const Tensor& x, double s) { return add(x, -s); }
inline Tensor operator-(double s, const Tensor& x) { return rsub(s, x); }
inline Tensor operator*(const Tensor& x, double s) { return mul(x, s); }
inline Tensor operator*(double s, const Tensor& x) { return mul(x, s); }
inline Tensor operator/(const Tensor& x, double s) { return div(x, s); }
inline Tensor operator/(double s, const Tensor& x) { return rdiv(s, x); }

// ---- pointwise (ops/activation.cpp) -------------------------------------------------------
Tensor relu(const Tensor& x);
Tensor sigmoid(const Tensor& x);
Tensor tanh(const Tensor& x);
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
/// min(max(x, lo), hi); the gradient passes where lo <= x <= hi.
Tensor clamp(const Tensor& x, double lo, double hi);

// ---- shape (ops/shape.cpp) ----------------------------------------------------------------
/// Same data, new shape; one dimension may be -1 (inferred).
Tensor reshape(const Tensor& x, const std::vector<std::int64_t>& shape);
inline Tensor view(const Tensor& x, const std::vector<std::int64_t>& shape) { return reshape(x, shape); }
/// Merges dimensions start_dim..end_dim into one.
Tensor flatten(const Tensor& x, int start_dim = 1, int end_dim = -1);
/// Swaps two dimensions (copies: tensors are always contiguous).
Tensor transpose(const Tensor& x, int dim0, int dim1);
/// Concatenates `xs` along `dim` (negative counts from the end): same rank, same dtype (float32
/// or float64) and the same sizes except along `dim`;  dx_i = the slice of g that x_i filled.
Tensor cat(const std::vector<Tensor>& xs, int dim = 0);
/// The shape of cat over tensors of `shapes` along `dim`, with cat's checks (errors name `fn`
/// and the offending input's index and shape); also used by the int8 cat.
Shape cat_shape(const std::vector<Shape>& shapes, int dim, const char* fn);

// ---- linear algebra (ops/linalg.cpp) ------------------------------------------------------
/// (M,K) x (K,N) -> (M,N); batched (B,M,K) x (B,K,N) -> (B,M,N).
Tensor matmul(const Tensor& a, const Tensor& b);
/// y = x W^T + b for x (N,in), weight (out,in), optional bias (out).
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());

// ---- reductions (ops/reduce.cpp) ----------------------------------------------------------
Tensor sum(const Tensor& x);
Tensor sum(const Tensor& x, int dim, bool keepdim = false);
Tensor mean(const Tensor& x);
Tensor mean(const Tensor& x, int dim, bool keepdim = false);
/// Largest value; the gradient goes to the first maximal element.
Tensor max(const Tensor& x);
Tensor max(const Tensor& x, int dim, bool keepdim = false);
/// Index of the first maximum along `dim`, as int64 (not differentiable).
Tensor argmax(const Tensor& x, int dim);

// ---- losses (ops/loss.cpp) ----------------------------------------------------------------
Tensor log_softmax(const Tensor& x, int dim = -1);
/// Mean over the batch of -log_softmax(logits)[i, labels[i]]; logits (N,C), labels int64 (N).
Tensor cross_entropy(const Tensor& logits, const Tensor& labels);
/// mean((input - target)^2)
Tensor mse_loss(const Tensor& input, const Tensor& target);
/// KL(softmax(teacher/T) || softmax(student/T)) averaged over the batch (PyTorch's
/// F.kl_div(F.log_softmax(s/T), F.softmax(t/T), reduction="batchmean")); logits (N,C), same
/// dtype; differentiable in both (the teacher normally carries no gradient).
Tensor kl_div_softmax(const Tensor& student_logits, const Tensor& teacher_logits, double temperature);
/// Knowledge distillation (Hinton et al. 2015):
///   (1 - weight) cross_entropy(student, labels) + weight T^2 kl_div_softmax(student, teacher, T)
Tensor distillation_loss(const Tensor& student_logits, const Tensor& teacher_logits,
                         const Tensor& labels, double weight, double temperature);

// ---- convolution and pooling (ops/conv.cpp, ops/pool.cpp) ---------------------------------
struct Conv2dParams {
  Pair stride{1, 1};
  Pair padding{0, 0};
  Pair dilation{1, 1};
  std::int64_t groups = 1;
};
/// x (N,C,H,W), weight (O,C/groups,kh,kw), optional bias (O) -> (N,O,Ho,Wo).
/// GEMMs per image and group that read the im2col matrix from a padded copy of the image; on
/// CUDA, cuDNN (deterministic algorithms) or im2col of a chunk of images and cuBLAS GEMMs, as
/// cuda::conv_path() says (QAT_CUDNN=0 forces the latter).
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(),
              const Conv2dParams& p = {});

struct Pool2dParams {
  Pair kernel{2, 2};
  Pair stride{0, 0};  // {0,0} means stride = kernel
  Pair padding{0, 0};
  bool count_include_pad = true;  // avg_pool2d only
};
Tensor max_pool2d(const Tensor& x, const Pool2dParams& p);
/// max_pool2d(relu(x), p), the same values and gradients; one pass over x where the pool is
/// 2x2 with stride 2 (nn::Sequential runs a ReLU and such a MaxPool2d this way).
Tensor relu_max_pool2d(const Tensor& x, const Pool2dParams& p);
Tensor avg_pool2d(const Tensor& x, const Pool2dParams& p);
/// Average pooling to a fixed output size, with PyTorch's bin edges floor(i*H/oh)..ceil((i+1)*H/oh).
Tensor adaptive_avg_pool2d(const Tensor& x, Pair output_size);
/// (N,C,H,W) -> (N,C,1,1)
Tensor global_avg_pool2d(const Tensor& x);

// ---- normalisation and regularisation (ops/norm.cpp, ops/dropout.cpp) ---------------------
/// Batch norm over (N,C,...) per channel C. training: normalises with the batch statistics and
/// updates running_mean/var in place (running = (1-momentum)*running + momentum*batch, the
/// variance unbiased); eval: normalises with the running statistics. weight/bias optional.
Tensor batch_norm(const Tensor& x, Tensor running_mean, Tensor running_var, const Tensor& weight,
                  const Tensor& bias, bool training, double momentum = 0.1, double eps = 1e-5);
/// Inverted dropout: zeroes with probability p and scales the rest by 1/(1-p) when training.
/// On CUDA the mask is Philox keyed by one draw of `gen` (the same seed, the same mask; not the
/// CPU's mask).
Tensor dropout(const Tensor& x, double p, bool training, Generator& gen);

}  // namespace qat
