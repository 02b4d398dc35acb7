#pragma once
// Value checks for Module::check_state: each appends at most one line per tensor, naming the
// tensor, the first offending index and value, and how many values are wrong:
//   "scale[3] = 1e-45: not a scale in [1.17549e-38, 1e+30] (2 of 10 values)"
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "framework/nn/module.h"
#include "framework/tensor/dispatch.h"

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
/// "v" for integer values, shortest round-trip text for floats ("nan", "inf", "1e-45").
std::string value_text(double v);

namespace detail {
/// Appends "name[i] = v: why() (k of n values)" for the first failing value of t.
void report(Problems& p, const Tensor& t, const std::string& name, std::int64_t first,
            const std::string& first_value, const std::string& why, std::int64_t bad);

/// Counts the values of state[name] failing `ok` and reports the first of them; `why()` builds
/// the reason only then. The divergence guard runs these checks after every step: a
/// branch-free pass (vectorised where `ok` allows) accepts the common case, all values good,
/// without text, allocation or per-value branches.
template <class Ok, class Why>
void scan(Problems& p, const StateView& state, const std::string& name, const Ok& ok, const Why& why) {
  const Tensor* t = find(state, name);
  if (t == nullptr) return;
  const Tensor& c = *t;  // tensors are dense
  const std::int64_t n = c.numel();
  qat::detail::dispatch_any(c.dtype(), [&]<class T>() {
    const T* d = c.data<T>();
    std::int64_t bad = 0;  // a count (a bool reduction is not vectorised)
    for (std::int64_t i = 0; i < n; ++i) bad += !ok(static_cast<double>(d[i]));
    if (bad == 0) return;
    std::int64_t first = 0;
    while (ok(static_cast<double>(d[first]))) ++first;
    if constexpr (std::is_integral_v<T>)
      report(p, c, name, first, std::to_string(d[first]), why(), bad);
    else
      report(p, c, name, first, value_text(static_cast<double>(d[first])), why(), bad);
  });
}
}  // namespace detail

/// Every value v with ok(v) (read as double); `why()` returns what a value must be (called only
/// when one fails).
template <class Ok, class Why>
void satisfies(Problems& p, const StateView& state, const std::string& name, const Ok& ok,
               const Why& why) {
  detail::scan(p, state, name, ok, why);
}
/// Scales: in [kMinScale, kMaxScale].
inline void scale(Problems& p, const StateView& state, const std::string& name) {
  in_range(p, state, name, kMinScale, kMaxScale, "a scale");
}

}  // namespace qat::nn::check
