// QAT_INT8_X86 for the Highway target being compiled: 1 on AVX2 / AVX3 / AVX3_DL, whose int8
// kernels use x86 intrinsics (immintrin.h), 0 on every other target (EMU128, SCALAR: plain
// loops). No include guard: a kernel file includes it in each of foreach_target's passes.
#undef QAT_INT8_X86
#if HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
#define QAT_INT8_X86 1
#include <immintrin.h>
#else
#define QAT_INT8_X86 0
#endif
