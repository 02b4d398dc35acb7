#pragma once
// The CPU instruction set the kernels run with, chosen at run time.
//
// Every SIMD kernel (framework/kernels/cpu, modules/quant/kernels/cpu) is compiled once per
// instruction set with Highway (hwy/foreach_target.h); at the first call the best set this CPU
// supports is chosen. `QAT_CPU=generic|avx2|avx512|avx512_vnni` in the environment, or
// cpu::set_isa(), forces a lower one (tests run every path the machine has this way).
#include <string>
#include <vector>

namespace qat::cpu {

/// Kernel paths, from the portable fallback up. Each includes the ones below it.
enum class Isa {
  Generic = 0,     ///< portable C++ (Highway EMU128, or SCALAR with GCC < 12.3): any CPU
  AVX2 = 1,        ///< AVX2 + FMA (Haswell, Zen 1-3)
  AVX512 = 2,      ///< AVX-512 F/BW/DQ/VL (Skylake-X)
  AVX512_VNNI = 3  ///< AVX-512 with VNNI, VBMI2, ... (Ice Lake, Zen 4): int8 dot products
};

/// "generic", "avx2", "avx512", "avx512_vnni".
const char* isa_name(Isa isa);
/// Parses a name as isa_name writes it; throws qat::Error naming the value otherwise.
Isa parse_isa(const std::string& name);

/// The best path this CPU supports.
Isa best_isa();
/// The paths this CPU supports, Generic first.
std::vector<Isa> supported_isas();
/// The path the kernels run now: QAT_CPU if set (capped at best_isa(), with one warning on
/// stderr when capped or unknown), else best_isa(); or what set_isa() chose last.
Isa isa();
/// Forces `isa` for every kernel called from now on; throws qat::Error if this CPU lacks it.
void set_isa(Isa isa);
/// What QAT_CPU asks for (best_isa() when unset or unknown), before capping.
Isa requested_isa();
/// One line for logs and benchmarks, e.g. "avx2 (best avx512_vnni, QAT_CPU=avx2)".
std::string describe();

/// Highway's name of the kernel set that runs now ("SCALAR"/"EMU128", "AVX2", "AVX3", "AVX3_DL").
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

namespace detail {
/// Applies the environment's choice once (called by QAT_DISPATCH before every kernel call).
void ensure_initialized();
}  // namespace detail

}  // namespace qat::cpu
