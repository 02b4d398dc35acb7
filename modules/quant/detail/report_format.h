#pragma once
// Small text helpers shared by the sensitivity and mixed-precision reports: fixed-precision
// numbers, JSON numbers / strings, and left/right aligned text tables.
#include <algorithm>
#include <cmath>
#include <iomanip>
#include <sstream>
#include <string>
#include <vector>

namespace qat::quant::detail {

/// "1.234" with `precision` decimals; "-" for NaN, "inf" / "-inf".
inline std::string fixed(double v, int precision) {
  if (std::isnan(v)) return "-";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  std::ostringstream s;
  s << std::fixed << std::setprecision(precision) << v;
  return s.str();
}

/// NaN as null, infinities as the strings "inf" / "-inf".
inline std::string json_number(double v) {
  if (std::isnan(v)) return "null";
  if (std::isinf(v)) return v > 0 ? "\"inf\"" : "\"-inf\"";
  std::ostringstream s;
  s << std::setprecision(9) << v;
  return s.str();
}

inline std::string json_string(const std::string& v) {
  std::string out = "\"";
  for (char c : v) {
    if (c == '"' || c == '\\')
      out += std::string{'\\', c};
    else if (static_cast<unsigned char>(c) < 0x20)
      out += ' ';
    else
      out += c;
  }
  return out + "\"";
}

/// Rows of cells, the first `left` columns left-aligned and the rest right-aligned.
inline std::string aligned(const std::vector<std::vector<std::string>>& rows, std::size_t left) {
  std::vector<std::size_t> width;
  for (const auto& row : rows) {
    width.resize(std::max(width.size(), row.size()), 0);
    for (std::size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], row[c].size());
  }
  std::ostringstream s;
  for (const auto& row : rows) {
    for (std::size_t c = 0; c < row.size(); ++c)
      s << (c ? "  " : "") << (c < left ? std::left : std::right)
        << std::setw(static_cast<int>(width[c])) << row[c];
    s << "\n";
  }
  return s.str();
}

}  // namespace qat::quant::detail
