#pragma once
// A divergence guard for training loops: stops training at the first non-finite loss, gradient or
// parameter, or at a module state that check_state rejects, naming the tensor, index, value and step.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "framework/nn/module.h"
#include "framework/optim/optimizer.h"

namespace qat::optim {

/// Thrown by DivergenceGuard: "divergence at step 12: gradient of fc1.weight[3, 7] = nan (...)".
class DivergenceError : public Error {
 public:
  /// What went wrong: the loss, an input batch, a gradient, a parameter after the step, a
  /// module's state (Module::check_state), or something a module's forward found (Forward).
  enum class Kind { Loss, Input, Gradient, Parameter, State, Forward };

  DivergenceError(const std::string& message, std::int64_t step, Kind kind, std::string tensor)
      : Error(message), step_(step), kind_(kind), tensor_(std::move(tensor)) {}

  /// The step that found it (1 is the first step).
  std::int64_t step() const { return step_; }
  Kind kind() const { return kind_; }
  /// The dotted name of the tensor ("fc1.weight", "loss", "input"), or of the module for State
  /// and Forward.
  const std::string& tensor() const { return tensor_; }

 private:
  std::int64_t step_;
  Kind kind_;
  std::string tensor_;
};

/// Checks a training step for divergence and throws DivergenceError at the first sign of it:
///
///   optim::DivergenceGuard guard(*model, opt);
///   for (const data::Batch& b : loader) {
///     opt.zero_grad();
///     Tensor loss = cross_entropy((*model)(b.images), b.labels);
///     guard.check_loss(loss);   // (a) the loss is finite
///     loss.backward();
///     guard.check_gradients();  // (b) every gradient is finite
///     opt.step();
///     guard.end_step();         // (c) every parameter finite, check_state clean; next step
///   }
///
/// Each check is one vectorised pass per tensor without allocation; Module::check_state runs as
/// each module writes it (on the MLP QAT step ~20 us of the ~50 us the checks take, bench_guard).
/// The loss is checked every step; gradients, parameters and state every `Options::every` steps,
/// so a divergence is reported up to every - 1 steps after it began. The guard keeps handles to
/// the parameters and modules it was built on: build it after prepare_qat, and anew after
/// anything that replaces modules (convert).
///
/// While a guard is alive it is current() on its thread (the newest one): modules that find
/// a divergence inside the forward report it through it with the step (learnable quantizers
/// refusing NaN / inf training input, which they would otherwise quantize out of sight).
class DivergenceGuard {
 public:
  struct Options {
    std::int64_t every = 1;       ///< check gradients, parameters and state every N steps
    bool check_state = true;      ///< run Module::check_current_state after the step
    std::int64_t first_step = 1;  ///< the number of the next step (resume: global step + 1)
  };

  /// Checks the model's parameters (their gradients after backward, their values after the step).
  explicit DivergenceGuard(nn::Module& model, const Options& options);
  explicit DivergenceGuard(nn::Module& model) : DivergenceGuard(model, Options{}) {}
  /// Checks the parameters `optimizer` updates, by its names; its learning rate is in the messages.
  DivergenceGuard(nn::Module& model, const Optimizer& optimizer, const Options& options);
  DivergenceGuard(nn::Module& model, const Optimizer& optimizer)
      : DivergenceGuard(model, optimizer, Options{}) {}
  ~DivergenceGuard();
  DivergenceGuard(const DivergenceGuard&) = delete;
  DivergenceGuard& operator=(const DivergenceGuard&) = delete;

  /// The guard alive on this thread (the newest), or null.
  static DivergenceGuard* current();

  /// Optional, before the forward: every value of an input batch is finite (`name` in the message).
  void check_input(const Tensor& x, std::string_view name = "input") const;
  /// (a) After the forward: every value of the loss is finite.
  void check_loss(const Tensor& loss);
  /// (b) After backward, before the optimizer step: every gradient is finite.
  void check_gradients() const;
  /// (c) After the optimizer step: every parameter is finite and no module's check_state reports a
  /// problem; then the guard moves on to the next step.
  void end_step();

  /// Appended to every message after "; ", e.g. what a program keeps on disk ("the last
  /// checkpoint is kept: ..."); empty for none.
  void set_note(std::string note) { note_ = std::move(note); }

  /// The number of the step being checked (1 for the first).
  std::int64_t step() const { return step_; }
  void set_step(std::int64_t step);
  /// Whether gradients, parameters and state are checked at this step (every N steps).
  bool checks_this_step() const { return step_ % options_.every == 0; }
  const Options& options() const { return options_; }

  /// Throws DivergenceError "divergence at step N: <what>[; note]" (for problems found elsewhere,
  /// e.g. Kind::Forward by a module; `tensor` names the tensor or module).
  [[noreturn]] void fail(DivergenceError::Kind kind, const std::string& tensor,
                         const std::string& what) const;

 private:
  DivergenceGuard* prev_;  // current() before this one

  const Optimizer* optimizer_ = nullptr;
  Options options_;
  NamedTensors params_;
  std::vector<std::pair<std::string, nn::ModulePtr>> stateful_;  // modules with parameters or buffers
  std::vector<std::string> problems_;                            // reused by end_step
  std::string note_;
  std::int64_t step_;
  double last_loss_ = 0;
  std::int64_t last_loss_step_ = 0;  // 0: no finite loss yet
};

}  // namespace qat::optim
