// The CUDA backend's tests. Those that need a device carry a precondition and are skipped with
// the reason where there is none; the executable then prints "skipped: no CUDA device" and exits
// 77 (ctest: skipped), after the tests that need no device have run.
#define BOOST_TEST_MODULE qat_cuda
#define BOOST_TEST_NO_MAIN
#include <boost/test/unit_test.hpp>
#include <iostream>

#include "cuda_test_util.h"
#include "framework/tensor/cuda.h"

namespace qat::test {
bool g_cublas_mapped_at_start = false;
}

int main(int argc, char* argv[]) {
  qat::test::g_cublas_mapped_at_start = qat::test::maps_library("libcublas");
  const int rc = boost::unit_test::unit_test_main(&init_unit_test, argc, argv);
  if (rc != 0 || qat::cuda::is_available()) return rc;
  std::cout << "skipped: no CUDA device (" << qat::cuda::unavailable_reason()
            << "): the device tests of test_cuda did not run\n";
  return 77;
}
