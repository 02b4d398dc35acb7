#pragma once
#include <algorithm>
#include <cstdint>

#ifdef _OPENMP
#include <omp.h>
#endif

namespace qat {

/// Threads used by BLAS and by the parallel CPU kernels. Defaults to the QAT_NUM_THREADS
/// environment variable, else 1 (on the 2-core machines this was measured on, a second thread
/// slows batch-64 training down). Results do not depend on the thread count for the GEMMs and
/// elementwise kernels; with 1 thread every run is bit-identical for the same seed.
void set_num_threads(int n);
int get_num_threads();

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
#pragma omp parallel num_threads(threads)
  {
#ifdef _OPENMP
    const int t = omp_get_thread_num(), nt = omp_get_num_threads();
#else
    const int t = 0, nt = 1;
#endif
    const std::int64_t chunk = (n + nt - 1) / nt;
    const std::int64_t begin = std::min(n, t * chunk), end = std::min(n, begin + chunk);
    if (begin < end) f(begin, end);
  }
}

}  // namespace qat
