#pragma once
#include <functional>
#include <vector>

#include "framework/autograd/grad_mode.h"
#include "framework/tensor/tensor.h"

namespace qat {

/// One recorded op on the tape. Its backward receives the op's inputs as arguments (it never
/// captures the output, which owns this node) and writes d(loss)/d(input i) into
/// grad_inputs[i] for the inputs that require a gradient; the engine accumulates them.
struct Node {
  using BackwardFn = std::function<void(const Tensor& grad_output, const std::vector<Tensor>& inputs,
                                        std::vector<Tensor>& grad_inputs)>;
  const char* name = "";
  std::vector<Tensor> inputs;
  BackwardFn backward;  // empty once the graph has been freed

  Node() = default;
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;
  /// Releases the inputs iteratively: dropping a long chain must not recurse.
  ~Node();
};

namespace autograd {

/// True when grad mode is on and some defined input requires a gradient.
template <class... Ts>
bool should_record(const Ts&... inputs) {
  return GradMode::is_enabled() && ((inputs.defined() && inputs.requires_grad()) || ...);
}

/// Attaches `backward` to `out` as op `name` on `inputs`, if should_record(inputs...). Every
/// op calls it, recorded or not, so an OpObserver sees every op (graph capture).
void record(Tensor& out, const char* name, std::vector<Tensor> inputs, Node::BackwardFn backward);

/// True when no other handle shares `t` or its storage: a backward may then write its
/// grad_output in place and pass it on (as the engine makes a leaf's first gradient its .grad).
bool is_exclusive(const Tensor& t);

/// Sees every op on this thread, forward-only ones included (graph capture, see nn/graph.h).
class OpObserver {
 public:
  virtual ~OpObserver() = default;
  virtual void on_op(const char* name, const std::vector<Tensor>& inputs, const Tensor& output) = 0;
};

/// RAII: installs `observer` for ops on this thread; restores the previous one.
class OpObserverGuard {
 public:
  explicit OpObserverGuard(OpObserver* observer);
  ~OpObserverGuard();
  OpObserverGuard(const OpObserverGuard&) = delete;
  OpObserverGuard& operator=(const OpObserverGuard&) = delete;

 private:
  OpObserver* prev_;
};

}  // namespace autograd
}  // namespace qat
