#include "framework/nn/state_check.h"

#include <cmath>
#include <sstream>
#include <type_traits>

#include "framework/tensor/dispatch.h"

namespace qat::nn::check {
using detail::scan;
using qat::detail::concat;

void detail::report(Problems& p, const Tensor& t, const std::string& name, std::int64_t first,
                    const std::string& first_value, const std::string& why, std::int64_t bad) {
  std::string where = name;
  if (t.dim() > 0) where += concat("[", first, "]");
  const std::int64_t n = t.numel();
  const std::string count = n > 1 ? concat(" (", bad, " of ", n, " values)") : "";
  p.push_back(concat(where, " = ", first_value, ": ", why, count));
}

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

void finite(Problems& p, const StateView& state, const std::string& name) {
  scan(
      p, state, name, [](double v) { return std::isfinite(v); },
      [] { return std::string("not finite"); });
}

void in_range(Problems& p, const StateView& state, const std::string& name, double lo, double hi,
              std::string_view what) {
  scan(
      p, state, name, [lo, hi](double v) { return (v >= lo) & (v <= hi); },
      [&] { return concat("not ", what, " in [", value_text(lo), ", ", value_text(hi), "]"); });
}

void flag(Problems& p, const StateView& state, const std::string& name) {
  scan(
      p, state, name, [](double v) { return (v == 0) | (v == 1); },
      [] { return std::string("a switch must be 0 or 1"); });
}

void equals(Problems& p, const StateView& state, const std::string& name, double value,
            std::string_view why) {
  scan(
      p, state, name, [value](double v) { return v == value; },
      [&] { return concat("must be ", value_text(value), " (", why, ")"); });
}

}  // namespace qat::nn::check
