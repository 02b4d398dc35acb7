#include "framework/tensor/error.h"

#include <cstdio>
#include <cstdlib>

namespace qat::detail {

std::string printable(std::string_view text) {
  static const char* hex = "0123456789abcdef";
  std::string out;
  out.reserve(text.size());
  auto escape = [&](unsigned char c) {
    out += "\\x";
    out += hex[c >> 4];
    out += hex[c & 15];
  };
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const std::size_t n = text.size();
  for (std::size_t i = 0; i < n;) {
    const unsigned char c = s[i];
    if (c == '\n' || c == '\r' || c == '\t' || c == '\\') {
      out += '\\';
      out += c == '\n' ? 'n' : c == '\r' ? 'r' : c == '\t' ? 't' : '\\';
      ++i;
      continue;
    }
    if (c < 0x20 || c == 0x7f) {
      escape(c);
      ++i;
      continue;
    }
    if (c < 0x80) {
      out += static_cast<char>(c);
      ++i;
      continue;
    }
    // A well-formed UTF-8 sequence (no overlongs, surrogates or C1 controls) passes whole.
    std::size_t len = c >= 0xc2 && c <= 0xdf   ? 2
                      : c >= 0xe0 && c <= 0xef ? 3
                      : c >= 0xf0 && c <= 0xf4 ? 4
                                               : 0;
    bool ok = len != 0 && i + len <= n;
    for (std::size_t k = 1; ok && k < len; ++k) ok = (s[i + k] & 0xc0) == 0x80;
    if (ok) {
      const unsigned char c1 = s[i + 1];
      if (c == 0xc2 && c1 < 0xa0) ok = false;   // U+0080..U+009F: C1 controls
      if (c == 0xe0 && c1 < 0xa0) ok = false;   // overlong
      if (c == 0xed && c1 >= 0xa0) ok = false;  // surrogates
      if (c == 0xf0 && c1 < 0x90) ok = false;   // overlong
      if (c == 0xf4 && c1 >= 0x90) ok = false;  // > U+10FFFF
    }
    if (!ok) {
      escape(c);
      ++i;
      continue;
    }
    out.append(text.data() + i, len);
    i += len;
  }
  return out;
}

void check_failed(const char* cond, const char* file, int line, const std::string& msg) {
  std::fprintf(stderr, "qat internal error: %s:%d: check failed: %s %s\n", file, line, cond,
               msg.c_str());
  std::abort();
}

}  // namespace qat::detail
