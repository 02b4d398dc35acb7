#pragma once
#include <cstddef>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "framework/io/checkpoint.h"

namespace qat::nn {
class Module;
}
namespace qat::optim {
class Optimizer;
}

namespace qat::io {

/// A checkpoint holding deep copies of `model`'s parameters and buffers (Module::named_state()),
/// on the host whatever the model's device, ready for metadata, optimizer and training state to
/// be added.
Checkpoint capture(const nn::Module& model);
/// `opt`'s kind(), hyperparameters() and a host copy of its state().
OptimizerState capture(const optim::Optimizer& opt);

struct LoadOptions {
  /// true: every model tensor must be in the checkpoint with the same shape and dtype, and the
  /// checkpoint may hold no other tensor; else nothing is loaded. false: the matching tensors
  /// are loaded and the rest is reported.
  bool strict = true;
  /// false: a parameter holding NaN or Inf rejects the load (a diverged run or a corrupt file).
  /// true: such parameters load (to inspect a diverged run); buffers are checked regardless.
  bool allow_non_finite = false;
};

/// What load_into did.
struct LoadReport {
  struct Mismatch {
    std::string name;
    std::string
        reason;  ///< "checkpoint [10, 128] vs model [10, 256]", "checkpoint int32 vs model int64"
  };
  std::vector<std::string> loaded;      ///< model tensors overwritten, in model order
  std::vector<std::string> missing;     ///< model tensors absent from the checkpoint (kept as they were)
  std::vector<std::string> unexpected;  ///< checkpoint tensors the model does not have
  std::vector<Mismatch> mismatched;     ///< in both, but with another shape or dtype (kept)

  bool complete() const { return missing.empty() && unexpected.empty() && mismatched.empty(); }
  /// One line per skipped tensor ("missing from checkpoint: fc2.bias", ...), empty if complete.
  std::string str() const;
  /// str() with at most `max_per_kind` lines for each of missing, mismatched and unexpected,
  /// the rest counted ("  ... and 108 more unexpected in checkpoint").
  std::string summary(std::size_t max_per_kind = 5) const;
};

/// The checkpoint metadata key whose value load_into adds to its strict-mode error when tensors
/// are missing or unexpected: the writer's word on what the checkpoint holds and how to load it
/// (modules/quant writes "the checkpoint holds a QAT model (...): call prepare_qat ...").
inline constexpr std::string_view kLoadHintKey = "load.hint";

/// Explains a failed load from the model, the checkpoint and what did not match; returns "" when
/// it has nothing to say.
using LoadHint =
    std::function<std::string(nn::Module& model, const Checkpoint& ckpt, const LoadReport& report)>;
/// Registers `hint` under `name` (replacing one of that name; an empty function removes it).
/// load_into consults every registered hint when a strict load finds missing or unexpected
/// tensors, after the checkpoint's own kLoadHintKey. Layers above the framework use it for what
/// only they can recognise (modules/quant: a float checkpoint loaded into a prepared model).
void set_load_hint(const std::string& name, LoadHint hint);

/// Checks what a checkpoint holds beyond its tensors' structure against `model` (e.g. modules/quant
/// compares the quantizer specs recorded in the metadata with the model's), appending one line per
/// problem that names the metadata key and its value (escaped with detail::printable).
using LoadCheck =
    std::function<void(nn::Module& model, const Checkpoint& ckpt, std::vector<std::string>& problems)>;
/// Registers `check` under `name` (replacing one of that name; an empty function removes it).
/// load_into runs every registered check with the value checks.
void set_load_check(const std::string& name, LoadCheck check);

/// Rewrites what an older build wrote into what this build's modules hold (a changed dtype or
/// name), given the model and a copy of the checkpoint; tensors it does not recognise stay as they
/// are. modules/quant turns the int32 bias of int8 layers written before the float bias into float.
using LoadUpgrade = std::function<void(nn::Module& model, Checkpoint& ckpt)>;
/// Registers `upgrade` under `name` (replacing one of that name; an empty function removes it).
/// load_into runs every registered upgrade before it matches the tensors.
void set_load_upgrade(const std::string& name, LoadUpgrade upgrade);

/// Copies the checkpoint's tensors into `model`'s parameters and buffers in place
/// (Tensor::copy_), so existing handles (optimizers, quantizer registries) stay valid. Everything
/// is checked first, and on any error the model is left bit-for-bit unchanged:
/// - structure: in strict mode any mismatch throws a CheckpointError naming the file, listing
///   the problems (LoadReport::summary) and the hints (kLoadHintKey, set_load_hint) when tensors
///   are missing or unexpected;
/// - values (strict or not): parameters finite (unless options.allow_non_finite), each module's
///   Module::check_state on the values it would hold (quantizer scales and zero points, observer
///   ranges, switches, batch-norm statistics, int8 layers' qparams), and the registered
///   set_load_check checks; a CheckpointError names the file and every bad tensor with its first
///   bad index and value.
LoadReport load_into(nn::Module& model, const Checkpoint& ckpt, const LoadOptions& options = {});
/// io::load(path), then load_into; nothing in the model changes unless the whole file is valid.
LoadReport load_into(nn::Module& model, const std::string& path, const LoadOptions& options = {});

/// Restores `opt` from the checkpoint's optimizer state: the kind must match, every saved
/// hyperparameter except lr must equal the optimizer's (they are constructor options), the
/// state goes through Optimizer::load_state and lr is set to the saved one (schedules move it).
/// Throws CheckpointError naming the file and every problem; `opt` is unchanged on error.
void restore_optimizer(optim::Optimizer& opt, const Checkpoint& ckpt);

/// Sets each generator in `targets` to the state saved under its name in the checkpoint's
/// training state. Throws CheckpointError (changing none) if a name is absent.
void restore_generators(const Checkpoint& ckpt, const std::map<std::string, Generator*>& targets);

}  // namespace qat::io
