#pragma once
// The CPU instruction set the kernels run with, chosen at run time.
//
// Every SIMD kernel (framework/kernels/cpu, modules/quant/kernels/cpu) is compiled once per
// instruction set with Highway (hwy/foreach_target.h); at the first call the best set this CPU
// supports is chosen. `QAT_CPU=generic|avx2|avx2_vnni|avx512|avx512_vnni` in the environment, or
// cpu::set_isa(), forces a lower one (tests run every path the machine has this way).
#include <string>
#include <vector>

namespace qat::cpu {

/// Kernel paths, from the portable fallback up. Each includes Generic and AVX2; AVX2_VNNI is
/// not a part of the AVX-512 paths (Skylake-X and Ice Lake have AVX-512 but not AVX-VNNI), so a
/// CPU may support AVX512 without AVX2_VNNI: supported_isas() lists what it really has.
enum class Isa {
  Generic = 0,     ///< portable C++ (Highway EMU128, or SCALAR with GCC < 12.3): any CPU
  AVX2 = 1,        ///< AVX2 + FMA (Haswell, Zen 1-3)
  AVX2_VNNI = 2,   ///< AVX2 + AVX-VNNI (Alder Lake, Zen 5): the AVX2 kernels, int8 by vpdpbusd ymm
  AVX512 = 3,      ///< AVX-512 F/BW/DQ/VL (Skylake-X)
  AVX512_VNNI = 4  ///< AVX-512 with VNNI, VBMI2, ... (Ice Lake, Zen 4): int8 dot products
};

/// "generic", "avx2", "avx2_vnni", "avx512", "avx512_vnni".
const char* isa_name(Isa isa);
/// Parses a name as isa_name writes it; throws qat::Error naming the value otherwise.
Isa parse_isa(const std::string& name);

/// The best path this CPU supports.
Isa best_isa();
/// The paths this CPU supports, Generic first, in the order of the enum.
std::vector<Isa> supported_isas();
/// Whether this CPU supports `isa`.
bool supports(Isa isa);
/// The path the kernels run now: QAT_CPU if set (else best_isa()), lowered to the best supported
/// path at or below it with one warning on stderr (or unknown: ignored, with a warning); or
/// what set_isa() chose last.
Isa isa();
/// Whether the int8 kernels on the AVX2 path multiply with AVX-VNNI (isa() == AVX2_VNNI); a
/// lock-free read for the kernels.
bool int8_avx_vnni();
/// Forces `isa` for every kernel called from now on; throws qat::Error if this CPU lacks it
/// (supports(isa) is false).
void set_isa(Isa isa);
/// What QAT_CPU asks for (best_isa() when unset or unknown), before capping.
Isa requested_isa();
/// One line for logs and benchmarks, e.g. "avx2 (best avx512_vnni, QAT_CPU=avx2)".
std::string describe();

/// Highway's name of the kernel set that runs now ("SCALAR"/"EMU128", "AVX2", "AVX3", "AVX3_DL";
/// AVX2_VNNI runs Highway's AVX2 set).
std::string kernel_target();

/// Sets an instruction set for a scope and restores the previous one.
class IsaGuard {
 public:
  explicit IsaGuard(Isa isa) : previous_(cpu::isa()) { set_isa(isa); }
  ~IsaGuard() { set_isa(previous_); }
  IsaGuard(const IsaGuard&) = delete;
  IsaGuard& operator=(const IsaGuard&) = delete;

 private:
  Isa previous_;
};

/// Whether conv2d on float32 CPU tensors takes the direct forward kernel for few taps per output
/// (C kh kw <= 32 with column stride 1: a CNN's first layer) instead of a GEMM over the im2col
/// matrix: on unless QAT_CONV_DIRECT=0 or set_direct_conv(false) (tests and benchmarks compare
/// the two). The two agree within float tolerance; each gives the same bits for any thread count.
bool direct_conv();
void set_direct_conv(bool on);
/// Where conv2d on float32 CPU tensors computes 3x3 and 5x5 convolutions of stride 1 (forward,
/// dx, dW) by Winograd's F(2x2, r x r) (kernels/cpu/winograd.h: 2.25x / 2.78x fewer multiplies,
/// float error a few times the GEMMs') when a batch fills the vector lanes:
///   Off   never (QAT_CONV_WINOGRAD=0);
///   Auto  on the AVX2 and AVX-512 paths, the default: the generic path keeps the GEMMs, which
///         run there through the system BLAS (its Winograd measured 2.1x slower);
///   On    on every path, the generic one too (QAT_CONV_WINOGRAD=1; the tests check its kernel).
/// Each gives the same bits for any thread count.
enum class WinogradMode { Off = 0, Auto = 1, On = 2 };
WinogradMode winograd_mode();
void set_winograd_mode(WinogradMode mode);
/// Whether conv2d takes Winograd where it fits, on the current path (winograd_mode() and isa()).
bool winograd_conv();

namespace detail {
/// Applies the environment's choice once (called by QAT_DISPATCH before every kernel call).
void ensure_initialized();
}  // namespace detail

}  // namespace qat::cpu
