#pragma once
#include <initializer_list>

#include "framework/nn/module.h"

namespace qat::nn {

/// Applies its children in order; children are named "0", "1", ... unless named explicitly.
/// A ReLU followed by a MaxPool2d runs as relu_max_pool2d (one pass, the same values and
/// gradients), and a child followed by a max pool (only Identity children between) as the
/// child's forward_max_pooled where it has one (an int8 convolution), unless a hook or a graph
/// capture watches the calls.
class Sequential : public Module {
 public:
  Sequential() : Module("Sequential") {}
  Sequential(std::initializer_list<ModulePtr> modules);
  explicit Sequential(const NamedModules& named);

  /// Appends `module` under the next index (or `name`), returns *this for chaining.
  Sequential& push_back(ModulePtr module);
  Sequential& push_back(const std::string& name, ModulePtr module);
  Tensor forward(const Tensor& x) override;

  std::size_t size() const { return named_children().size(); }
  /// The i-th child (after any replacement by prepare_qat/convert).
  ModulePtr operator[](std::size_t i) const;
};

}  // namespace qat::nn
