#pragma once
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "framework/tensor/tensor.h"

namespace qat::nn {

class Module;
using ModulePtr = std::shared_ptr<Module>;
using NamedModules = std::vector<std::pair<std::string, ModulePtr>>;
/// Non-owning view of a module tree: (dotted name, module), the root named "".
using ModuleRefs = std::vector<std::pair<std::string, Module*>>;

/// Base of every layer. Constructors register their parameters, buffers and children by name;
/// the recursive `named_*()` views give dotted names ("features.0.weight") that checkpoints,
/// optimizers, the QAT registry and error messages all use.
class Module {
 public:
  explicit Module(std::string type_name) : type_name_(std::move(type_name)) {}
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  virtual Tensor forward(const Tensor& x) = 0;
  Tensor operator()(const Tensor& x) { return forward(x); }

  /// The layer's kind, e.g. "Linear" (used by type rules in the QAT registry).
  const std::string& type_name() const { return type_name_; }

  // ---- registration (from constructors) --------------------------------------------------
  /// Registers a trainable tensor; it becomes a leaf that requires grad.
  Tensor register_parameter(const std::string& name, Tensor value);
  /// Registers persistent non-trainable state (running statistics, observer ranges, flags).
  Tensor register_buffer(const std::string& name, Tensor value);
  template <class M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> module) {
    add_child(name, module);
    return module;
  }

  // ---- lookup ----------------------------------------------------------------------------
  NamedTensors named_parameters(bool recurse = true) const;
  NamedTensors named_buffers(bool recurse = true) const;
  /// Parameters then buffers, the whole persistent state.
  NamedTensors named_state() const;
  /// This module (name "") and every descendant, depth first, in registration order.
  ModuleRefs named_modules();
  const NamedModules& named_children() const { return children_; }
  std::vector<Tensor> parameters() const;
  /// Direct child / own parameter / own buffer by local name; throws qat::Error if absent.
  ModulePtr child(const std::string& name) const;
  Tensor parameter(const std::string& name) const;
  Tensor buffer(const std::string& name) const;
  bool has_parameter(const std::string& name) const;
  bool has_buffer(const std::string& name) const;
  /// Descendant by dotted path ("features.0"); throws if absent.
  ModulePtr submodule(const std::string& path) const;
  /// Replaces the value of own buffer `name` (e.g. when its shape becomes known); returns it.
  Tensor replace_buffer(const std::string& name, Tensor value);
  /// Swaps the direct child `name` for `module` (used by prepare_qat and convert).
  void replace_child(const std::string& name, ModulePtr module);

  // ---- modes and helpers -----------------------------------------------------------------
  /// Sets training mode on this module and all descendants.
  virtual void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }
  void zero_grad();
  std::int64_t num_parameters() const;
  /// One line of hyperparameters for summaries, e.g. "in_features=784, out_features=256".
  virtual std::string extra_repr() const { return ""; }
  /// A table of every module: dotted name, type, hyperparameters, parameter shapes and counts.
  std::string summary() const;

 protected:
  bool training_ = true;

 private:
  void add_child(const std::string& name, ModulePtr module);
  void check_new_name(const std::string& name, const char* fn) const;

  std::string type_name_;
  NamedTensors parameters_;
  NamedTensors buffers_;
  NamedModules children_;
};

}  // namespace qat::nn
