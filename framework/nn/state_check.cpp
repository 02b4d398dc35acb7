#include "framework/nn/state_check.h"

#include <cmath>
#include <sstream>
#include <type_traits>

#include "framework/tensor/dispatch.h"

namespace qat::nn::check {
namespace {

using qat::detail::concat;

// Counts the values of state[name] failing `ok` and reports the first of them; `why()` builds the
// reason only then (the divergence guard runs these checks every step: no text, no allocation
// while everything is fine).
template <class Ok, class Why>
void scan(Problems& p, const StateView& state, const std::string& name, const Ok& ok, const Why& why) {
  const Tensor* t = find(state, name);
  if (t == nullptr) return;
  const Tensor& c = *t;  // tensors are dense
  std::int64_t bad = 0, first = -1;
  std::string first_value;
  const std::int64_t n = c.numel();
  qat::detail::dispatch_any(c.dtype(), [&]<class T>() {
    const T* d = c.data<T>();
    for (std::int64_t i = 0; i < n; ++i) {
      const double v = static_cast<double>(d[i]);
      if (!ok(v) && bad++ == 0) {
        first = i;
        if constexpr (std::is_integral_v<T>)
          first_value = std::to_string(d[i]);
        else
          first_value = value_text(v);
      }
    }
  });
  if (bad == 0) return;
  std::string where = name;
  if (c.dim() > 0) where += concat("[", first, "]");
  const std::string count = n > 1 ? concat(" (", bad, " of ", n, " values)") : "";
  p.push_back(concat(where, " = ", first_value, ": ", why(), count));
}

}  // namespace

const Tensor* find(const StateView& state, const std::string& name) {
  const auto it = state.find(name);
  return it == state.end() || !it->second.defined() ? nullptr : &it->second;
}

std::string value_text(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  if (v == std::trunc(v) && std::fabs(v) < 1e18) return concat(static_cast<long long>(v));
  std::ostringstream os;
  os.precision(9);
  os << v;
  return os.str();
}

void satisfies(Problems& p, const StateView& state, const std::string& name,
               const std::function<bool(double)>& ok, const std::function<std::string()>& why) {
  scan(p, state, name, ok, why);
}

void finite(Problems& p, const StateView& state, const std::string& name) {
  scan(
      p, state, name, [](double v) { return std::isfinite(v); },
      [] { return std::string("not finite"); });
}

void in_range(Problems& p, const StateView& state, const std::string& name, double lo, double hi,
              std::string_view what) {
  scan(
      p, state, name, [lo, hi](double v) { return v >= lo && v <= hi; },
      [&] { return concat("not ", what, " in [", value_text(lo), ", ", value_text(hi), "]"); });
}

void flag(Problems& p, const StateView& state, const std::string& name) {
  scan(
      p, state, name, [](double v) { return v == 0 || v == 1; },
      [] { return std::string("a switch must be 0 or 1"); });
}

void equals(Problems& p, const StateView& state, const std::string& name, double value,
            std::string_view why) {
  scan(
      p, state, name, [value](double v) { return v == value; },
      [&] { return concat("must be ", value_text(value), " (", why, ")"); });
}

}  // namespace qat::nn::check
