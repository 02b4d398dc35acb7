// The quantization CUDA kernels in a build without the CUDA backend: each throws naming itself
// (an empty range excepted: nothing to launch, as with the backend).
#include "framework/kernels/cuda/runtime.h"
#include "modules/quant/kernels/cuda/kernels.h"

namespace qat::quant::kernels::cuda {

void fake_quant(const float*, float*, std::uint8_t*, std::int64_t n, const FqParams&, std::int64_t,
                std::int64_t) {
  if (n != 0) ::qat::cuda::detail::require_device("fake_quant");
}
void masked_copy(const float*, const std::uint8_t*, float*, std::int64_t n) {
  if (n != 0) ::qat::cuda::detail::require_device("fake_quant_backward");
}
void fused_moving_avg_obs_fake_quant(const float*, float*, std::uint8_t*, std::int64_t n,
                                     const FusedObserverArgs&) {
  if (n != 0) ::qat::cuda::detail::require_device("fused_moving_avg_obs_fake_quant");
}

void observe(const float*, std::int64_t outer, std::int64_t len, std::int64_t inner, const ObserveArgs&,
             float*, std::uint8_t*) {
  if (outer * len * inner != 0) ::qat::cuda::detail::require_device("observer");
}

void lsq_forward(const float*, float*, const ParamLayout& l, const float*, const float*, std::int64_t,
                 std::int64_t) {
  if (l.numel() != 0) ::qat::cuda::detail::require_device("fake_quantize_learnable");
}
void lsq_backward(const float*, const float*, float*, const ParamLayout& l, const float*, const float*,
                  bool, std::int64_t, std::int64_t, float, float*, float*) {
  if (l.len != 0) ::qat::cuda::detail::require_device("fake_quantize_learnable_backward");
}
void amax_forward(const float*, float*, std::uint8_t*, const ParamLayout& l, const float*, bool,
                  std::int64_t, std::int64_t) {
  if (l.numel() != 0) ::qat::cuda::detail::require_device("fake_quantize_learnable_amax");
}
void amax_backward(const float*, const std::uint8_t*, float*, const ParamLayout& l, float*) {
  if (l.len != 0) ::qat::cuda::detail::require_device("fake_quantize_learnable_amax_backward");
}
void clamp_below(float*, std::int64_t n, float) {
  if (n != 0) ::qat::cuda::detail::require_device("learnable quantizer (scale guard)");
}
void fp8_fake_quant(const float*, float*, std::uint8_t*, const ParamLayout& l, const float*, int, int,
                    float) {
  if (l.numel() != 0) ::qat::cuda::detail::require_device("fake_quantize_fp8");
}

}  // namespace qat::quant::kernels::cuda
