#pragma once
// Internal: batch-norm CPU kernels over one channel of x viewed as (N, C, S): the N runs of S
// values at x + n * stride (stride = C * S), runtime-dispatched (tensor/simd.h). Sums are
// accumulated in double in a fixed order (16 partial sums over the runs, then the tails), the
// same on every path and thread count.
#include <cstdint>

namespace qat::kernels {

/// s1 = sum (x - m),  s2 = sum (x - m)^2  (one pass; with m near the mean, var = s2/M - (s1/M)^2
/// loses nothing to cancellation in double)
void channel_moments(const float* x, std::int64_t N, std::int64_t S, std::int64_t stride, double m,
                     double* s1, double* s2);
void channel_moments(const double* x, std::int64_t N, std::int64_t S, std::int64_t stride, double m,
                     double* s1, double* s2);
/// sg = sum g,  sgx = sum g (x - m)
void channel_grad_sums(const float* g, const float* x, std::int64_t N, std::int64_t S,
                       std::int64_t stride, double m, double* sg, double* sgx);
void channel_grad_sums(const double* g, const double* x, std::int64_t N, std::int64_t S,
                       std::int64_t stride, double m, double* sg, double* sgx);
/// y = x a + b
void channel_affine(const float* x, float* y, std::int64_t N, std::int64_t S, std::int64_t stride,
                    float a, float b);
void channel_affine(const double* x, double* y, std::int64_t N, std::int64_t S, std::int64_t stride,
                    double a, double b);
/// d = k (g - mg) - kx (x - m), in T (the scalars rounded to T, as PyTorch computes it)
void channel_backward(const float* g, const float* x, float* d, std::int64_t N, std::int64_t S,
                      std::int64_t stride, double k, double mg, double kx, double m);
void channel_backward(const double* g, const double* x, double* d, std::int64_t N, std::int64_t S,
                      std::int64_t stride, double k, double mg, double kx, double m);

}  // namespace qat::kernels
