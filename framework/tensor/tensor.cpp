#include "framework/tensor/tensor.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <ostream>
#include <sstream>

#include "framework/autograd/engine.h"
#include "framework/kernels/cuda/runtime.h"
#include "framework/tensor/dispatch.h"
#include "framework/tensor/random.h"

namespace qat {

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage =
      std::make_shared<Storage>(static_cast<std::size_t>(shape.numel()) * element_size(dtype), device);
  impl->shape = shape;
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

namespace {

// The first element's address on whichever device holds it.
void* first_byte(const TensorImpl& s) {
  return static_cast<char*>(s.storage->data()) + s.offset * element_size(s.dtype);
}

[[noreturn]] void throw_wrong_device(const TensorImpl& s, const char* fn, Device want) {
  throw Error(
      detail::concat(fn, ": ", dtype_name(s.dtype), " tensor of shape ", s.shape, " is on ",
                     device_name(s.storage->device()), ", this code needs it on ", device_name(want),
                     want == Device::CPU ? " (an op without a CUDA kernel: not implemented on CUDA yet; "
                                           "move the tensor with to(Device::CPU))"
                                         : ""));
}

}  // namespace

Tensor Tensor::zeros(const Shape& shape, DType dtype, Device device) {
  Tensor t = empty(shape, dtype, device);
  if (device == Device::CPU) {
    std::memset(t.raw_data(), 0, t.nbytes());
  } else {
    const std::uint64_t zero = 0;
    cuda::detail::fill(first_byte(t.impl()), &zero, element_size(dtype), t.numel(), "Tensor::zeros");
  }
  return t;
}

Tensor Tensor::ones(const Shape& shape, DType dtype, Device device) {
  return full(shape, 1.0, dtype, device);
}

Tensor Tensor::full(const Shape& shape, double value, DType dtype, Device device) {
  Tensor t = empty(shape, dtype, device);
  t.fill_(value);
  return t;
}

Tensor Tensor::scalar(double value, DType dtype, Device device) {
  return full(Shape{}, value, dtype, device);
}

template <class T>
Tensor Tensor::from_vector(const std::vector<T>& values, const Shape& shape) {
  QAT_REQUIRE(static_cast<std::int64_t>(values.size()) == shape.numel(), "Tensor::from_vector", "got ",
              values.size(), " values for shape ", shape, " (", shape.numel(), " elements)");
  Tensor t = empty(shape, dtype_of_v<T>);
  if (!values.empty()) std::memcpy(t.raw_data(), values.data(), values.size() * sizeof(T));
  return t;
}

Tensor Tensor::uniform(const Shape& shape, double lo, double hi, Generator& gen, DType dtype) {
  Tensor t = empty(shape, dtype);
  detail::dispatch_float(dtype, "Tensor::uniform", [&]<class T>() {
    T* p = t.data<T>();
    for (std::int64_t i = 0; i < t.numel(); ++i) p[i] = static_cast<T>(lo + (hi - lo) * gen.uniform());
  });
  return t;
}

Tensor Tensor::normal(const Shape& shape, double mean, double std, Generator& gen, DType dtype) {
  Tensor t = empty(shape, dtype);
  detail::dispatch_float(dtype, "Tensor::normal", [&]<class T>() {
    T* p = t.data<T>();
    for (std::int64_t i = 0; i < t.numel(); ++i) p[i] = static_cast<T>(mean + std * gen.normal());
  });
  return t;
}

template <class T>
T* Tensor::data() const {
  const TensorImpl& s = impl();
  QAT_REQUIRE(s.dtype == dtype_of_v<T>, "Tensor::data", "requested ", dtype_name(dtype_of_v<T>),
              " from a ", dtype_name(s.dtype), " tensor of shape ", s.shape);
  if (s.storage->device() != Device::CPU) throw_wrong_device(s, "Tensor::data", Device::CPU);
  return static_cast<T*>(s.storage->data()) + s.offset;
}

void* Tensor::raw_data() const {
  const TensorImpl& s = impl();
  if (s.storage->device() != Device::CPU) throw_wrong_device(s, "Tensor::raw_data", Device::CPU);
  return first_byte(s);
}

void* Tensor::cuda_raw_data() const {
  const TensorImpl& s = impl();
  if (s.storage->device() != Device::CUDA) throw_wrong_device(s, "Tensor::cuda_raw_data", Device::CUDA);
  return first_byte(s);
}

template <class T>
T* Tensor::cuda_data() const {
  const TensorImpl& s = impl();
  QAT_REQUIRE(s.dtype == dtype_of_v<T>, "Tensor::cuda_data", "requested ", dtype_name(dtype_of_v<T>),
              " from a ", dtype_name(s.dtype), " tensor of shape ", s.shape);
  if (s.storage->device() != Device::CUDA) throw_wrong_device(s, "Tensor::cuda_data", Device::CUDA);
  return static_cast<T*>(s.storage->data()) + s.offset;
}

template <class T>
std::vector<T> Tensor::to_vector() const {
  if (device() != Device::CPU) return to(Device::CPU).to_vector<T>();
  const T* p = data<T>();
  return std::vector<T>(p, p + numel());
}

double Tensor::item() const {
  QAT_REQUIRE(numel() == 1, "Tensor::item", "tensor of shape ", shape(), " has ", numel(),
              " elements, expected 1");
  if (device() != Device::CPU) return to(Device::CPU).item();
  return detail::dispatch_any(dtype(), [&]<class T>() { return static_cast<double>(*data<T>()); });
}

Tensor Tensor::clone() const {
  Tensor t = empty(shape(), dtype(), device());
  t.copy_(*this);
  t.impl().quant = impl().quant;
  return t;
}

Tensor Tensor::to(Device target) const {
  if (target == device()) return *this;
  if (target == Device::CUDA && numel() > 0) cuda::detail::require_device("Tensor::to(cuda)");
  Tensor t = empty(shape(), dtype(), target);
  t.copy_(*this);
  t.impl().quant = impl().quant;
  return t;
}

QuantInfo Tensor::quant_info() const {
  QAT_REQUIRE(is_quantized(), "Tensor::quant_info", dtype_name(dtype()), " tensor of shape ", shape(),
              " is not quantized");
  return *impl().quant;
}

const Tensor& Tensor::set_quant_info(QuantInfo info) const {
  QAT_REQUIRE(dtype() == DType::Int8 || dtype() == DType::UInt8 || dtype() == DType::Int32,
              "Tensor::set_quant_info", "only int8, uint8 and int32 tensors can be quantized, got ",
              dtype_name(dtype()));
  QAT_REQUIRE(info.scale > 0 && std::isfinite(info.scale), "Tensor::set_quant_info",
              "scale must be positive and finite, got ", info.scale);
  impl().quant = info;
  return *this;
}

namespace {
// float -> integer: round half to even (the default FP rounding mode), then saturate.
template <class To, class From>
To convert_value(From v) {
  if constexpr (std::is_floating_point_v<To> || !std::is_floating_point_v<From>) {
    return static_cast<To>(v);
  } else {
    if (std::isnan(v)) return 0;
    const From r = std::nearbyint(v);
    if (r <= static_cast<From>(std::numeric_limits<To>::lowest()))
      return std::numeric_limits<To>::lowest();
    if (r >= static_cast<From>(std::numeric_limits<To>::max())) return std::numeric_limits<To>::max();
    return static_cast<To>(r);
  }
}
}  // namespace

Tensor Tensor::to(DType target) const {
  if (target == dtype()) return clone();
  require_cpu("Tensor::to(DType)", {{"self", this}});
  Tensor t = empty(shape(), target);
  const std::int64_t n = numel();
  detail::dispatch_any(dtype(), [&]<class From>() {
    detail::dispatch_any(target, [&]<class To>() {
      const From* src = data<From>();
      To* dst = t.data<To>();
      for (std::int64_t i = 0; i < n; ++i) dst[i] = convert_value<To>(src[i]);
    });
  });
  return t;
}

Tensor Tensor::view_as_shape(const Shape& new_shape) const {
  QAT_REQUIRE(new_shape.numel() == numel(), "Tensor::view_as_shape", "cannot view shape ", shape(),
              " as ", new_shape);
  auto v = std::make_shared<TensorImpl>();
  v->storage = impl().storage;
  v->offset = impl().offset;
  v->shape = new_shape;
  v->dtype = dtype();
  v->quant = impl().quant;
  return Tensor(std::move(v));
}

Tensor Tensor::rows(std::int64_t begin, std::int64_t end) const {
  QAT_REQUIRE(dim() >= 1, "Tensor::rows", "tensor of shape ", shape(), " has no rows");
  QAT_REQUIRE(0 <= begin && begin <= end && end <= size(0), "Tensor::rows", "range [", begin, ", ", end,
              ") is out of bounds for shape ", shape());
  Shape s = shape();
  const std::int64_t row = s[0] == 0 ? 0 : numel() / s[0];
  s[0] = end - begin;
  auto v = std::make_shared<TensorImpl>();
  v->storage = impl().storage;
  v->offset = impl().offset + begin * row;
  v->shape = s;
  v->dtype = dtype();
  v->quant = impl().quant;
  return Tensor(std::move(v));
}

const Tensor& Tensor::fill_(double value) const {
  if (device() != Device::CPU) {
    detail::dispatch_any(dtype(), [&]<class T>() {
      const T v = static_cast<T>(value);
      cuda::detail::fill(first_byte(impl()), &v, sizeof(T), numel(), "Tensor::fill_");
    });
    return *this;
  }
  detail::dispatch_any(dtype(), [&]<class T>() {
    T* p = data<T>();
    const T v = static_cast<T>(value);
    for (std::int64_t i = 0; i < numel(); ++i) p[i] = v;
  });
  return *this;
}

const Tensor& Tensor::copy_(const Tensor& src) const {
  QAT_REQUIRE(src.shape() == shape() && src.dtype() == dtype(), "Tensor::copy_", "source ",
              dtype_name(src.dtype()), src.shape(), " does not match destination ", dtype_name(dtype()),
              shape());
  if (is_same(src)) return *this;
  if (device() == Device::CPU && src.device() == Device::CPU)
    std::memmove(raw_data(), src.raw_data(), nbytes());
  else
    cuda::detail::copy(first_byte(impl()), device(), first_byte(src.impl()), src.device(), nbytes(),
                       "Tensor::copy_");
  return *this;
}

Tensor& Tensor::requires_grad_(bool value) {
  QAT_REQUIRE(is_leaf(), "Tensor::requires_grad_",
              "can only be set on a leaf tensor (this one was produced by an op)");
  QAT_REQUIRE(!value || is_floating(dtype()), "Tensor::requires_grad_",
              "only floating point tensors can require gradients, got ", dtype_name(dtype()));
  impl().requires_grad = value;
  return *this;
}

Tensor Tensor::grad() const {
  const auto& g = impl().grad;
  return g ? Tensor(g) : Tensor();
}

void Tensor::set_grad(const Tensor& g) {
  if (g.defined()) {
    QAT_REQUIRE(g.shape() == shape() && g.dtype() == dtype(), "Tensor::set_grad", "gradient ",
                dtype_name(g.dtype()), g.shape(), " does not match tensor ", dtype_name(dtype()),
                shape());
  }
  impl().grad = g.impl_ptr();
}

void Tensor::zero_grad() { impl().grad.reset(); }

Tensor Tensor::detach() const { return view_as_shape(shape()); }

void Tensor::backward(const Tensor& grad_output, bool retain_graph) const {
  autograd::backward(*this, grad_output, retain_graph);
}

std::string Tensor::str() const {
  std::ostringstream os;
  os << *this;
  return os.str();
}

std::ostream& operator<<(std::ostream& os, DType t) { return os << dtype_name(t); }
std::ostream& operator<<(std::ostream& os, Device d) { return os << device_name(d); }

std::ostream& operator<<(std::ostream& os, const Tensor& t) {
  if (!t.defined()) return os << "Tensor(undefined)";
  if (t.device() != Device::CPU) {  // printing asks for the values: one copy to the host
    std::ostringstream host;
    host << t.to(Device::CPU);
    std::string text = host.str();
    return os << text.substr(0, text.size() - 1) << ", device " << device_name(t.device()) << ")";
  }
  os << "Tensor(" << dtype_name(t.dtype()) << t.shape() << ", [";
  const std::int64_t n = t.numel(), shown = std::min<std::int64_t>(n, 8);
  detail::dispatch_any(t.dtype(), [&]<class T>() {
    const T* p = t.data<T>();
    for (std::int64_t i = 0; i < shown; ++i) {
      if (i) os << ", ";
      if constexpr (sizeof(T) == 1)
        os << static_cast<int>(p[i]);
      else
        os << p[i];
    }
  });
  if (n > shown) os << ", ...";
  os << "]";
  if (t.is_quantized())
    os << ", scale " << t.quant_info().scale << ", zero_point " << t.quant_info().zero_point;
  if (t.requires_grad()) os << ", requires_grad";
  return os << ")";
}

void require_dtype(const Tensor& t, DType dtype, const char* fn, const char* arg) {
  QAT_REQUIRE(t.defined(), fn, "argument '", arg, "' is an undefined tensor");
  QAT_REQUIRE(t.dtype() == dtype, fn, "argument '", arg, "' must be ", dtype_name(dtype), ", got ",
              dtype_name(t.dtype()), " of shape ", t.shape());
}

void require_float(const Tensor& t, const char* fn, const char* arg) {
  QAT_REQUIRE(t.defined(), fn, "argument '", arg, "' is an undefined tensor");
  QAT_REQUIRE(is_floating(t.dtype()), fn, "argument '", arg, "' must be float32 or float64, got ",
              dtype_name(t.dtype()), " of shape ", t.shape());
}

void require_rank(const Tensor& t, int rank, const char* fn, const char* arg) {
  QAT_REQUIRE(t.defined(), fn, "argument '", arg, "' is an undefined tensor");
  QAT_REQUIRE(t.dim() == rank, fn, "argument '", arg, "' must have rank ", rank, ", got shape ",
              t.shape());
}

Device common_device(const char* fn, std::initializer_list<std::pair<const char*, const Tensor*>> args) {
  const std::pair<const char*, const Tensor*>* first = nullptr;
  for (const auto& a : args) {
    if (!a.second->defined()) continue;
    if (first == nullptr) {
      first = &a;
    } else if (a.second->device() != first->second->device()) {
      throw Error(detail::concat(fn, ": tensors on different devices: '", first->first, "' ",
                                 first->second->shape(), " is on ", device_name(first->second->device()),
                                 ", '", a.first, "' ", a.second->shape(), " is on ",
                                 device_name(a.second->device())));
    }
  }
  return first == nullptr ? Device::CPU : first->second->device();
}

void require_cpu(const char* fn, std::initializer_list<std::pair<const char*, const Tensor*>> args) {
  for (const auto& a : args)
    if (a.second->defined() && a.second->device() != Device::CPU)
      throw Error(detail::concat(fn, ": not implemented on CUDA yet (argument '", a.first, "' ",
                                 dtype_name(a.second->dtype()), a.second->shape(), " is on ",
                                 device_name(a.second->device()), "; move it with to(Device::CPU))"));
}

#define QAT_INSTANTIATE(T)                                                     \
  template Tensor Tensor::from_vector<T>(const std::vector<T>&, const Shape&); \
  template T* Tensor::data<T>() const;                                         \
  template T* Tensor::cuda_data<T>() const;                                    \
  template std::vector<T> Tensor::to_vector<T>() const;
QAT_INSTANTIATE(float)
QAT_INSTANTIATE(double)
QAT_INSTANTIATE(std::int8_t)
QAT_INSTANTIATE(std::uint8_t)
QAT_INSTANTIATE(std::int16_t)
QAT_INSTANTIATE(std::int32_t)
QAT_INSTANTIATE(std::int64_t)
#undef QAT_INSTANTIATE

}  // namespace qat
