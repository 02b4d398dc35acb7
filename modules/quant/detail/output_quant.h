#pragma once
// Internal: helpers of the int8 modules that keep an output quantization as buffers
// (scale float32 [1], zero_point int32 [1], output_range int32 [2]): quantized_layers.cpp and
// functional.cpp.
#include <cmath>
#include <cstdint>
#include <iomanip>
#include <string>
#include <vector>

#include "framework/tensor/tensor.h"
#include "modules/quant/quantized_layers.h"

namespace qat::quant::detail {

inline Tensor scalar_f(float v) { return Tensor::full(Shape{1}, v, DType::Float32); }
inline Tensor scalar_i(std::int32_t v) { return Tensor::full(Shape{1}, v, DType::Int32); }
/// "scale=0.00390485, zero_point=0"; scales that differ only beyond 6 digits print with 9.
inline std::string quant_str(QuantInfo q) {
  const std::string s = ::qat::detail::concat(q.scale);
  return ::qat::detail::concat(
      "scale=", std::stod(s) == q.scale ? s : ::qat::detail::concat(std::setprecision(9), q.scale),
      ", zero_point=", q.zero_point);
}
/// check_state rules of the int8 modules: the output stage ("scale" in [kMinScale, kMaxScale],
/// "output_range" {lo, hi} with 0 <= lo <= zero_point <= hi <= 255), and an input quantization
/// (`scale` a sane scale, `zero_point` in [0, 255]).
void check_output_state(const nn::Module::StateView& state, std::vector<std::string>& problems);
void check_input_state(const nn::Module::StateView& state, const std::string& scale,
                       const std::string& zero_point, std::vector<std::string>& problems);
/// Throws qat::Error naming the module's type and every problem its check_state finds (the
/// constructors of the int8 modules: convert cannot build one a load would refuse).
void require_valid_state(const nn::Module& m);

/// The output_range buffer {lo, hi} of `a`, after checking scale > 0 and
/// 0 <= lo <= zero_point <= hi <= 255 (errors name `who`).
inline Tensor range_of(const ActivationQuant& a, const char* who) {
  QAT_REQUIRE(a.quant.scale > 0 && std::isfinite(a.quant.scale), who, "scale must be positive, got ",
              a.quant.scale);
  QAT_REQUIRE(0 <= a.lo && a.lo <= a.quant.zero_point && a.quant.zero_point <= a.hi && a.hi <= 255, who,
              "needs 0 <= lo <= zero_point <= hi <= 255, got lo ", a.lo, ", zero_point ",
              a.quant.zero_point, ", hi ", a.hi);
  return Tensor::from_vector<std::int32_t>({a.lo, a.hi}, Shape{2});
}

}  // namespace qat::quant::detail
