#include "framework/tensor/parallel.h"

#include <cstdio>
#include <cstdlib>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "framework/tensor/error.h"

namespace qat {
namespace {
int default_threads() {
  if (const char* env = std::getenv("QAT_NUM_THREADS")) {
    const int n = std::atoi(env);
    if (n > kMaxThreads) {
      std::fprintf(stderr, "qat: QAT_NUM_THREADS=%d is above %d; using %d\n", n, kMaxThreads,
                   kMaxThreads);
      return kMaxThreads;
    }
    if (n > 0) return n;
  }
  return 1;  // measured: at the batch sizes QAT uses, one thread per process is fastest here
}
int& threads() {
  static int n = [] {
    const int d = default_threads();
#ifdef _OPENMP
    omp_set_num_threads(d);
#endif
    return d;
  }();
  return n;
}
// Apply the default to OpenMP at start-up, before any parallel loop runs.
[[maybe_unused]] const int startup_threads = threads();
}  // namespace

void set_num_threads(int n) {
  // libgomp gives each thread a stack: 100000 threads overflow the address space (a segfault).
  QAT_REQUIRE(n >= 1 && n <= kMaxThreads, "set_num_threads", "n must be in 1..", kMaxThreads, ", got ",
              n);
  threads() = n;
#ifdef _OPENMP
  omp_set_num_threads(n);
#endif
}

int get_num_threads() { return threads(); }

}  // namespace qat
