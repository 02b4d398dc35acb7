#pragma once
// The CUDA device as seen from user code: availability, the caching allocator's statistics and
// the one stream every CUDA op runs on. Light header: no CUDA includes (they stay in .cpp / .cu).
#include <string>

#include "framework/tensor/storage.h"
#include "framework/tensor/tensor.h"

namespace qat::cuda {

/// Whether this build has the CUDA backend (CMake QAT_CUDA; installed package: qat_HAS_CUDA).
bool is_built();
/// Number of usable CUDA devices: 0 in a build without CUDA, without a driver or without a GPU.
int device_count();
inline bool is_available() { return device_count() > 0; }
/// Why no device can be used ("" when one can): the build, or the CUDA error string.
std::string unavailable_reason();
/// Makes device `index` the one this process runs its CUDA work on (cudaSetDevice). Call it
/// before the first CUDA op: the one stream and the caching pool belong to one device, so after
/// that only the same index is accepted. Throws qat::Error naming the index and the device count.
void set_device(int index);
/// Waits until every op queued on the current stream has finished (throws on a kernel fault).
void synchronize();

/// Statistics of the CUDA caching allocator: fresh_allocations counts cudaMalloc calls,
/// reused_allocations buffers served from the cache (a training step in steady state adds only
/// to the latter), bytes_reserved / bytes_cached device memory held / free in the cache.
AllocatorStats allocator_stats();
/// Returns every cached device buffer to CUDA (cudaFree).
void empty_cache();

/// How conv2d runs on CUDA tensors: cuDNN (deterministic algorithms, no TF32) or im2col of a
/// chunk of images and cuBLAS GEMMs. Both give the same results within float rounding.
enum class ConvPath { Im2colGemm, Cudnn };
/// "im2col_gemm" / "cudnn".
const char* conv_path_name(ConvPath path);
/// Whether this build has cuDNN (CMake QAT_CUDNN; installed package: qat_HAS_CUDNN).
bool has_cudnn();
/// The path conv2d takes on CUDA: what set_conv_path() chose last, else cuDNN when built with
/// it unless the environment says QAT_CUDNN=0 (read at the first call), else im2col + cuBLAS.
ConvPath conv_path();
/// Forces `path` for every conv2d from now on; throws qat::Error for Cudnn without has_cudnn().
void set_conv_path(ConvPath path);

/// Sets a conv2d path for a scope and restores the previous one.
class ConvPathGuard {
 public:
  explicit ConvPathGuard(ConvPath path) : previous_(conv_path()) { set_conv_path(path); }
  ~ConvPathGuard() { set_conv_path(previous_); }
  ConvPathGuard(const ConvPathGuard&) = delete;
  ConvPathGuard& operator=(const ConvPathGuard&) = delete;

 private:
  ConvPath previous_;
};

namespace detail {
/// The path QAT_CUDNN=`value` selects (nullptr: unset) in a build with or without cuDNN: "0"
/// im2col + cuBLAS, "1" / unset / "" cuDNN if built. `warning` receives one line (else "") for
/// another value or for "1" without cuDNN; the default is used then.
ConvPath conv_path_from_env(const char* value, bool cudnn_built, std::string* warning);
}  // namespace detail

/// Whether float32 matmul / linear and conv2d on CUDA may run on TF32 tensor cores (products of
/// 10-bit mantissas summed in float32: about 1e-3 relative error, as PyTorch's allow_tf32). Off by
/// default: float32 stays float32 (cuBLAS pedantic math, cuDNN FMA math). QAT_CUDA_TF32=1 in the
/// environment turns it on (read at the first call); set_allow_tf32() decides from then on (set
/// it before training: calls already queued keep the mode they were issued with). float64 and
/// the quantization kernels are not affected.
bool allow_tf32();
void set_allow_tf32(bool on);

/// Sets allow_tf32 for a scope and restores the previous value.
class Tf32Guard {
 public:
  explicit Tf32Guard(bool on) : previous_(allow_tf32()) { set_allow_tf32(on); }
  ~Tf32Guard() { set_allow_tf32(previous_); }
  Tf32Guard(const Tf32Guard&) = delete;
  Tf32Guard& operator=(const Tf32Guard&) = delete;

 private:
  bool previous_;
};

namespace detail {
/// allow_tf32 as QAT_CUDA_TF32=`value` sets it (nullptr: unset): "1" on, "0" / unset / "" off;
/// `warning` receives one line (else "") for another value, which leaves it off.
bool tf32_from_env(const char* value, std::string* warning);
}  // namespace detail

/// Host -> device copies of input batches through page-locked (pinned) host buffers, so that the
/// copy runs asynchronously while the GPU works on the previous step: to_device() copies the
/// batch into the next of `slots` pinned buffers, queues cudaMemcpyAsync on the one stream
/// (kernels queued after it read the data in order) and returns at once. A buffer is written
/// again only after the copy that last used it has finished (an event per buffer); buffers grow
/// to the largest batch seen and are freed with the stager.
///
///   cuda::PinnedStager stage;
///   for (const data::Batch& b : loader) {
///     const Tensor x = stage.to_device(b.images), y = stage.to_device(b.labels);
///     ...
class PinnedStager {
 public:
  explicit PinnedStager(int slots = 4);
  ~PinnedStager();
  PinnedStager(const PinnedStager&) = delete;
  PinnedStager& operator=(const PinnedStager&) = delete;
  /// A CUDA tensor with `host`'s shape, dtype and values (a contiguous CPU tensor; a CUDA one is
  /// returned as it is). Throws qat::Error naming the function without a device.
  Tensor to_device(const Tensor& host);

 private:
  struct Impl;
  [[maybe_unused]] Impl* impl_;  // (unused by the stubs of a build without CUDA)
};

}  // namespace qat::cuda
