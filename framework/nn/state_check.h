#pragma once
// Value checks for Module::check_state: each appends at most one line per tensor, naming the
// tensor, the first offending index and value, and how many values are wrong:
//   "scale[3] = 1e-45: not a scale in [1.17549e-38, 1e+30] (2 of 10 values)"
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "framework/nn/module.h"

namespace qat::nn::check {

using Problems = std::vector<std::string>;
using StateView = Module::StateView;

/// Sane scales: normal float32 and at most 1e30 (a denormal or huge scale is a corrupt value).
inline constexpr double kMinScale = 1.17549435082228750797e-38;  // FLT_MIN
inline constexpr double kMaxScale = 1e30;

/// The tensor `name` in `state`, or null if absent or undefined.
const Tensor* find(const StateView& state, const std::string& name);

/// Every value finite (floating tensors; integer tensors always pass).
void finite(Problems& p, const StateView& state, const std::string& name);
/// Every value v with lo <= v <= hi (read as double, so NaN fails); `what` names the quantity
/// ("a scale", "a zero point of int8 symmetric").
void in_range(Problems& p, const StateView& state, const std::string& name, double lo, double hi,
              std::string_view what);
/// Every value 0 or 1 (uint8 switches).
void flag(Problems& p, const StateView& state, const std::string& name);
/// Every value equal to `value` (e.g. the fixed zero point of a symmetric spec).
void equals(Problems& p, const StateView& state, const std::string& name, double value,
            std::string_view why);
/// Every value v with ok(v) (read as double); `why()` says what a value must be (called only
/// when one fails).
void satisfies(Problems& p, const StateView& state, const std::string& name,
               const std::function<bool(double)>& ok, const std::function<std::string()>& why);
/// Scales: in [kMinScale, kMaxScale].
inline void scale(Problems& p, const StateView& state, const std::string& name) {
  in_range(p, state, name, kMinScale, kMaxScale, "a scale");
}

/// "v" for integer values, shortest round-trip text for floats ("nan", "inf", "1e-45").
std::string value_text(double v);

}  // namespace qat::nn::check
