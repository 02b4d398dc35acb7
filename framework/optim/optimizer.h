#pragma once
#include <cstddef>
#include <map>
#include <string>
#include <vector>

#include "framework/tensor/tensor.h"

namespace qat::optim {

/// Base of the optimizers: holds named parameters and their per-parameter state.
///
/// Parameters are float leaf tensors with requires_grad, on the CPU or CUDA; `step()` updates
/// their data in place (no graph is recorded). A parameter whose grad() is undefined is skipped,
/// as in PyTorch. The CUDA parameters of a step are updated together (update_cuda: one fused
/// multi-tensor launch), their state kept on the device.
///
/// State is kept per parameter name in "slots" (e.g. SGD's "momentum_buffer", Adam's
/// "exp_avg"). `state()` exposes it as "<param>.<slot>" entries, so a checkpoint can save and
/// restore any optimizer through `kind()`, `hyperparameters()`, `state()` and `load_state()`
/// without knowing its type. A parameter's slots appear once its first update created them.
class Optimizer {
 public:
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  /// One update of every parameter that has a gradient.
  void step();
  /// Drops every parameter's gradient (Tensor::zero_grad).
  void zero_grad();

  double lr() const { return lr_; }
  /// Throws if lr < 0.
  void set_lr(double lr);

  const NamedTensors& params() const { return params_; }

  /// "sgd", "adam", "adamw".
  virtual std::string kind() const = 0;
  /// Every hyperparameter by name, lr included; booleans as 0/1.
  virtual std::map<std::string, double> hyperparameters() const = 0;

  /// Copies of the per-parameter state: "<param>.<slot>" -> tensor, in parameter order.
  NamedTensors state() const;
  /// Replaces the state with copies of `entries` (as returned by state()). Every entry must
  /// name a known parameter and slot with the right shape and dtype, and a parameter must get
  /// all of its slots or none. Throws qat::Error naming the offending entry and changes
  /// nothing on error.
  void load_state(const NamedTensors& entries);

 protected:
  /// `fn` names the optimizer in errors. Throws if lr < 0, or if a parameter is undefined,
  /// not floating point, not a leaf, or if a name repeats. Frozen parameters (requires_grad
  /// false) are accepted and skipped while they have no gradient.
  Optimizer(NamedTensors params, double lr, const char* fn);

  /// A per-parameter state slot: per-element slots have the parameter's shape and dtype;
  /// counters are int64 scalars.
  struct Slot {
    std::string name;
    bool per_element = true;
  };
  /// The slots this optimizer keeps for every parameter, in a fixed order.
  virtual std::vector<Slot> slots() const = 0;
  /// Updates `param` in place from `grad`; `state` holds this parameter's slots in slots()
  /// order, undefined before its first update (the update creates them).
  virtual void update(Tensor& param, const Tensor& grad, std::vector<Tensor>& state) = 0;
  /// A CUDA parameter with its gradient and state slots, for update_cuda.
  struct CudaUpdate {
    Tensor* param;
    Tensor grad;
    std::vector<Tensor>* state;
  };
  /// Updates every CUDA parameter of a step (all with a gradient on the device). The default
  /// throws: an optimizer without a CUDA kernel names itself.
  virtual void update_cuda(std::vector<CudaUpdate>& batch);

 private:
  NamedTensors params_;
  std::vector<std::vector<Tensor>> state_;  // [param][slot]
  double lr_;
};

}  // namespace qat::optim
