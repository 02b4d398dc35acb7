#pragma once
// Internal: elementwise and activation CPU kernels on raw arrays, runtime-dispatched
// (tensor/simd.h). Each exists for float and double.
#include <cstdint>

namespace qat::kernels {

/// out[i] = px[i] / 255 in float32, correctly rounded (torchvision's ToTensor)
void unit_from_bytes(const std::uint8_t* px, float* out, std::int64_t n);
/// dst[i] += src[i]
void add_inplace(float* dst, const float* src, std::int64_t n);
void add_inplace(double* dst, const double* src, std::int64_t n);
/// out[i] = a[i] + b[i]
void add(const float* a, const float* b, float* out, std::int64_t n);
void add(const double* a, const double* b, double* out, std::int64_t n);
/// dst[i] *= s
void scale_inplace(float* dst, float s, std::int64_t n);
void scale_inplace(double* dst, double s, std::int64_t n);

/// The binary arithmetic ops of autograd/ops/elementwise.cpp.
enum class BinaryOp : int { Add, Sub, Mul, Div };
/// out[i] = a[i * sa] op b[i * sb] with strides sa, sb in {0, 1} (0: a broadcast scalar).
void binary(BinaryOp op, const float* a, std::int64_t sa, const float* b, std::int64_t sb, float* out,
            std::int64_t n);
void binary(BinaryOp op, const double* a, std::int64_t sa, const double* b, std::int64_t sb, double* out,
            std::int64_t n);

/// y[i] = max(x[i], 0) (NaN propagates as x > 0 is false: y = 0, as in the scalar op)
void relu(const float* x, float* y, std::int64_t n);
void relu(const double* x, double* y, std::int64_t n);
/// d[i] = x[i] > 0 ? g[i] : 0
void relu_backward(const float* g, const float* x, float* d, std::int64_t n);
void relu_backward(const double* g, const double* x, double* d, std::int64_t n);

}  // namespace qat::kernels
