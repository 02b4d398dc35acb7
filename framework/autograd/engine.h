#pragma once
#include "framework/tensor/tensor.h"

namespace qat::autograd {

/// Reverse-mode sweep from `root` (see Tensor::backward). Iterative: sorts the reachable
/// nodes once, runs them in reverse topological order, accumulates leaf gradients, and frees
/// each node's saved state unless `retain_graph`.
void backward(const Tensor& root, const Tensor& grad_output, bool retain_graph);

/// Told during every backward pass, on the thread that runs it, when a leaf's gradient is
/// complete for that pass (no node left to run reads the leaf), and when the pass ends: what
/// data-parallel training needs to all-reduce gradients while the rest of backward still runs
/// (PyTorch's post-accumulate-grad hooks and the engine's final callback).
class GradReadyObserver {
 public:
  virtual ~GradReadyObserver() = default;
  /// `leaf`'s .grad holds everything this pass adds to it (it may be undefined: no gradient
  /// reached the leaf although a node read it).
  virtual void leaf_ready(const TensorImpl* leaf) = 0;
  /// The pass is over: every leaf it reached was reported.
  virtual void backward_end() = 0;
};

/// Registers / unregisters an observer for every backward pass in the process.
void add_grad_ready_observer(GradReadyObserver* observer);
void remove_grad_ready_observer(GradReadyObserver* observer);

}  // namespace qat::autograd
