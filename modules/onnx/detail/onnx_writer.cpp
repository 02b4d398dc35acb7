#include "modules/onnx/detail/onnx_writer.h"

#include <array>
#include <cmath>
#include <map>

#include "framework/tensor/error.h"

namespace qat::quant::onnx_writer {

// A table of all 256 codes decoded, E4M3FN (bias 7, no infinities) or E5M2 (bias 15).
std::uint8_t fp8_code(float v, Format format) {
  static const auto table = [] {
    std::array<std::map<float, std::uint8_t>, 2> t;
    for (int fmt = 0; fmt < 2; ++fmt)
      for (int c = 0; c < 256; ++c) {
        const int mbits = fmt == 0 ? 3 : 2, bias = fmt == 0 ? 7 : 15;
        const int e = (c & 0x7f) >> mbits, m = c & ((1 << mbits) - 1);
        if (fmt == 0 && (c & 0x7f) == 0x7f) continue;  // NaN
        if (fmt == 1 && e == 31) continue;             // inf, NaN
        const float mag = e == 0 ? std::ldexp(static_cast<float>(m), 1 - bias - mbits)
                                 : std::ldexp(static_cast<float>((1 << mbits) + m), e - bias - mbits);
        t[static_cast<std::size_t>(fmt)].emplace((c & 0x80) ? -mag : mag, static_cast<std::uint8_t>(c));
      }
    return t;
  }();
  const auto& t = table[format == Format::FP8_E4M3 ? 0 : 1];
  auto it = t.find(v == 0.0f ? 0.0f : v);
  QAT_CHECK(it != t.end(), "fp8_code: ", v, " is not an FP8 value");
  return it->second;
}

std::string raw_codes(const std::vector<std::int32_t>& codes, int type) {
  std::string raw;
  if (type == kInt4 || type == kUInt4) {
    raw.assign((codes.size() + 1) / 2, '\0');
    for (std::size_t i = 0; i < codes.size(); ++i)
      raw[i / 2] = static_cast<char>(static_cast<std::uint8_t>(raw[i / 2]) |
                                     ((static_cast<std::uint32_t>(codes[i]) & 0xF) << (4 * (i % 2))));
  } else if (type == kInt16 || type == kUInt16) {
    for (std::int32_t c : codes) {
      const auto u = static_cast<std::uint16_t>(c);
      raw.push_back(static_cast<char>(u & 0xFF));
      raw.push_back(static_cast<char>(u >> 8));
    }
  } else {
    for (std::int32_t c : codes) raw.push_back(static_cast<char>(static_cast<std::uint8_t>(c)));
  }
  return raw;
}

}  // namespace qat::quant::onnx_writer
