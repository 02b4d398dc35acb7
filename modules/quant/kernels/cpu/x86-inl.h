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

// QAT_VNNI_TARGET(f): on clang, the target attribute of this pass plus feature f, for the
// functions of the VNNI regions that reach a VNNI intrinsic (clang gives every function the
// target Highway pushes and ignores GCC's target pragmas, which those regions set for GCC).
// QAT_TILE_TARGET: the same for the functions of a tile-inl.h, set by its includer (empty
// unless the inclusion multiplies with VNNI).
#undef QAT_VNNI_TARGET
#undef QAT_TILE_TARGET
#if defined(__clang__)
#define QAT_VNNI_TARGET(f) __attribute__((target(HWY_TARGET_STR "," f)))
#else
#define QAT_VNNI_TARGET(f)
#endif
#define QAT_TILE_TARGET
