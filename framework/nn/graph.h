#pragma once
// Graph capture: run a model's forward once and record what actually executed, module calls
// (with their dotted names) and ops (forward-only ones included), with the data flow between
// them. prepare_qat (fusion, where quantizers go), convert (int8 layers for any module tree) and
// reports read this one graph instead of walking Sequential containers by position.
#include <string>
#include <vector>

#include "framework/nn/module.h"

namespace qat::nn {

struct GraphNode {
  enum class Kind { Input, Module, Op };
  Kind kind = Kind::Op;
  /// Module calls: the module's dotted name ("" for the root); ops: the op name ("add").
  std::string name;
  /// Module calls: the module's type_name(); ops: the op name.
  std::string type;
  Module* module = nullptr;  ///< module calls only
  /// The value each input came from, as a node id; -1 for a tensor made outside the traced
  /// computation (a parameter, a constant). Already resolved to atomic producers (origin()).
  std::vector<int> inputs;
  /// Aligned with `inputs`: for an input that is -1, the tensor itself (a parameter, a
  /// constant; detached), so an exporter can write it; undefined for traced values.
  std::vector<Tensor> constants;
  /// The innermost enclosing module call, -1 at the top level.
  int scope = -1;
  /// False for what runs inside an atomic module call (a QAT layer's own quantizers, ops).
  bool atomic_level = true;
  /// A call of a non-atomic module (a container such as Sequential or a custom Module).
  bool container = false;
  /// For a container call: the node whose value it returns (-1 if none).
  int source = -1;
  Shape shape;  ///< shape of the output
};

/// The executed graph of one forward call. Node 0 is the input; nodes are numbered in the order
/// they started (a module call before what runs inside it), so the atomic-level nodes are in a
/// topological order.
struct Graph {
  std::vector<GraphNode> nodes;
  int output = -1;  ///< the node whose value the model returned (after origin())

  /// The atomic node that computed node `id`'s value: follows containers and identities.
  int origin(int id) const;
  /// The atomic-level nodes that read the value of node `id` (each once, in order).
  std::vector<int> users(int id) const;
  /// Atomic-level nodes that call `module` (a module called twice appears twice).
  std::vector<int> calls(const Module* module) const;
  /// Follows `id` back through Identity module calls (e.g. modules absorbed by fusion) to the
  /// node that computed the value.
  int skip_identities(int id) const;
  /// The module call node's scope chain as text, e.g. "block1 > block1.conv1".
  std::string scope_of(int id) const;
  /// One line per atomic-level node: "%3 = block1.conv1 (Conv2d) (%2) -> [1, 8, 28, 28]".
  std::string str() const;
};

/// Runs model(example) once and records the graph. The model is run in eval mode and without
/// gradients (its training flags are restored afterwards), so observers and batch-norm
/// statistics do not move; modules must be called through operator() or nn::Child for their
/// calls to be seen (a direct ->forward() call shows up as its ops only). Modules reached from
/// the forward that are not part of the model's tree (a stale pointer to a replaced child) are
/// recorded with the name "<not in model>".
Graph trace(Module& model, const Tensor& example);

}  // namespace qat::nn
