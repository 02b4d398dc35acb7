#pragma once
// Internal: Philox4x32-10 (Salmon et al. 2011, "Parallel random numbers: as easy as 1, 2, 3"; the
// Random123 / cuRAND generator), a counter-based RNG: the output at a counter is a pure function
// of (counter, key), so element i of a mask draws the same bits on any launch geometry, and on
// the host. Host and device code (tests check the Random123 known-answer vectors on the CPU).
#include <array>
#include <cstdint>

#include "framework/kernels/cuda/host_device.h"

namespace qat::kernels::cuda {

struct Philox4 {
  std::uint32_t v[4];
};

/// Ten rounds of Philox4x32 on counter (c0..c3) under key (k0, k1).
QAT_HOST_DEVICE inline Philox4 philox4x32_10(Philox4 c, std::uint32_t k0, std::uint32_t k1) {
  constexpr std::uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;  // multipliers
  constexpr std::uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;  // key schedule (golden ratio, sqrt 3)
  for (int r = 0; r < 10; ++r) {
    const std::uint64_t p0 = static_cast<std::uint64_t>(kM0) * c.v[0];
    const std::uint64_t p1 = static_cast<std::uint64_t>(kM1) * c.v[2];
    const std::uint32_t hi0 = static_cast<std::uint32_t>(p0 >> 32), lo0 = static_cast<std::uint32_t>(p0);
    const std::uint32_t hi1 = static_cast<std::uint32_t>(p1 >> 32), lo1 = static_cast<std::uint32_t>(p1);
    c = Philox4{{hi1 ^ c.v[1] ^ k0, lo1, hi0 ^ c.v[3] ^ k1, lo0}};
    k0 += kW0;
    k1 += kW1;
  }
  return c;
}

/// Uniform in [0, 1) with 53 bits for element i under `seed`: the first two words of
/// Philox4x32-10 at counter (i_lo, i_hi, 0, 0), key (seed_lo, seed_hi).
QAT_HOST_DEVICE inline double philox_uniform(std::uint64_t seed, std::uint64_t i) {
  const Philox4 r =
      philox4x32_10(Philox4{{static_cast<std::uint32_t>(i), static_cast<std::uint32_t>(i >> 32), 0, 0}},
                    static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32));
  const std::uint64_t bits = (static_cast<std::uint64_t>(r.v[0]) << 32) | r.v[1];
  return static_cast<double>(bits >> 11) * 0x1.0p-53;
}

}  // namespace qat::kernels::cuda
