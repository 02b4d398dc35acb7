#pragma once
#include "framework/tensor/random.h"
#include "framework/tensor/tensor.h"

namespace qat::nn::init {

/// fan_in of a weight: size(1) * prod(kernel dims) (PyTorch's _calculate_fan_in_and_fan_out).
std::int64_t fan_in(const Tensor& weight);
/// U(lo, hi) in place.
void uniform_(Tensor& t, double lo, double hi, Generator& gen = default_generator());
/// Kaiming-uniform in place: bound = gain * sqrt(3 / fan_in), gain = sqrt(2 / (1 + a^2))
/// (He et al. 2015; PyTorch's default for Linear/Conv uses a = sqrt(5), i.e. bound = 1/sqrt(fan_in)).
void kaiming_uniform_(Tensor& weight, double a, Generator& gen = default_generator());

}  // namespace qat::nn::init
