#include "framework/tensor/cpu.h"

#include <hwy/targets.h>

#include <atomic>
#include <cstdlib>
#include <iostream>
#include <mutex>

#include "framework/tensor/error.h"

namespace qat::cpu {
namespace {

constexpr Isa kAll[] = {Isa::Generic, Isa::AVX2, Isa::AVX512, Isa::AVX512_VNNI};

// The Highway target that serves each path; Generic is Highway's portable fallback (EMU128, or
// SCALAR where Highway considers the compiler's EMU128 broken), always allowed.
std::int64_t hwy_target(Isa isa) {
  switch (isa) {
    case Isa::AVX2:
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
      if (static_cast<int>(s.requested) > static_cast<int>(best))
        std::cerr << "qat: QAT_CPU=" << env << " but this CPU supports at most " << isa_name(best)
                  << "; using " << isa_name(best) << "\n";
      else
        s.current = s.requested;
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
              "' (expected generic, avx2, avx512 or avx512_vnni)");
}

Isa best_isa() {
  const std::int64_t t = real_targets();
  if (t & HWY_AVX3_DL) return Isa::AVX512_VNNI;
  if (t & HWY_AVX3) return Isa::AVX512;
  if (t & HWY_AVX2) return Isa::AVX2;
  return Isa::Generic;
}

std::vector<Isa> supported_isas() {
  std::vector<Isa> out;
  for (Isa i : kAll)
    if (static_cast<int>(i) <= static_cast<int>(best_isa())) out.push_back(i);
  return out;
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
  const Isa best = best_isa();
  if (static_cast<int>(isa) > static_cast<int>(best))
    throw Error(std::string("cpu::set_isa: this CPU does not support '") + isa_name(isa) +
                "' (best: " + isa_name(best) + ")");
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
std::atomic<int>& direct_conv_state() {  // -1: not read from the environment yet
  static std::atomic<int> on{-1};
  return on;
}
}  // namespace

bool direct_conv() {
  std::atomic<int>& on = direct_conv_state();
  int v = on.load(std::memory_order_relaxed);
  if (v < 0) {
    const char* env = std::getenv("QAT_CONV_DIRECT");
    v = env != nullptr && std::string(env) == "0" ? 0 : 1;
    on.store(v, std::memory_order_relaxed);
  }
  return v == 1;
}

void set_direct_conv(bool on) { direct_conv_state().store(on ? 1 : 0, std::memory_order_relaxed); }

namespace detail {
void ensure_initialized() {
  State& s = state();
  if (s.initialized.load(std::memory_order_acquire)) return;
  std::lock_guard<std::mutex> lock(s.mu);
  initialize_locked(s);
}
}  // namespace detail

}  // namespace qat::cpu
