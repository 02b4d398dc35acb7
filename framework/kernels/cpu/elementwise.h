#pragma once
// Internal: elementwise CPU kernels on raw arrays, runtime-dispatched (tensor/simd.h).
#include <cstdint>

namespace qat::kernels {

/// dst[i] += src[i]
void add_inplace(float* dst, const float* src, std::int64_t n);
void add_inplace(double* dst, const double* src, std::int64_t n);
/// out[i] = a[i] + b[i]
void add(const float* a, const float* b, float* out, std::int64_t n);
void add(const double* a, const double* b, double* out, std::int64_t n);
/// dst[i] *= s
void scale_inplace(float* dst, float s, std::int64_t n);
void scale_inplace(double* dst, double s, std::int64_t n);

}  // namespace qat::kernels
