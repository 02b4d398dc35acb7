#pragma once
// The message of the exception a callable throws (tests only).
#include <string>

#include "framework/tensor/error.h"

namespace qat::test {

/// The what() of the E that f throws, or "(no error)" if it throws none.
template <class E = Error, class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace qat::test
