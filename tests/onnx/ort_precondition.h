#pragma once
// Boost.Test precondition for test cases that need ONNX Runtime (and, optionally, something
// else): without it the case is reported as skipped with the reason, never passed silently.
#include <boost/test/unit_test.hpp>
#include <functional>
#include <iostream>
#include <string>

#include "onnx/ort_runner.h"

namespace qat::test {

struct OrtAvailable {
  /// `also`: a further requirement, returning why it is unmet ("" when met).
  explicit OrtAvailable(std::function<std::string()> also = {}) : also_(std::move(also)) {}
  boost::test_tools::assertion_result operator()(boost::unit_test::test_unit_id) const {
    std::string why = ort_unavailable();
    why = why.empty() ? (also_ ? also_() : "") : "ONNX Runtime is unavailable: " + why;
    boost::test_tools::assertion_result r = why.empty();
    if (!r) {
      r.message() << why;
      std::cout << "skipped: " << why << std::endl;
    }
    return r;
  }

 private:
  std::function<std::string()> also_;
};

}  // namespace qat::test
