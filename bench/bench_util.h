#pragma once
// Timing for the benchmarks: the machine is shared, so take the fastest of several trials.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <utility>
#include <vector>

namespace qat::bench {

namespace detail {
using Clock = std::chrono::steady_clock;
inline double since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}
// After a warm-up call (buffers, caching allocator, BLAS load): the calls per ~20 ms trial.
template <class F>
int calls_per_trial(F& f) {
  f();
  const auto t0 = Clock::now();
  f();
  return std::max(1, static_cast<int>(0.02 / std::max(since(t0), 1e-9)));
}
// Seconds per call of one trial of `reps` calls.
template <class F>
double trial(F& f, int reps) {
  const auto t0 = Clock::now();
  for (int r = 0; r < reps; ++r) f();
  return since(t0) / reps;
}
}  // namespace detail

/// Seconds per call of f: the fastest of 15 trials of ~20 ms each, after a warm-up call.
template <class F>
double seconds_per_call(F f) {
  const int reps = detail::calls_per_trial(f);
  double best = 1e30;
  for (int t = 0; t < 15; ++t) best = std::min(best, detail::trial(f, reps));
  return best;
}

/// Seconds per call of a and of b, for a ratio of the two: their 15 trials alternate, so that a
/// slow spell of the shared machine falls on both (one after the other, it can fall on all the
/// trials of one); the fastest trial of each.
template <class A, class B>
std::pair<double, double> seconds_per_call_pair(A a, B b) {
  const int ra = detail::calls_per_trial(a), rb = detail::calls_per_trial(b);
  double best_a = 1e30, best_b = 1e30;
  for (int t = 0; t < 15; ++t) {
    best_a = std::min(best_a, detail::trial(a, ra));
    best_b = std::min(best_b, detail::trial(b, rb));
  }
  return {best_a, best_b};
}

/// Seconds to copy `bytes` once (read + write), the reference for memory-bound kernels.
inline double memcpy_seconds(std::size_t bytes) {
  std::vector<char> a(bytes, 1), b(bytes);
  return seconds_per_call([&] { std::memcpy(b.data(), a.data(), bytes); });
}

}  // namespace qat::bench
