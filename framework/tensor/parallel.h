#pragma once
#include <algorithm>
#include <cstdint>

#ifdef _OPENMP
#include <omp.h>
#endif

namespace qat {

/// Threads used by BLAS and by the parallel CPU kernels. Defaults to the QAT_NUM_THREADS
/// environment variable, else 1 (2 threads train the example CNN ~1.6-1.9x faster on a quiet
/// 2-core machine, but OpenMP's spinning hurts on a busy one). Results do not depend on the
/// thread count: every run with the same seed is bit-identical, whatever the threads.
/// n must be in 1..kMaxThreads (a QAT_NUM_THREADS beyond it is capped, with a warning).
inline constexpr int kMaxThreads = 1024;
void set_num_threads(int n);
int get_num_threads();

namespace detail {
/// One OpenMP region of `threads` threads; thread t calls g(begin, end, t) on its contiguous
/// share of [0, n) (shares of ceil(n / threads), possibly empty at the end).
template <class G>
void split_over_threads(std::int64_t n, int threads, G&& g) {
#pragma omp parallel num_threads(threads)
  {
#ifdef _OPENMP
    const int t = omp_get_thread_num(), nt = omp_get_num_threads();
#else
    const int t = 0, nt = 1;
#endif
    const std::int64_t chunk = (n + nt - 1) / nt;
    const std::int64_t begin = std::min(n, t * chunk), end = std::min(n, begin + chunk);
    g(begin, end, t);
  }
}
}  // namespace detail

/// Calls f(begin, end) on contiguous chunks covering [0, n): one chunk per thread when
/// n >= grain and more than one thread is configured, else f(0, n) on the calling thread.
/// Keep the loop itself in a function with __restrict pointers so that it vectorises.
template <class F>
void parallel_for(std::int64_t n, std::int64_t grain, F f) {
  const int threads = get_num_threads();
  if (threads <= 1 || n < grain) {
    f(std::int64_t{0}, n);
    return;
  }
  detail::split_over_threads(n, threads, [&](std::int64_t begin, std::int64_t end, int) {
    if (begin < end) f(begin, end);
  });
}

/// Threads that parallel_for_each(n, ...) runs on: min(threads, n), at least 1. Size per-thread
/// scratch by it (slot indices are < this).
inline int parallel_slots(std::int64_t n) {
  return static_cast<int>(std::max<std::int64_t>(1, std::min<std::int64_t>(get_num_threads(), n)));
}

/// Calls f(i, slot) for every i in [0, n), each i wholly on one thread: contiguous ranges of
/// i over `slots` threads (slot: the thread's index, for its scratch), or in order on the calling
/// thread (slot 0, no OpenMP region) when slots <= 1. Results do not depend on the thread count
/// as long as f(i, slot) writes only i's own outputs (and slot's scratch).
template <class F>
void parallel_for_each(std::int64_t n, int slots, F f) {
  if (slots <= 1 || n <= 1) {
    for (std::int64_t i = 0; i < n; ++i) f(i, 0);
    return;
  }
  detail::split_over_threads(n, slots, [&](std::int64_t begin, std::int64_t end, int t) {
    for (std::int64_t i = begin; i < end; ++i) f(i, t);
  });
}

/// Inside an OpenMP parallel region (kernels then run on the calling thread only).
inline bool in_parallel() {
#ifdef _OPENMP
  return omp_in_parallel() != 0;
#else
  return false;
#endif
}

}  // namespace qat
