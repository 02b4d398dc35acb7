// conv2d through cuDNN's convolution API (cudnn_conv.h), NCHW, float and double.
// Deterministic: in each direction the algorithm is the first of cuDNN's heuristic ranking
// (cudnnGet*Algorithm_v7: no timed trial runs, so every process on the same GPU and cuDNN
// version picks the same one) that cuDNN marks CUDNN_DETERMINISTIC, without tensor-op math and
// with a workspace of at most kWorkspaceLimit. Math type CUDNN_FMA_MATH: float32 stays float32
// (CUDNN_DEFAULT_MATH permits TF32 tensor cores on sm_80+), as cuBLAS's pedantic mode in gemm.cpp.
// With cuda::allow_tf32() a float32 plan (its own cache entry) takes CUDNN_DEFAULT_MATH and may
// rank tensor-op algorithms (TF32; never CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION, which would
// round to 16 bits), each direction on its own convolution descriptor set to the math type its
// algorithm was ranked with. PyTorch chooses the math type the same way from its allow_tf32.
// Descriptors and the chosen algorithms are cached per geometry (never freed, as the allocator's
// pool); one handle per device runs on the one stream; workspaces come from the caching
// allocator (a byte tensor, back to the pool when the call returns: the stream orders reuse).
#include "framework/kernels/cuda/cudnn_conv.h"

#include <cudnn.h>

#include <algorithm>
#include <array>
#include <climits>
#include <map>
#include <mutex>
#include <type_traits>
#include <vector>

#include "framework/kernels/cuda/check.h"
#include "framework/tensor/cuda.h"
#include "framework/tensor/tensor.h"

/// qat::Error naming `fn`, the call, the device and cuDNN's message unless `call` succeeds.
#define QAT_CUDNN_CHECK(call, fn) \
  ::qat::kernels::cuda::detail::check_cudnn(static_cast<int>(call), fn, #call, __FILE__, __LINE__)

namespace qat::kernels::cuda {

namespace detail {
void check_cudnn(int status, const char* fn, const char* call, const char* file, int line) {
  if (status == CUDNN_STATUS_SUCCESS) return;
  std::string last;
#if CUDNN_MAJOR >= 9
  char buf[512] = "";
  cudnnGetLastErrorString(buf, sizeof buf);
  last = buf;
#endif
  throw Error(qat::detail::concat(fn, ": ", call,
                                  " failed on cuda:", std::max(::qat::cuda::detail::current_device(), 0),
                                  ": ", cudnnGetErrorString(static_cast<cudnnStatus_t>(status)),
                                  last.empty() ? "" : "; " + last, " (", file, ":", line, ")"));
}
}  // namespace detail

namespace {
using i64 = std::int64_t;
constexpr std::size_t kWorkspaceLimit = std::size_t(1) << 28;  // bytes, per call (256 MiB)

enum Direction { kForward, kBackwardData, kBackwardFilter };
constexpr const char* kDirectionName[] = {"forward", "backward data", "backward filter"};
constexpr const char* kForwardAlgo[] = {
    "IMPLICIT_GEMM", "IMPLICIT_PRECOMP_GEMM", "GEMM", "DIRECT", "FFT", "FFT_TILING",
    "WINOGRAD",      "WINOGRAD_NONFUSED"};
constexpr const char* kDataAlgo[] = {"ALGO_0",     "ALGO_1",   "FFT",
                                     "FFT_TILING", "WINOGRAD", "WINOGRAD_NONFUSED"};
constexpr const char* kFilterAlgo[] = {
    "ALGO_0", "ALGO_1", "FFT", "ALGO_3", "WINOGRAD", "WINOGRAD_NONFUSED", "FFT_TILING"};

cudnnHandle_t handle(const char* fn) {
  static std::mutex m;
  static auto* handles = new std::map<int, cudnnHandle_t>();  // never destroyed
  const int dev = std::max(::qat::cuda::detail::current_device(), 0);
  const std::lock_guard<std::mutex> lock(m);
  if (auto it = handles->find(dev); it != handles->end()) return it->second;
  cudaStream_t st = ::qat::cuda::detail::stream(fn);
  cudnnHandle_t h = nullptr;
  QAT_CUDNN_CHECK(cudnnCreate(&h), fn);
  QAT_CUDNN_CHECK(cudnnSetStream(h, st), fn);
  handles->emplace(dev, h);
  return h;
}

// The descriptors of one geometry and, once a direction has run, its algorithm and workspace.
struct Plan {
  cudnnHandle_t h = nullptr;
  bool tf32 = false;  // float32 with cuda::allow_tf32()
  cudnnTensorDescriptor_t x = nullptr, y = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv[3] = {nullptr, nullptr, nullptr};  // by Direction
  bool chosen[3] = {false, false, false};
  int algo[3] = {0, 0, 0};  // cudnnConvolution{Fwd,BwdData,BwdFilter}Algo_t by Direction
  int math[3] = {CUDNN_FMA_MATH, CUDNN_FMA_MATH, CUDNN_FMA_MATH};  // cudnnMathType_t it ranked with
  std::size_t workspace[3] = {0, 0, 0};
};

std::string geometry(const CudnnConv& c) {
  const ConvDims& d = c.d;
  return qat::detail::concat("x (", c.N, ", ", d.C, ", ", d.H, ", ", d.W, "), weight (", c.O, ", ",
                             d.C / c.groups, ", ", d.kh, ", ", d.kw, "), stride (", d.sh, ", ", d.sw,
                             "), padding (", d.ph, ", ", d.pw, "), dilation (", d.dh, ", ", d.dw,
                             "), groups ", c.groups);
}

int narrow(i64 v, const CudnnConv& c, const char* fn) {
  if (v > INT_MAX)
    throw Error(
        qat::detail::concat(fn, ": a dimension of ", v, " exceeds cuDNN's int for ", geometry(c)));
  return static_cast<int>(v);
}

void make_descriptors(Plan& p, const CudnnConv& c, cudnnDataType_t dt, const char* fn) {
  const ConvDims& d = c.d;
  auto n = [&](i64 v) { return narrow(v, c, fn); };
  QAT_CUDNN_CHECK(cudnnCreateTensorDescriptor(&p.x), fn);
  QAT_CUDNN_CHECK(cudnnCreateTensorDescriptor(&p.y), fn);
  QAT_CUDNN_CHECK(cudnnCreateFilterDescriptor(&p.w), fn);
  QAT_CUDNN_CHECK(cudnnSetTensor4dDescriptor(p.x, CUDNN_TENSOR_NCHW, dt, n(c.N), n(d.C), n(d.H), n(d.W)),
                  fn);
  QAT_CUDNN_CHECK(
      cudnnSetTensor4dDescriptor(p.y, CUDNN_TENSOR_NCHW, dt, n(c.N), n(c.O), n(d.Ho), n(d.Wo)), fn);
  QAT_CUDNN_CHECK(cudnnSetFilter4dDescriptor(p.w, dt, CUDNN_TENSOR_NCHW, n(c.O), n(d.C / c.groups),
                                             n(d.kh), n(d.kw)),
                  fn);
  for (cudnnConvolutionDescriptor_t& conv : p.conv) {
    QAT_CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&conv), fn);
    QAT_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(conv, n(d.ph), n(d.pw), n(d.sh), n(d.sw), n(d.dh),
                                                    n(d.dw), CUDNN_CROSS_CORRELATION, dt),
                    fn);
    QAT_CUDNN_CHECK(cudnnSetConvolutionGroupCount(conv, n(c.groups)), fn);
    QAT_CUDNN_CHECK(cudnnSetConvolutionMathType(conv, p.tf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH), fn);
  }
  int on = 0, oc = 0, oh = 0, ow = 0;
  QAT_CUDNN_CHECK(cudnnGetConvolution2dForwardOutputDim(p.conv[kForward], p.x, p.w, &on, &oc, &oh, &ow),
                  fn);
  QAT_CHECK(on == c.N && oc == c.O && oh == d.Ho && ow == d.Wo, fn, ": cuDNN's output (", on, ", ", oc,
            ", ", oh, ", ", ow, ") differs from conv2d's for ", geometry(c));
}

// Index of the first usable entry of a ranking (see the top of the file), or -1; tf32: tensor-op
// math (TF32 on float32) allowed too.
template <class Perf>
int first_usable(const std::vector<Perf>& perf, int returned, bool tf32) {
  for (int i = 0; i < returned; ++i) {
    const Perf& r = perf[i];
    if (r.status == CUDNN_STATUS_SUCCESS && r.determinism == CUDNN_DETERMINISTIC &&
        (tf32 || r.mathType != CUDNN_TENSOR_OP_MATH) &&
        r.mathType != CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION && r.memory <= kWorkspaceLimit)
      return i;
  }
  return -1;
}

// Fills p.algo[dir] and p.workspace[dir] from cuDNN's heuristics.
void choose(Plan& p, Direction dir, const CudnnConv& c, const char* fn) {
  int count = 0, returned = 0, i = -1;
  if (dir == kForward) {
    QAT_CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithmMaxCount(p.h, &count), fn);
    std::vector<cudnnConvolutionFwdAlgoPerf_t> perf(std::max(count, 1));
    QAT_CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(p.h, p.x, p.w, p.conv[dir], p.y, count,
                                                           &returned, perf.data()),
                    fn);
    if ((i = first_usable(perf, returned, p.tf32)) >= 0) {
      p.algo[dir] = perf[i].algo;
      p.math[dir] = perf[i].mathType;
      QAT_CUDNN_CHECK(cudnnSetConvolutionMathType(p.conv[dir], perf[i].mathType), fn);
      QAT_CUDNN_CHECK(cudnnGetConvolutionForwardWorkspaceSize(p.h, p.x, p.w, p.conv[dir], p.y,
                                                              perf[i].algo, &p.workspace[dir]),
                      fn);
    }
  } else if (dir == kBackwardData) {
    QAT_CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithmMaxCount(p.h, &count), fn);
    std::vector<cudnnConvolutionBwdDataAlgoPerf_t> perf(std::max(count, 1));
    QAT_CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(p.h, p.w, p.y, p.conv[dir], p.x, count,
                                                                &returned, perf.data()),
                    fn);
    if ((i = first_usable(perf, returned, p.tf32)) >= 0) {
      p.algo[dir] = perf[i].algo;
      p.math[dir] = perf[i].mathType;
      QAT_CUDNN_CHECK(cudnnSetConvolutionMathType(p.conv[dir], perf[i].mathType), fn);
      QAT_CUDNN_CHECK(cudnnGetConvolutionBackwardDataWorkspaceSize(p.h, p.w, p.y, p.conv[dir], p.x,
                                                                   perf[i].algo, &p.workspace[dir]),
                      fn);
    }
  } else {
    QAT_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(p.h, &count), fn);
    std::vector<cudnnConvolutionBwdFilterAlgoPerf_t> perf(std::max(count, 1));
    QAT_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(p.h, p.x, p.y, p.conv[dir], p.w, count,
                                                                  &returned, perf.data()),
                    fn);
    if ((i = first_usable(perf, returned, p.tf32)) >= 0) {
      p.algo[dir] = perf[i].algo;
      p.math[dir] = perf[i].mathType;
      QAT_CUDNN_CHECK(cudnnSetConvolutionMathType(p.conv[dir], perf[i].mathType), fn);
      QAT_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterWorkspaceSize(p.h, p.x, p.y, p.conv[dir], p.w,
                                                                     perf[i].algo, &p.workspace[dir]),
                      fn);
    }
  }
  if (i < 0)
    throw Error(qat::detail::concat(fn, ": cuDNN ranks no deterministic ", kDirectionName[dir],
                                    p.tf32 ? " algorithm" : " algorithm without tensor-op math",
                                    " and with at most ", kWorkspaceLimit, " bytes of workspace for ",
                                    geometry(c),
                                    " on cuda:", std::max(::qat::cuda::detail::current_device(), 0),
                                    " (QAT_CUDNN=0 runs conv2d through im2col + cuBLAS)"));
  p.chosen[dir] = true;
}

template <class T>
constexpr cudnnDataType_t data_type() {
  return std::is_same_v<T, float> ? CUDNN_DATA_FLOAT : CUDNN_DATA_DOUBLE;
}

// The plan of `c` with `dir`'s algorithm chosen (a copy: the cache may grow meanwhile).
Plan plan(const CudnnConv& c, cudnnDataType_t dt, Direction dir, const char* fn) {
  static std::mutex m;
  static auto* plans = new std::map<std::array<i64, 17>, Plan>();  // never destroyed
  const ConvDims& d = c.d;
  const int dev = std::max(::qat::cuda::detail::current_device(), 0);
  const bool tf32 = dt == CUDNN_DATA_FLOAT && ::qat::cuda::allow_tf32();
  const std::array<i64, 17> key = {dev,  dt,   c.N,  d.C,  d.H,  d.W,  c.O,  c.groups, d.kh,
                                   d.kw, d.sh, d.sw, d.ph, d.pw, d.dh, d.dw, tf32};
  const cudnnHandle_t h = handle(fn);
  const std::lock_guard<std::mutex> lock(m);
  auto it = plans->find(key);
  if (it == plans->end()) {
    Plan fresh;
    fresh.h = h;
    fresh.tf32 = tf32;
    make_descriptors(fresh, c, dt, fn);
    it = plans->emplace(key, fresh).first;
  }
  if (!it->second.chosen[dir]) choose(it->second, dir, c, fn);
  return it->second;
}

// A workspace of `bytes` from the caching allocator (empty: none).
Tensor workspace(std::size_t bytes) {
  if (bytes == 0) return Tensor();
  return Tensor::empty(Shape{static_cast<i64>(bytes)}, DType::UInt8, Device::CUDA);
}

void* data_of(const Tensor& ws) { return ws.defined() ? ws.cuda_data<std::uint8_t>() : nullptr; }

template <class T>
void forward(const T* x, const T* w, T beta, T* y, const CudnnConv& c) {
  const char* fn = "conv2d";
  const Plan p = plan(c, data_type<T>(), kForward, fn);
  const Tensor ws = workspace(p.workspace[kForward]);
  const T alpha = 1;
  QAT_CUDNN_CHECK(cudnnConvolutionForward(p.h, &alpha, p.x, x, p.w, w, p.conv[kForward],
                                          static_cast<cudnnConvolutionFwdAlgo_t>(p.algo[kForward]),
                                          data_of(ws), p.workspace[kForward], &beta, p.y, y),
                  fn);
}

template <class T>
void backward_data(const T* w, const T* dy, T* dx, const CudnnConv& c) {
  const char* fn = "conv2d_backward";
  const Plan p = plan(c, data_type<T>(), kBackwardData, fn);
  const Tensor ws = workspace(p.workspace[kBackwardData]);
  const T alpha = 1, beta = 0;
  QAT_CUDNN_CHECK(
      cudnnConvolutionBackwardData(p.h, &alpha, p.w, w, p.y, dy, p.conv[kBackwardData],
                                   static_cast<cudnnConvolutionBwdDataAlgo_t>(p.algo[kBackwardData]),
                                   data_of(ws), p.workspace[kBackwardData], &beta, p.x, dx),
      fn);
}

template <class T>
void backward_filter(const T* x, const T* dy, T* dw, const CudnnConv& c) {
  const char* fn = "conv2d_backward";
  const Plan p = plan(c, data_type<T>(), kBackwardFilter, fn);
  const Tensor ws = workspace(p.workspace[kBackwardFilter]);
  const T alpha = 1, beta = 0;
  QAT_CUDNN_CHECK(cudnnConvolutionBackwardFilter(
                      p.h, &alpha, p.x, x, p.y, dy, p.conv[kBackwardFilter],
                      static_cast<cudnnConvolutionBwdFilterAlgo_t>(p.algo[kBackwardFilter]), data_of(ws),
                      p.workspace[kBackwardFilter], &beta, p.w, dw),
                  fn);
}

}  // namespace

void cudnn_conv_forward(const float* x, const float* w, float beta, float* y, const CudnnConv& c) {
  forward(x, w, beta, y, c);
}
void cudnn_conv_forward(const double* x, const double* w, double beta, double* y, const CudnnConv& c) {
  forward(x, w, beta, y, c);
}
void cudnn_conv_backward_data(const float* w, const float* dy, float* dx, const CudnnConv& c) {
  backward_data(w, dy, dx, c);
}
void cudnn_conv_backward_data(const double* w, const double* dy, double* dx, const CudnnConv& c) {
  backward_data(w, dy, dx, c);
}
void cudnn_conv_backward_filter(const float* x, const float* dy, float* dw, const CudnnConv& c) {
  backward_filter(x, dy, dw, c);
}
void cudnn_conv_backward_filter(const double* x, const double* dy, double* dw, const CudnnConv& c) {
  backward_filter(x, dy, dw, c);
}

std::string cudnn_conv_algorithms(const CudnnConv& c, bool float64) {
  const cudnnDataType_t dt = float64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
  const char* fn = "cudnn_conv_algorithms";
  const Plan f = plan(c, dt, kForward, fn), d = plan(c, dt, kBackwardData, fn),
             w = plan(c, dt, kBackwardFilter, fn);
  auto name = [](const auto& names, int algo) {
    return algo >= 0 && algo < static_cast<int>(std::size(names)) ? names[algo] : "?";
  };
  auto math = [](int m) {
    return m == CUDNN_FMA_MATH ? "" : m == CUDNN_DEFAULT_MATH ? ", default math" : ", tensor ops";
  };
  return qat::detail::concat("forward ", name(kForwardAlgo, f.algo[kForward]), " (",
                             f.workspace[kForward], " B workspace", math(f.math[kForward]),
                             "), backward data ", name(kDataAlgo, d.algo[kBackwardData]), " (",
                             d.workspace[kBackwardData], " B", math(d.math[kBackwardData]),
                             "), backward filter ", name(kFilterAlgo, w.algo[kBackwardFilter]), " (",
                             w.workspace[kBackwardFilter], " B", math(w.math[kBackwardFilter]), ")");
}

}  // namespace qat::kernels::cuda
