#pragma once
// The ceiling of an int8 GEMM against a float32 GEMM on one instruction set: how many
// multiply-adds per second the CPU retires through the int8 kernel's multiply instruction and
// through FMA, each measured on registers alone (no loads, independent accumulators, so only the
// execution ports limit them). An int8 kernel cannot beat our float GEMM by more than their ratio
// unless the float GEMM runs further below its own ceiling.
//   pairs (AVX2, AVX-512 without VNNI): vpmaddwd (u8 widened to int16 x s8 widened, 2 products
//       per int32 lane) then vpaddd into the accumulator, what int8_gemm.cpp's pairs tile runs
//       for inputs in [0, 255];
//   Winograd (AVX2 without VNNI, linear layers; int8_gemm.h): per 4 products of an int32 lane,
//       two vpaddw (the sums a + w), one vpmaddwd, one vpaddd;
//   quads (AVX-VNNI, AVX512-VNNI): vpdpbusd (4 u8 x s8 products per int32 lane, accumulated);
//   FMA: vfmadd231ps of the same vector width.
// x86-64 GCC / Clang only; elsewhere every rate is 0.
#include <algorithm>
#include <chrono>
#include <cstdint>

namespace qat::bench {

struct PortCeiling {
  double int8_macs = 0;  ///< multiply-adds per second through the int8 instruction
  double fma_macs = 0;   ///< through vfmadd231ps of the same width
  const char* int8_insn = "none";
  double ratio() const { return fma_macs > 0 ? int8_macs / fma_macs : 0; }
};

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
namespace port_detail {

// The fastest of 5 runs of `iters` iterations of body, in seconds.
template <class F>
double fastest(F body, long iters) {
  double best = 1e30;
  for (int r = 0; r < 5; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    body(iters);
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

// 10 accumulators (enough to hide a 5-cycle latency at 2 per cycle), sources in the last two
// registers (zeros: no denormal slows FMA); R = "y" (ymm) or "z" (zmm).
#define QAT_PC_R10(op, R)                                                                          \
  op " %%" R "mm14, %%" R "mm15, %%" R "mm0\n\t" op " %%" R "mm14, %%" R "mm15, %%" R "mm1\n\t" op \
     " %%" R "mm14, %%" R "mm15, %%" R "mm2\n\t" op " %%" R "mm14, %%" R "mm15, %%" R "mm3\n\t" op \
     " %%" R "mm14, %%" R "mm15, %%" R "mm4\n\t" op " %%" R "mm14, %%" R "mm15, %%" R "mm5\n\t" op \
     " %%" R "mm14, %%" R "mm15, %%" R "mm6\n\t" op " %%" R "mm14, %%" R "mm15, %%" R "mm7\n\t" op \
     " %%" R "mm14, %%" R "mm15, %%" R "mm8\n\t" op " %%" R "mm14, %%" R "mm15, %%" R "mm9\n\t"
// vpaddd of the product of the iteration before into one of 6 accumulators, then vpmaddwd into
// that temporary: each add is ready when it issues (added right after its vpmaddwd, the adds
// queue behind the multiplies and the pair retires ~8% slower on Zen 5)
#define QAT_PC_MA(R, t, a)                             \
  "vpaddd %%" R "mm" t ", %%" R "mm" a ", %%" R "mm" a \
  "\n\t"                                               \
  "vpmaddwd %%" R "mm14, %%" R "mm15, %%" R "mm" t "\n\t"
#define QAT_PC_PAIRS(R)  \
  QAT_PC_MA(R, "8", "0") \
  QAT_PC_MA(R, "9", "1") \
  QAT_PC_MA(R, "10", "2") QAT_PC_MA(R, "11", "3") QAT_PC_MA(R, "12", "4") QAT_PC_MA(R, "13", "5")
// clang-format off
// Winograd: X = a + w and Y = a' + w' (vpaddw from the four source registers 10-13), the
// product of the iteration before added into one of 4 accumulators, vpmaddwd X, Y into it
#define QAT_PC_WG(R, t, a)                              \
  "vpaddw %%" R "mm10, %%" R "mm12, %%" R "mm14\n\t"    \
  "vpaddw %%" R "mm11, %%" R "mm13, %%" R "mm15\n\t"    \
  "vpaddd %%" R "mm" t ", %%" R "mm" a ", %%" R "mm" a \
  "\n\t"                                                \
  "vpmaddwd %%" R "mm14, %%" R "mm15, %%" R "mm" t "\n\t"
#define QAT_PC_WINOGRAD(R) \
  QAT_PC_WG(R, "4", "0") QAT_PC_WG(R, "5", "1") QAT_PC_WG(R, "6", "2") QAT_PC_WG(R, "7", "3")
// clang-format on
#define QAT_PC_CLOBBER                                                                              \
  "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", "xmm11", \
      "xmm12", "xmm13", "xmm14", "xmm15"

// The whole loop in assembly (n >= 1 iterations), 64-byte aligned, its body twice: a ~3-cycle
// body is sensitive to where the compiler puts the loop (measured: the same instructions 20%
// apart). {vex} vpdpbusd is AVX-VNNI's encoding on ymm.
#define QAT_PC_LOOP(name, body)                                                  \
  inline void name(long n) {                                                     \
    asm volatile(                                                                \
        "vpxor %%xmm14, %%xmm14, %%xmm14\n\tvpxor %%xmm15, %%xmm15, %%xmm15\n\t" \
        ".p2align 6\n\t1:\n\t" body body "dec %0\n\tjnz 1b"                      \
        : "+r"(n)                                                                \
        :                                                                        \
        : QAT_PC_CLOBBER, "cc");                                                 \
  }
QAT_PC_LOOP(fma_y, QAT_PC_R10("vfmadd231ps", "y"))
QAT_PC_LOOP(pairs_y, QAT_PC_PAIRS("y"))
QAT_PC_LOOP(winograd_y, QAT_PC_WINOGRAD("y"))
QAT_PC_LOOP(vnni_y, QAT_PC_R10("%{vex%} vpdpbusd", "y"))
QAT_PC_LOOP(fma_z, QAT_PC_R10("vfmadd231ps", "z"))
QAT_PC_LOOP(pairs_z, QAT_PC_PAIRS("z"))
QAT_PC_LOOP(vnni_z, QAT_PC_R10("vpdpbusd", "z"))
#undef QAT_PC_LOOP
#undef QAT_PC_R10
#undef QAT_PC_MA
#undef QAT_PC_PAIRS
#undef QAT_PC_WG
#undef QAT_PC_WINOGRAD
#undef QAT_PC_CLOBBER

}  // namespace port_detail

/// The ceiling on a path: `wide` for zmm (AVX-512), `vnni` for vpdpbusd, else `winograd`
/// (ymm only) for Winograd's form, else vpmaddwd + vpaddd. The caller makes sure the CPU has
/// the instructions.
inline PortCeiling port_ceiling(bool wide, bool vnni, bool winograd = false) {
  using namespace port_detail;
  constexpr long kIters = 2'000'000;
  const double lanes = wide ? 16 : 8;  // int32 / float32 lanes
  winograd = winograd && !vnni && !wide;
  PortCeiling c;
  c.int8_insn = vnni       ? (wide ? "vpdpbusd zmm" : "vpdpbusd ymm")
                : winograd ? "Winograd vpaddw x2 + vpmaddwd ymm"
                           : (wide ? "vpmaddwd zmm" : "vpmaddwd ymm");
  // per iteration (the body twice): 20 vpdpbusd (4 products per lane), 8 Winograd vpmaddwd (4
  // per lane) or 12 vpmaddwd (2 per lane); 20 FMA (1 per lane)
  const double int8_per_iter = vnni ? 20 * 4 * lanes : winograd ? 8 * 4 * lanes : 12 * 2 * lanes;
  const double t8 = vnni       ? fastest(wide ? vnni_z : vnni_y, kIters)
                    : winograd ? fastest(winograd_y, kIters)
                               : fastest(wide ? pairs_z : pairs_y, kIters);
  const double tf = fastest(wide ? fma_z : fma_y, kIters);
  c.int8_macs = int8_per_iter * kIters / t8;
  c.fma_macs = 20 * lanes * kIters / tf;
  return c;
}
#else
inline PortCeiling port_ceiling(bool, bool) { return {}; }
#endif

}  // namespace qat::bench
