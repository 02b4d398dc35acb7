#pragma once
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>

namespace qat {

/// Thrown for wrong use by a caller: the message names the function, the argument and the value.
class Error : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

namespace detail {
template <class... Args>
std::string concat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}
/// `text` (a name or value read from a file) safe to print: control characters (C0, DEL, C1),
/// backslashes and bytes that are not UTF-8 become \n, \r, \t, \\ or \xNN, so an embedded NUL,
/// ESC / OSC sequence or carriage return reaches no terminal; valid UTF-8 letters stay.
std::string printable(std::string_view text);
[[noreturn]] void check_failed(const char* cond, const char* file, int line, const std::string& msg);
}  // namespace detail

/// Throws qat::Error("<fn>: " + message parts) when `cond` is false. For caller mistakes.
#define QAT_REQUIRE(cond, fn, ...)                                                 \
  do {                                                                             \
    if (!(cond)) throw ::qat::Error(::qat::detail::concat(fn, ": ", __VA_ARGS__)); \
  } while (0)

/// Broken internal invariant: a bug in this library, not in the caller's code.
#define QAT_CHECK(cond, ...)                                                             \
  do {                                                                                   \
    if (!(cond))                                                                         \
      ::qat::detail::check_failed(#cond, __FILE__, __LINE__,                             \
                                  ::qat::detail::concat("" __VA_OPT__(, ) __VA_ARGS__)); \
  } while (0)

}  // namespace qat
