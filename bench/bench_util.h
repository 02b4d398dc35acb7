#pragma once
// Timing for the benchmarks: the machine is shared, so take the fastest of several trials.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <vector>

namespace qat::bench {

/// Seconds per call of f: the fastest of 15 trials of ~20 ms each, after a warm-up call.
template <class F>
double seconds_per_call(F f) {
  using Clock = std::chrono::steady_clock;
  auto since = [](Clock::time_point t0) {
    return std::chrono::duration<double>(Clock::now() - t0).count();
  };
  f();  // warm up (buffers, caching allocator, BLAS load)
  const auto t0 = Clock::now();
  f();
  const int reps = std::max(1, static_cast<int>(0.02 / std::max(since(t0), 1e-9)));
  double best = 1e30;
  for (int trial = 0; trial < 15; ++trial) {
    const auto t1 = Clock::now();
    for (int r = 0; r < reps; ++r) f();
    best = std::min(best, since(t1) / reps);
  }
  return best;
}

/// Seconds to copy `bytes` once (read + write), the reference for memory-bound kernels.
inline double memcpy_seconds(std::size_t bytes) {
  std::vector<char> a(bytes, 1), b(bytes);
  return seconds_per_call([&] { std::memcpy(b.data(), a.data(), bytes); });
}

}  // namespace qat::bench
