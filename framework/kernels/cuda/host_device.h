#pragma once
// Internal: QAT_HOST_DEVICE marks a function compiled for both the host and the device
// (__host__ __device__ under nvcc, nothing in a host compiler), for per-element code that the
// kernels run and the CPU tests run against the reference (window.h, philox.h, observer_math.h).
#ifdef __CUDACC__
#define QAT_HOST_DEVICE __host__ __device__
#else
#define QAT_HOST_DEVICE
#endif
