// The text of a failed cuDNN status (in a build with cuDNN; no device needed): the op, the call,
// the device and cudnnGetErrorString, from a hand-made status and from a call cuDNN refuses.
#include <cudnn.h>

#include <boost/test/unit_test.hpp>
#include <string>

#include "framework/kernels/cuda/cudnn_conv.h"
#include "framework/tensor/error.h"

using qat::kernels::cuda::detail::check_cudnn;

namespace {
std::string message_of(int status, const char* call) {
  try {
    check_cudnn(status, "conv2d", call, "cudnn_conv.cpp", 42);
  } catch (const qat::Error& e) {
    return e.what();
  }
  return "";
}
}  // namespace

BOOST_AUTO_TEST_CASE(cudnn_status_text) {
  BOOST_CHECK_NO_THROW(check_cudnn(CUDNN_STATUS_SUCCESS, "conv2d", "cudnnCreate(&h)", "f.cpp", 1));
  const std::string m = message_of(CUDNN_STATUS_BAD_PARAM, "cudnnConvolutionForward(...)");
  const std::string want = std::string("conv2d: cudnnConvolutionForward(...) failed on cuda:0: ") +
                           cudnnGetErrorString(CUDNN_STATUS_BAD_PARAM);
  BOOST_TEST(m.rfind(want, 0) == 0, m);
  BOOST_TEST(m.find("(cudnn_conv.cpp:42)") != std::string::npos, m);
  BOOST_TEST(std::string(cudnnGetErrorString(CUDNN_STATUS_BAD_PARAM)).find("BAD_PARAM") !=
             std::string::npos);
}

// A descriptor with a negative size: cuDNN itself refuses it, on the host.
BOOST_AUTO_TEST_CASE(cudnn_refused_call) {
  cudnnTensorDescriptor_t d = nullptr;
  const cudnnStatus_t created = cudnnCreateTensorDescriptor(&d);
  BOOST_REQUIRE_MESSAGE(created == CUDNN_STATUS_SUCCESS, cudnnGetErrorString(created));
  const cudnnStatus_t s =
      cudnnSetTensor4dDescriptor(d, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, -1, 5, 11, 11);
  cudnnDestroyTensorDescriptor(d);
  BOOST_REQUIRE(s != CUDNN_STATUS_SUCCESS);
  const std::string m = message_of(s, "cudnnSetTensor4dDescriptor(x, ...)");
  BOOST_TEST(m.rfind(std::string("conv2d: cudnnSetTensor4dDescriptor(x, ...) failed on cuda:0: ") +
                         cudnnGetErrorString(s),
                     0) == 0,
             m);
}
