#pragma once
#include <initializer_list>

#include "framework/nn/module.h"

namespace qat::nn {

/// Applies its children in order; children are named "0", "1", ... unless named explicitly.
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
