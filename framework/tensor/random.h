#pragma once
#include <array>
#include <cstdint>

namespace qat {

/// Seeded pseudo-random generator (xoshiro256**, seeded by splitmix64): the same seed gives
/// the same stream on every platform. Its whole state can be saved and restored.
class Generator {
 public:
  struct State {
    std::array<std::uint64_t, 4> s{};
    bool has_spare_normal = false;
    double spare_normal = 0.0;
  };

  explicit Generator(std::uint64_t seed = 0) { manual_seed(seed); }
  void manual_seed(std::uint64_t seed);

  std::uint64_t next_u64();
  /// Uniform in [0, 1) with 53 random bits.
  double uniform();
  /// Standard normal (Box-Muller, caching the second value).
  double normal();
  /// Uniform integer in [0, n), unbiased (Lemire's method).
  std::uint64_t below(std::uint64_t n);

  State state() const { return state_; }
  void set_state(const State& st) { state_ = st; }

 private:
  State state_;
};

/// The process-wide generator used by default initialisation and dropout.
Generator& default_generator();
/// Re-seeds the default generator.
void manual_seed(std::uint64_t seed);

}  // namespace qat
