#pragma once

namespace qat {

/// Threads used by BLAS and by the parallel CPU kernels. Defaults to the QAT_NUM_THREADS
/// environment variable, else the number of cores. With 1 thread every run is bit-identical
/// for the same seed.
void set_num_threads(int n);
int get_num_threads();

}  // namespace qat
