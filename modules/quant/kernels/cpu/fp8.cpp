// FP8 fake quantization (kernels.h fp8_fake_quant): v = x / s rounded to the format's grid
// (common-inl.h RoundToGrid), mask = [|v| <= max].
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "modules/quant/kernels/cpu/fp8.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include "framework/tensor/simd.h"
#include "modules/quant/kernels/cpu/common-inl.h"
#include "modules/quant/kernels/cpu/kernels.h"

HWY_BEFORE_NAMESPACE();
namespace qat::quant::kernels::HWY_NAMESPACE {

// v = x / s; mask = [|v| <= max]; y = copysign(min(r, max), v) s, NaN kept (common-inl.h GridRun).
void Fp8FakeQuant(const float* x, float* y, std::uint8_t* mask, std::int64_t n, float scale,
                  int mantissa_bits, int min_exponent, float max) {
  GridRun<true, true>(x, y, mask, n, scale, scale, MakeGrid(mantissa_bits, min_exponent, max));
}

}  // namespace qat::quant::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace qat::quant::kernels {

HWY_EXPORT(Fp8FakeQuant);

void fp8_fake_quant(const float* x, float* y, std::uint8_t* mask, std::int64_t n, float scale,
                    int mantissa_bits, int min_exponent, float max) {
  QAT_DISPATCH(Fp8FakeQuant)(x, y, mask, n, scale, mantissa_bits, min_exponent, max);
}

}  // namespace qat::quant::kernels
#endif  // HWY_ONCE
