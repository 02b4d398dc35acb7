// FP8 fake quantization on CUDA (kernels.h fp8_fake_quant): fp8_math.h's fake_quant_one per
// element, the rounding the CPU runs (bit manipulation, rintf, IEEE division: bit-exact with
// kernels/cpu/fp8.cpp). The STE backward is masked_copy (fake_quant.cu). Also the learnable
// quantizers' parameter guard, clamp_below.
#include <cstdint>

#include "framework/kernels/cuda/launch.h"
#include "framework/kernels/cuda/runtime.h"
#include "modules/quant/kernels/cuda/fp8_math.h"
#include "modules/quant/kernels/cuda/kernels.h"

namespace qat::quant::kernels::cuda {
namespace {

using qat::kernels::cuda::aligned4;
using qat::kernels::cuda::global_index;
using qat::kernels::cuda::global_stride;
using qat::kernels::cuda::grid_for;
using qat::kernels::cuda::grid_for4;
using qat::kernels::cuda::grid_stride4;
using qat::kernels::cuda::kBlock;
using i64 = std::int64_t;

// y = round_fp8(x / s) s, mask = [|x / s| <= max]; s = scale[(i / inner) % len]
// 4 elements a step where vec4 (aligned, and the 4 share their scale: launch.h grid_stride4)
__global__ void fp8_kernel(const float* __restrict__ x, float* __restrict__ y,
                           std::uint8_t* __restrict__ mask, i64 n, i64 len, i64 inner,
                           const float* scale, int mantissa_bits, int min_exponent, float max,
                           bool vec4) {
  auto one = [&](float v, float s, std::uint8_t* m) {
    return fp8::fake_quant_one(v, s, mantissa_bits, min_exponent, max, m);
  };
  grid_stride4(
      n, vec4,
      [&](i64 j) {
        const float s = scale[len == 1 ? 0 : (4 * j / inner) % len];
        const float4 v = reinterpret_cast<const float4*>(x)[j];
        uchar4 m;
        reinterpret_cast<float4*>(y)[j] =
            make_float4(one(v.x, s, &m.x), one(v.y, s, &m.y), one(v.z, s, &m.z), one(v.w, s, &m.w));
        reinterpret_cast<uchar4*>(mask)[j] = m;
      },
      [&](i64 i) { y[i] = one(x[i], scale[len == 1 ? 0 : (i / inner) % len], &mask[i]); });
}

// v = v < lo ? lo : v (a NaN compares false and stays)
__global__ void clamp_below_kernel(float* __restrict__ v, i64 n, float lo) {
  for (i64 i = global_index(); i < n; i += global_stride()) v[i] = v[i] < lo ? lo : v[i];
}

}  // namespace

void clamp_below(float* v, std::int64_t n, float lo) {
  constexpr const char* fn = "learnable quantizer scale guard (CUDA)";
  if (n == 0) return;
  clamp_below_kernel<<<grid_for(n), kBlock, 0, ::qat::cuda::detail::stream(fn)>>>(v, n, lo);
  QAT_CUDA_CHECK_LAUNCH(fn);
}

void fp8_fake_quant(const float* x, float* y, std::uint8_t* mask, const ParamLayout& l,
                    const float* scale, int mantissa_bits, int min_exponent, float max) {
  constexpr const char* fn = "fake_quantize_fp8 (CUDA)";
  const i64 n = l.numel();
  if (n == 0) return;
  const bool vec4 = aligned4(x, y, mask) && (l.len == 1 || l.inner % 4 == 0);
  fp8_kernel<<<grid_for4(n, vec4), kBlock, 0, ::qat::cuda::detail::stream(fn)>>>(
      x, y, mask, n, l.len, l.inner, scale, mantissa_bits, min_exponent, max, vec4);
  QAT_CUDA_CHECK_LAUNCH(fn);
}

}  // namespace qat::quant::kernels::cuda
