#pragma once
// Internal: calls a templated lambda with the C++ type matching a runtime DType.
//   detail::dispatch_float(x.dtype(), "relu", [&]<class T>() { ... });
#include <cstdint>

#include "framework/tensor/dtype.h"
#include "framework/tensor/error.h"

namespace qat::detail {

template <class F>
decltype(auto) dispatch_float(DType t, const char* fn, F&& f) {
  switch (t) {
    case DType::Float32:
      return f.template operator()<float>();
    case DType::Float64:
      return f.template operator()<double>();
    default:
      throw Error(concat(fn, ": expected a float32 or float64 tensor, got ", dtype_name(t)));
  }
}

template <class F>
decltype(auto) dispatch_any(DType t, F&& f) {
  switch (t) {
    case DType::Float32:
      return f.template operator()<float>();
    case DType::Float64:
      return f.template operator()<double>();
    case DType::Int8:
      return f.template operator()<std::int8_t>();
    case DType::UInt8:
      return f.template operator()<std::uint8_t>();
    case DType::Int16:
      return f.template operator()<std::int16_t>();
    case DType::Int32:
      return f.template operator()<std::int32_t>();
    case DType::Int64:
      return f.template operator()<std::int64_t>();
  }
  QAT_CHECK(false, "unknown dtype");
  return f.template operator()<float>();
}

}  // namespace qat::detail
