// Which compiled kernel set QAT_DISPATCH calls now: Highway's name of the target ("AVX2",
// "AVX3", "AVX3_DL", "EMU128"), read through a dispatched function like every kernel, so it
// proves what runs rather than what was asked for.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "framework/kernels/cpu/target.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include "framework/tensor/simd.h"

HWY_BEFORE_NAMESPACE();
namespace qat::kernels::HWY_NAMESPACE {
const char* TargetName() { return hwy::TargetName(HWY_TARGET); }
}  // namespace qat::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace qat::kernels {
HWY_EXPORT(TargetName);
}  // namespace qat::kernels
std::string qat::cpu::kernel_target() { return QAT_DISPATCH(qat::kernels::TargetName)(); }
#endif
