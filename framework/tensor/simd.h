#pragma once
// Internal: runtime dispatch of Highway kernels. A kernel file follows Highway's pattern:
//
//   #undef HWY_TARGET_INCLUDE
//   #define HWY_TARGET_INCLUDE "framework/kernels/cpu/foo.cpp"
//   #include <hwy/foreach_target.h>  // re-includes this file once per instruction set
//   #include <hwy/highway.h>
//   HWY_BEFORE_NAMESPACE();
//   namespace qat::kernels::HWY_NAMESPACE { void foo_impl(...) { ... } }
//   HWY_AFTER_NAMESPACE();
//   #if HWY_ONCE
//   namespace qat::kernels { HWY_EXPORT(foo_impl);
//   void foo(...) { QAT_DISPATCH(foo_impl)(...); } }
//   #endif
//
// The compiled set (see CMakeLists.txt: HWY_DISABLED_TARGETS, HWY_WANT_AVX3_DL) is
// the portable fallback (cpu::Isa::Generic: EMU128, or SCALAR with GCC < 12.3), AVX2, AVX3 (AVX512) and
// AVX3_DL (AVX512_VNNI).
#include <hwy/highway.h>

#include "framework/tensor/cpu.h"

#define QAT_DISPATCH(FUNC) (::qat::cpu::detail::ensure_initialized(), HWY_DYNAMIC_DISPATCH(FUNC))
