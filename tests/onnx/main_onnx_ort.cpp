// ONNX Runtime tests (the harness, exported models). Without node + onnxruntime-node the ORT cases are skipped
// (Boost precondition with the reason) and the executable exits 77, which ctest shows as skipped.
#define BOOST_TEST_MODULE qat_onnx_ort
#define BOOST_TEST_NO_MAIN
#include <boost/test/unit_test.hpp>
#include <iostream>

#include "onnx/ort_runner.h"

int main(int argc, char* argv[]) {
  const int rc = boost::unit_test::unit_test_main(&init_unit_test, argc, argv);
  const std::string why = qat::test::ort_unavailable();
  if (rc != 0 || why.empty()) return rc;
  std::cout << "skipped: ONNX Runtime tests: " << why << "\n";
  return 77;
}
