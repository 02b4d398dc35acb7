#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "framework/tensor/tensor.h"

namespace qat {
struct Pool2dParams;
}

namespace qat::nn {

class Module;
template <class M = Module>
class Child;
using ModulePtr = std::shared_ptr<Module>;
using NamedModules = std::vector<std::pair<std::string, ModulePtr>>;
/// Non-owning view of a module tree: (dotted name, module), the root named "".
using ModuleRefs = std::vector<std::pair<std::string, Module*>>;

/// Called before a module's forward with its inputs (PyTorch's forward pre-hook).
using ForwardPreHook = std::function<void(Module& module, const std::vector<Tensor>& inputs)>;
/// Called after a module's forward; may replace `output` (PyTorch's forward hook).
using ForwardHook =
    std::function<void(Module& module, const std::vector<Tensor>& inputs, Tensor& output)>;

/// Sees every module call on this thread (graph capture, see nn/graph.h). At most one is
/// installed at a time, through CallObserverGuard.
class CallObserver {
 public:
  virtual ~CallObserver() = default;
  virtual void enter(Module& module, const std::vector<Tensor>& inputs) = 0;
  virtual void exit(Module& module, const std::vector<Tensor>& inputs, const Tensor& output) = 0;
};

/// RAII: installs `observer` for module calls on this thread; restores the previous one.
class CallObserverGuard {
 public:
  explicit CallObserverGuard(CallObserver* observer);
  ~CallObserverGuard();
  CallObserverGuard(const CallObserverGuard&) = delete;
  CallObserverGuard& operator=(const CallObserverGuard&) = delete;
  static CallObserver* current();

 private:
  CallObserver* prev_;
};

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
  /// Calls forward(x) with the hooks and the call observer around it. Parents call their
  /// children this way (never forward() directly), so hooks and graph capture see every call.
  Tensor operator()(const Tensor& x);

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
  /// Registers `module` as child `name` and returns a handle that follows replacement (Child);
  /// the way to keep children as members in a custom module.
  template <class Handle = Module, class M = Module>
  Child<Handle> register_child(const std::string& name, std::shared_ptr<M> module) {
    add_child(name, std::move(module));
    return Child<Handle>(this, name);
  }

  // ---- lookup ----------------------------------------------------------------------------
  NamedTensors named_parameters(bool recurse = true) const;
  NamedTensors named_buffers(bool recurse = true) const;
  /// Parameters then buffers, the whole persistent state.
  NamedTensors named_state() const;
  /// Moves every parameter, buffer (quantizer state included) and gradient of this module and
  /// its descendants to `device`, in place: handles held elsewhere (an optimizer's) follow.
  /// Returns *this.
  Module& to(Device device);
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

  // ---- state validation ------------------------------------------------------------------
  /// A module's own parameters and buffers by local name ("scale", "running_var").
  using StateView = std::map<std::string, Tensor>;
  /// Checks values this module's own parameters and buffers would hold, before they are set
  /// (io::load_into calls it with the checkpoint's tensors, the current ones where the checkpoint
  /// has none, and copies nothing if any module reports a problem; DivergenceGuard calls it with
  /// the current state). Appends one line per bad tensor, "<local name>[i] = <value>: <why>"
  /// (nn/state_check.h formats them; the caller adds the module's name and the file). Structure
  /// (names, shapes, dtypes) is checked before; the default checks nothing.
  virtual void check_state(const StateView& state, std::vector<std::string>& problems) const;
  /// check_state on the module's current parameters and buffers.
  void check_current_state(std::vector<std::string>& problems) const;

  // ---- hooks ---------------------------------------------------------------------------
  /// Registers a hook on this module; returns a handle for remove_hook. Hooks run in the order
  /// registered, on every call through operator().
  std::int64_t register_forward_pre_hook(ForwardPreHook hook);
  std::int64_t register_forward_hook(ForwardHook hook);
  /// Removes a hook by handle; returns false if there is none.
  bool remove_hook(std::int64_t handle);
  /// Whether a forward or forward pre-hook is registered.
  bool has_hooks() const { return !pre_hooks_.empty() || !hooks_.empty(); }
  /// Whether graph capture treats a call as one step (true for a module without children;
  /// QAT layers and quantizers, whose children are their own internals, override it).
  virtual bool is_atomic() const { return children_.empty(); }

  // ---- fusion ----------------------------------------------------------------------------
  /// max_pool2d(forward(x), pool) in one pass where this module has such a path, else an
  /// undefined Tensor (the default). Sequential calls it for a child followed by a max pool
  /// (only Identity children between) when no hook or graph capture watches them.
  virtual Tensor forward_max_pooled(const Tensor& x, const Pool2dParams& pool);
  /// A max-pool layer's pooling (MaxPool2d, QuantizedMaxPool2d); nullptr for any other layer.
  virtual const Pool2dParams* max_pool_params() const { return nullptr; }

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
  /// Runs `body` (the forward computation over `inputs`) with hooks and the call observer
  /// around it: operator() for one input, multi-input modules (quant::Add) for several.
  Tensor call(const std::vector<Tensor>& inputs, const std::function<Tensor()>& body);

  bool training_ = true;

 private:
  void add_child(const std::string& name, ModulePtr module);
  void check_new_name(const std::string& name, const char* fn) const;

  std::string type_name_;
  NamedTensors parameters_;
  NamedTensors buffers_;
  NamedModules children_;
  mutable StateView own_state_;  // check_current_state's view, rebuilt when a tensor is (re)registered
  mutable bool own_state_valid_ = false;
  std::vector<std::pair<std::int64_t, ForwardPreHook>> pre_hooks_;
  std::vector<std::pair<std::int64_t, ForwardHook>> hooks_;
};

/// A typed handle to a child that follows replacement: it looks the child up by name at each
/// use, so after prepare_qat / convert swap `fc` for its QAT or int8 version, calls through the
/// handle reach the new module (a plain shared_ptr member would keep the old one).
///
///   class Net : public nn::Module {
///     nn::Child<> fc_ = register_child("fc", std::make_shared<nn::Linear>(784, 10));
///     Tensor forward(const Tensor& x) override { return fc_(x); }
///   };
template <class M>
class Child {
 public:
  Child() = default;
  Child(Module* parent, std::string name) : parent_(parent), name_(std::move(name)) {}

  /// The current child as M; throws naming both types if it was replaced by something else.
  std::shared_ptr<M> get() const {
    QAT_REQUIRE(parent_ != nullptr, "nn::Child::get", "empty child handle");
    ModulePtr m = parent_->child(name_);
    auto typed = std::dynamic_pointer_cast<M>(m);
    QAT_REQUIRE(typed != nullptr, "nn::Child::get", "child '", name_, "' of ", parent_->type_name(),
                " is now a ", m->type_name(),
                ", not the type this handle was declared with (declare it as nn::Child<> to call "
                "whatever module is there)");
    return typed;
  }
  M* operator->() const { return get().get(); }
  M& operator*() const { return *get(); }
  /// Calls the current child (through operator(), so hooks and graph capture see it).
  template <class... Args>
  Tensor operator()(const Args&... inputs) const {
    return (*get())(inputs...);
  }
  const std::string& name() const { return name_; }

 private:
  Module* parent_ = nullptr;
  std::string name_;
};

}  // namespace qat::nn
