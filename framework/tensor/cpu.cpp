#include "framework/tensor/cpu.h"

#include <hwy/targets.h>

#include <atomic>
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif
#include <cstdlib>
#include <iostream>
#include <mutex>

#include "framework/tensor/error.h"

namespace qat::cpu {
namespace {

constexpr Isa kAll[] = {Isa::Generic, Isa::AVX2, Isa::AVX2_VNNI, Isa::AVX512, Isa::AVX512_VNNI};

// The Highway target that serves each path; Generic is Highway's portable fallback (EMU128, or
// SCALAR where Highway considers the compiler's EMU128 broken), always allowed. AVX2_VNNI is
// Highway's AVX2 target whose int8 kernels read int8_avx_vnni().
std::int64_t hwy_target(Isa isa) {
  switch (isa) {
    case Isa::AVX2:
    case Isa::AVX2_VNNI:
      return HWY_AVX2;
    case Isa::AVX512:
      return HWY_AVX3;
    case Isa::AVX512_VNNI:
      return HWY_AVX3_DL;
    default:
      return HWY_EMU128;
  }
}

// What the CPU really supports among the targets this build compiled (HWY_TARGETS; a sanitizer
// build compiles fewer), read before any mock is installed.
std::int64_t real_targets() {
  static const std::int64_t targets = [] {
    hwy::SetSupportedTargetsForTest(0);
    return hwy::SupportedTargets() & (HWY_TARGETS | HWY_EMU128 | HWY_SCALAR);
  }();
  return targets;
}

// AVX-VNNI (the VEX-encoded vpdpbusd on 128/256-bit vectors): CPUID leaf 7, sub-leaf 1, EAX bit 4
// (Intel SDM vol. 2A, CPUID). The OS saves the ymm state wherever Highway's AVX2 target is usable.
bool cpu_has_avx_vnni() {
#if defined(__x86_64__) || defined(__i386__)
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid_count(7, 1, &a, &b, &c, &d) == 0) return false;
  return (a >> 4) & 1u;
#else
  return false;
#endif
}

std::atomic<bool> g_int8_avx_vnni{false};

struct State {
  std::mutex mu;
  std::atomic<bool> initialized{false};
  Isa current = Isa::Generic;
  Isa requested = Isa::Generic;
  std::string env;  // QAT_CPU as given
};

State& state() {
  static State s;
  return s;
}

// Makes HWY_DYNAMIC_DISPATCH pick `isa`: the supported targets are restricted to it and the
// ones below, and the chosen target (the best of those) is recomputed.
void apply(Isa isa) {
  std::int64_t allowed = HWY_EMU128 | HWY_SCALAR;
  for (Isa i : kAll)
    if (static_cast<int>(i) <= static_cast<int>(isa)) allowed |= hwy_target(i);
  hwy::SetSupportedTargetsForTest(real_targets() & allowed);
  hwy::GetChosenTarget().Update(hwy::SupportedTargets());
  g_int8_avx_vnni.store(isa == Isa::AVX2_VNNI, std::memory_order_relaxed);
}

void initialize_locked(State& s) {
  if (s.initialized.load(std::memory_order_acquire)) return;
  const Isa best = best_isa();
  s.requested = best;
  s.current = best;
  if (const char* env = std::getenv("QAT_CPU"); env != nullptr && *env != '\0') {
    s.env = env;
    try {
      s.requested = parse_isa(env);
      s.current = Isa::Generic;  // the best supported path at or below the request
      for (Isa i : kAll)
        if (i <= s.requested && supports(i)) s.current = i;
      if (s.current != s.requested)
        std::cerr << "qat: QAT_CPU=" << env << " but this CPU lacks it (best " << isa_name(best)
                  << "); using " << isa_name(s.current) << "\n";
    } catch (const Error& e) {
      std::cerr << "qat: ignoring QAT_CPU: " << e.what() << "\n";
    }
  }
  apply(s.current);
  s.initialized.store(true, std::memory_order_release);
}

}  // namespace

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::AVX2:
      return "avx2";
    case Isa::AVX2_VNNI:
      return "avx2_vnni";
    case Isa::AVX512:
      return "avx512";
    case Isa::AVX512_VNNI:
      return "avx512_vnni";
    default:
      return "generic";
  }
}

Isa parse_isa(const std::string& name) {
  for (Isa i : kAll)
    if (name == isa_name(i)) return i;
  throw Error("cpu::parse_isa: unknown instruction set '" + name +
              "' (expected generic, avx2, avx2_vnni, avx512 or avx512_vnni)");
}

bool supports(Isa isa) {
  const std::int64_t t = real_targets();
  switch (isa) {
    case Isa::Generic:
      return true;
    case Isa::AVX2_VNNI: {
      static const bool vnni = cpu_has_avx_vnni();
      return (t & HWY_AVX2) != 0 && vnni;
    }
    default:
      return (t & hwy_target(isa)) != 0;
  }
}

Isa best_isa() {
  Isa best = Isa::Generic;
  for (Isa i : kAll)
    if (supports(i)) best = i;
  return best;
}

std::vector<Isa> supported_isas() {
  std::vector<Isa> out;
  for (Isa i : kAll)
    if (supports(i)) out.push_back(i);
  return out;
}

bool int8_avx_vnni() {
  detail::ensure_initialized();
  return g_int8_avx_vnni.load(std::memory_order_relaxed);
}

Isa isa() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  initialize_locked(s);
  return s.current;
}

Isa requested_isa() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  initialize_locked(s);
  return s.requested;
}

void set_isa(Isa isa) {
  if (!supports(isa))
    throw Error(std::string("cpu::set_isa: this CPU does not support '") + isa_name(isa) +
                "' (best: " + isa_name(best_isa()) + ")");
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  initialize_locked(s);
  s.current = isa;
  apply(isa);
}

std::string describe() {
  const Isa cur = isa();
  std::string out = isa_name(cur);
  out += std::string(" (best ") + isa_name(best_isa());
  const State& s = state();
  if (!s.env.empty()) out += ", QAT_CPU=" + s.env;
  return out + ")";
}

namespace {
// The environment's choice (read once), until set_*() overrides it: -1 not read yet.
std::atomic<int> direct_conv_state{-1}, winograd_state{-1};

int from_env(std::atomic<int>& state, const char* variable, int (*parse)(const std::string& value)) {
  int v = state.load(std::memory_order_relaxed);
  if (v < 0) {
    const char* env = std::getenv(variable);
    v = parse(env != nullptr ? env : "");
    state.store(v, std::memory_order_relaxed);
  }
  return v;
}
}  // namespace

bool direct_conv() {
  return from_env(direct_conv_state, "QAT_CONV_DIRECT",
                  [](const std::string& v) { return v == "0" ? 0 : 1; }) == 1;
}
void set_direct_conv(bool on) { direct_conv_state.store(on ? 1 : 0, std::memory_order_relaxed); }

WinogradMode winograd_mode() {
  return static_cast<WinogradMode>(
      from_env(winograd_state, "QAT_CONV_WINOGRAD", [](const std::string& v) {
        return static_cast<int>(v == "0"   ? WinogradMode::Off
                                : v == "1" ? WinogradMode::On
                                           : WinogradMode::Auto);
      }));
}
void set_winograd_mode(WinogradMode mode) {
  winograd_state.store(static_cast<int>(mode), std::memory_order_relaxed);
}
bool winograd_conv() {
  const WinogradMode mode = winograd_mode();
  return mode == WinogradMode::On || (mode == WinogradMode::Auto && isa() != Isa::Generic);
}

namespace detail {
void ensure_initialized() {
  State& s = state();
  if (s.initialized.load(std::memory_order_acquire)) return;
  std::lock_guard<std::mutex> lock(s.mu);
  initialize_locked(s);
}
}  // namespace detail

}  // namespace qat::cpu
