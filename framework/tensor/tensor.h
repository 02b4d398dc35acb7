#pragma once
#include <cstdint>
#include <initializer_list>
#include <iosfwd>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "framework/tensor/dtype.h"
#include "framework/tensor/error.h"
#include "framework/tensor/shape.h"
#include "framework/tensor/storage.h"

namespace qat {

class Generator;
struct Node;

/// Affine quantization of an integer tensor, per tensor: real = scale * (q - zero_point).
struct QuantInfo {
  double scale = 1.0;
  std::int32_t zero_point = 0;
  bool operator==(const QuantInfo&) const = default;
};

/// Shared state behind a Tensor handle.
struct TensorImpl {
  std::shared_ptr<Storage> storage;
  std::int64_t offset = 0;  // in elements
  Shape shape;
  DType dtype = DType::Float32;
  bool requires_grad = false;
  std::shared_ptr<TensorImpl> grad;  // accumulated gradient (leaves)
  std::shared_ptr<Node> grad_fn;     // the op that produced this tensor (non-leaves)
  std::optional<QuantInfo> quant;    // set on quantized integer tensors (int8 inference)
};

/// A value-semantics handle over a contiguous row-major tensor: copying a Tensor shares the
/// data and the autograd state (like torch::Tensor). `clone()` copies the data.
class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  // ---- creation ------------------------------------------------------------------------
  static Tensor empty(const Shape& shape, DType dtype = DType::Float32, Device device = Device::CPU);
  static Tensor zeros(const Shape& shape, DType dtype = DType::Float32, Device device = Device::CPU);
  static Tensor ones(const Shape& shape, DType dtype = DType::Float32, Device device = Device::CPU);
  static Tensor full(const Shape& shape, double value, DType dtype = DType::Float32,
                     Device device = Device::CPU);
  /// A rank-0 tensor holding `value`.
  static Tensor scalar(double value, DType dtype = DType::Float32, Device device = Device::CPU);
  /// Copies `values` into a new tensor of `shape` (numel must match) with T's dtype.
  template <class T>
  static Tensor from_vector(const std::vector<T>& values, const Shape& shape);
  /// Uniform in [lo, hi) / normal(mean, std), drawn from `gen`.
  static Tensor uniform(const Shape& shape, double lo, double hi, Generator& gen,
                        DType dtype = DType::Float32);
  static Tensor normal(const Shape& shape, double mean, double std, Generator& gen,
                       DType dtype = DType::Float32);

  // ---- inspection ----------------------------------------------------------------------
  bool defined() const { return impl_ != nullptr; }
  /// True for an integer tensor that carries its quantization parameters.
  bool is_quantized() const { return impl().quant.has_value(); }
  /// The quantization parameters; throws if the tensor is not quantized.
  QuantInfo quant_info() const;
  /// Attaches quantization parameters to an int8/uint8/int32 tensor (in place, returns *this).
  const Tensor& set_quant_info(QuantInfo info) const;
  const Shape& shape() const { return impl().shape; }
  int dim() const { return impl().shape.rank(); }
  /// Size of dimension `d` (negative counts from the end).
  std::int64_t size(int d) const { return impl().shape.at(d); }
  std::int64_t numel() const { return impl().shape.numel(); }
  DType dtype() const { return impl().dtype; }
  Device device() const { return impl().storage->device(); }
  std::size_t nbytes() const { return static_cast<std::size_t>(numel()) * element_size(dtype()); }

  /// Typed host pointer to the first element; throws if T does not match dtype() or the tensor
  /// is on a device (a CPU kernel never reads device memory: move it with to(Device::CPU)).
  template <class T>
  T* data() const;
  void* raw_data() const;
  /// Typed device pointer to the first element of a CUDA tensor (for CUDA kernels); throws if
  /// T does not match dtype() or the tensor is not on CUDA.
  template <class T>
  T* cuda_data() const;
  /// Untyped device pointer to the first element of a CUDA tensor (collectives move bytes).
  void* cuda_raw_data() const;
  /// The elements, copied to the host from any device.
  template <class T>
  std::vector<T> to_vector() const;
  /// The value of a one-element tensor, converted to double (from a device: one copy to host).
  double item() const;

  /// Deep copy of the data (no autograd history).
  Tensor clone() const;
  /// Converted copy (no autograd history); float -> int rounds half to even and saturates.
  /// CPU tensors only.
  Tensor to(DType dtype) const;
  /// The data on `device`: this tensor itself when already there, else a copy (no autograd
  /// history; quantization info kept). Host <-> device copies wait for the copy to finish.
  Tensor to(Device device) const;
  /// Same data, new shape with the same numel (no autograd history; see qat::reshape for the op).
  Tensor view_as_shape(const Shape& shape) const;
  /// Rows [begin, end) along dimension 0, sharing storage (no autograd history).
  Tensor rows(std::int64_t begin, std::int64_t end) const;

  /// In-place writes to the shared data (const like every handle operation, as LibTorch's);
  /// they bypass autograd and are meant for initialisation, optimizers and checkpoints.
  const Tensor& fill_(double value) const;
  /// Copies src (same shape and dtype, any device) into this tensor's storage.
  const Tensor& copy_(const Tensor& src) const;

  // ---- autograd ------------------------------------------------------------------------
  bool requires_grad() const { return impl().requires_grad; }
  /// Marks a leaf as needing gradients. Throws on a non-leaf.
  Tensor& requires_grad_(bool value = true);
  bool is_leaf() const { return impl().grad_fn == nullptr; }
  /// The accumulated gradient, or an undefined tensor.
  Tensor grad() const;
  void set_grad(const Tensor& g);
  /// Drops the accumulated gradient (the next backward allocates a fresh one).
  void zero_grad();
  /// Same data, cut from the graph.
  Tensor detach() const;
  /// Reverse-mode differentiation from this tensor. `grad_output` defaults to 1 for a
  /// one-element tensor. The graph is freed afterwards unless `retain_graph`.
  void backward(const Tensor& grad_output = Tensor(), bool retain_graph = false) const;
  const std::shared_ptr<Node>& grad_fn() const { return impl().grad_fn; }

  TensorImpl& impl() const {
    QAT_REQUIRE(impl_ != nullptr, "Tensor", "use of an undefined tensor");
    return *impl_;
  }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }
  bool is_same(const Tensor& other) const { return impl_ == other.impl_; }
  std::string str() const;

 private:
  std::shared_ptr<TensorImpl> impl_;
};

std::ostream& operator<<(std::ostream& os, const Tensor& t);

/// (dotted name, tensor) pairs, in registration order: how modules expose parameters and
/// buffers, and what optimizers and checkpoints consume.
using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

/// Throws naming `fn` and `arg` unless `t` is defined and has dtype `dtype`.
void require_dtype(const Tensor& t, DType dtype, const char* fn, const char* arg);
/// Throws naming `fn` and `arg` unless `t` is defined, floating point and on the CPU.
void require_float(const Tensor& t, const char* fn, const char* arg);
/// Throws naming `fn` and `arg` unless `t` has rank `rank`.
void require_rank(const Tensor& t, int rank, const char* fn, const char* arg);
/// The device shared by the defined tensors among `args` (CPU when none is defined); throws
/// naming `fn` and both tensors' devices when they differ.
Device common_device(const char* fn, std::initializer_list<std::pair<const char*, const Tensor*>> args);
/// Throws "<fn>: not implemented on CUDA yet (argument '<arg>' is on cuda)" for an op that has
/// no CUDA kernel, when a defined tensor among `args` is not on the CPU.
void require_cpu(const char* fn, std::initializer_list<std::pair<const char*, const Tensor*>> args);

}  // namespace qat
