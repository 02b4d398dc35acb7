#pragma once
#include <cstddef>
#include <cstdint>
#include <iosfwd>
#include <string_view>

namespace qat {

/// Element type of a tensor. Training runs in Float32; Float64 exists for gradient checks;
/// the integer types hold converted (int8 inference) models, labels and indices.
enum class DType : std::uint8_t { Float32, Float64, Int8, UInt8, Int16, Int32, Int64 };

constexpr std::size_t element_size(DType t) {
  switch (t) {
    case DType::Float32:
      return 4;
    case DType::Float64:
      return 8;
    case DType::Int8:
      return 1;
    case DType::UInt8:
      return 1;
    case DType::Int16:
      return 2;
    case DType::Int32:
      return 4;
    case DType::Int64:
      return 8;
  }
  return 0;
}

constexpr std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::Float32:
      return "float32";
    case DType::Float64:
      return "float64";
    case DType::Int8:
      return "int8";
    case DType::UInt8:
      return "uint8";
    case DType::Int16:
      return "int16";
    case DType::Int32:
      return "int32";
    case DType::Int64:
      return "int64";
  }
  return "?";
}

constexpr bool is_floating(DType t) { return t == DType::Float32 || t == DType::Float64; }

/// C++ type -> DType, for typed data access.
template <class T>
struct dtype_of;
template <>
struct dtype_of<float> {
  static constexpr DType value = DType::Float32;
};
template <>
struct dtype_of<double> {
  static constexpr DType value = DType::Float64;
};
template <>
struct dtype_of<std::int8_t> {
  static constexpr DType value = DType::Int8;
};
template <>
struct dtype_of<std::uint8_t> {
  static constexpr DType value = DType::UInt8;
};
template <>
struct dtype_of<std::int16_t> {
  static constexpr DType value = DType::Int16;
};
template <>
struct dtype_of<std::int32_t> {
  static constexpr DType value = DType::Int32;
};
template <>
struct dtype_of<std::int64_t> {
  static constexpr DType value = DType::Int64;
};
template <class T>
inline constexpr DType dtype_of_v = dtype_of<T>::value;

/// Where a tensor's bytes live. CPU is the reference; CUDA (device 0, one stream) has kernels for
/// the ops listed in README's CUDA section, and the others throw naming the op.
enum class Device : std::uint8_t { CPU, CUDA };

constexpr std::string_view device_name(Device d) { return d == Device::CPU ? "cpu" : "cuda"; }

std::ostream& operator<<(std::ostream& os, DType t);
std::ostream& operator<<(std::ostream& os, Device d);

}  // namespace qat
