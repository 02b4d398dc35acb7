#pragma once
#include "framework/tensor/tensor.h"

namespace qat::autograd {

/// Reverse-mode sweep from `root` (see Tensor::backward). Iterative: sorts the reachable
/// nodes once, runs them in reverse topological order, accumulates leaf gradients, and frees
/// each node's saved state unless `retain_graph`.
void backward(const Tensor& root, const Tensor& grad_output, bool retain_graph);

}  // namespace qat::autograd
