// conv2d's cuDNN entry points in a build without cuDNN (CMake QAT_CUDNN off or not found):
// cuda::conv_path() never selects them there, so reaching one is a bug in the dispatch.
#include "framework/kernels/cuda/cudnn_conv.h"
#include "framework/tensor/error.h"

namespace qat::kernels::cuda {
namespace {
[[noreturn]] void none(const char* fn) {
  throw Error(qat::detail::concat(fn, ": this build has no cuDNN (CMake QAT_CUDNN)"));
}
}  // namespace

void cudnn_conv_forward(const float*, const float*, float, float*, const CudnnConv&) {
  none("cudnn_conv_forward");
}
void cudnn_conv_forward(const double*, const double*, double, double*, const CudnnConv&) {
  none("cudnn_conv_forward");
}
void cudnn_conv_backward_data(const float*, const float*, float*, const CudnnConv&) {
  none("cudnn_conv_backward_data");
}
void cudnn_conv_backward_data(const double*, const double*, double*, const CudnnConv&) {
  none("cudnn_conv_backward_data");
}
void cudnn_conv_backward_filter(const float*, const float*, float*, const CudnnConv&) {
  none("cudnn_conv_backward_filter");
}
void cudnn_conv_backward_filter(const double*, const double*, double*, const CudnnConv&) {
  none("cudnn_conv_backward_filter");
}
std::string cudnn_conv_algorithms(const CudnnConv&, bool) { none("cudnn_conv_algorithms"); }

}  // namespace qat::kernels::cuda
