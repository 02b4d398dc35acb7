// The narrow int8 tile's step order (int8_gemm.h, pair_schedule): which K steps it may take two
// at a time, within kPairedStepBound on every int16 lane, chosen once per packing.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <numeric>
#include <utility>
#include <vector>

#include "modules/quant/kernels/cpu/int8_gemm.h"

namespace qat::quant::int8::kernels {

std::int64_t pair_schedule(const std::uint8_t* w, std::int64_t steps, std::int64_t b, std::int64_t nb,
                           std::int32_t* order) {
  // per step and int16 lane (channel c of the group, pair j of the quad): P and N
  const std::int64_t lanes = nb * kBlock * 2;
  std::vector<std::int16_t> pos(steps * lanes), neg(steps * lanes);
  std::vector<std::int32_t> load(steps, 0);
  for (std::int64_t s = 0; s < steps; ++s)
    for (std::int64_t l = 0; l < lanes; ++l) {
      const std::int64_t blk = b + l / (kBlock * 2), c = l / 2 % kBlock, j = l % 2;
      const auto* q =
          reinterpret_cast<const std::int8_t*>(w + (blk * steps + s) * kStepBytes + c * 4 + 2 * j);
      std::int32_t p = 0, n = 0;
      for (int t = 0; t < 2; ++t) (q[t] > 0 ? p : n) += std::abs(q[t]);
      pos[s * lanes + l] = static_cast<std::int16_t>(p);
      neg[s * lanes + l] = static_cast<std::int16_t>(n);
      load[s] = std::max({load[s], p, n});
    }
  auto fits = [&](std::int64_t s, std::int64_t t) {  // lane by lane (no early exit: vectorized)
    const std::int16_t *ps = &pos[s * lanes], *pt = &pos[t * lanes], *ns = &neg[s * lanes],
                       *nt = &neg[t * lanes];
    std::int16_t most = 0;  // (int16 sums <= 508: a loop the compiler vectorizes)
    for (std::int64_t l = 0; l < lanes; ++l)
      most = std::max(most, std::max<std::int16_t>(ps[l] + pt[l], ns[l] + nt[l]));
    return most <= kPairedStepBound;
  };

  std::vector<std::int32_t> by_load(steps);
  std::iota(by_load.begin(), by_load.end(), 0);
  std::stable_sort(by_load.begin(), by_load.end(),
                   [&](std::int32_t s, std::int32_t t) { return load[s] > load[t]; });
  std::vector<char> taken(steps, 0);
  std::vector<std::pair<std::int32_t, std::int32_t>> pairs;
  std::vector<std::int32_t> singles;
  for (std::int64_t i = 0; i < steps; ++i) {
    const std::int32_t s = by_load[i];
    if (taken[s]) continue;
    taken[s] = 1;
    // the heaviest step left that fits; after kScan lane-by-lane checks, the heaviest that fits
    // by the loads alone (the loads descend: a binary search)
    constexpr int kScan = 256;
    auto next_free = [&](std::int64_t j) {
      while (j < steps && taken[by_load[j]]) ++j;
      return j;
    };
    std::int64_t j = next_free(i + 1);
    for (int checked = 0; j < steps; j = next_free(j + 1)) {
      const std::int32_t t = by_load[j];
      if (load[s] + load[t] <= kPairedStepBound) break;
      if (checked++ == kScan) {
        j = next_free(
            std::partition_point(by_load.begin() + j, by_load.end(),
                                 [&](std::int32_t u) { return load[s] + load[u] > kPairedStepBound; }) -
            by_load.begin());
        break;
      }
      if (fits(s, t)) break;
    }
    if (j == steps) {
      singles.push_back(s);
      continue;
    }
    taken[by_load[j]] = 1;
    pairs.emplace_back(std::min(s, by_load[j]), std::max(s, by_load[j]));
  }
  std::sort(pairs.begin(), pairs.end());  // in memory order, for the prefetchers
  std::sort(singles.begin(), singles.end());
  std::int64_t at = 0;
  for (const auto& [s, t] : pairs) order[at++] = s, order[at++] = t;
  for (const std::int32_t s : singles) order[at++] = s;
  return static_cast<std::int64_t>(pairs.size());
}

}  // namespace qat::quant::int8::kernels
