#pragma once
// The example programs' models and checkpoints: the model a command line describes, the metadata
// that lets a checkpoint rebuild it, and the training checkpoint that --resume continues from.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "examples/common/options.h"
#include "framework/data/dataloader.h"
#include "framework/io/checkpoint.h"
#include "framework/optim/optimizer.h"
#include "modules/quant/prepare.h"

namespace qat::examples {

/// The strings of v joined by sep.
std::string join(const std::vector<std::string>& v, char sep);

/// One input of the model's shape: prepare_qat and convert trace the model's forward on it.
Tensor example_input(const ModelFactory& factory);

/// The float model (weights from `float_init` when given), prepared for QAT with `o.qconfig` and
/// `o.rules` when `o.mode` is "qat"; `report` receives prepare's report.
nn::ModulePtr build_model(const Options& o, const ModelFactory& factory,
                          quant::PrepareReport* report = nullptr,
                          const io::Checkpoint* float_init = nullptr);

/// What a checkpoint says about the model that wrote it (kind, model, arch, mode, qconfig, rules).
std::map<std::string, std::string> describe(const Options& o, const ModelFactory& f,
                                            const std::string& kind);

/// The metadata entry `key` of a checkpoint written by `f.program`; throws CheckpointError naming
/// the file and the key when it is absent.
std::string meta(const io::Checkpoint& ckpt, const ModelFactory& f, const std::string& key);

/// The training counter `key` of a checkpoint, which must lie in [0, max] (CheckpointError).
std::int64_t counter(const io::Checkpoint& ckpt, const std::string& key, std::int64_t max);

/// Adopts the architecture and quantization recorded in `ckpt`; throws CheckpointError if it was
/// written by another program or architecture (values from the file are printed escaped).
void adopt(Options& o, const ModelFactory& f, const io::Checkpoint& ckpt);

/// Writes the training checkpoint (model, optimizer, data order, RNG) after `epoch` to `o.save`,
/// atomically, so that --resume continues exactly; returns its size in bytes.
std::int64_t save_training(const Options& o, const ModelFactory& f, nn::Module& model,
                           const quant::PrepareReport& prepared, const optim::Optimizer& opt,
                           const data::DataLoader& loader, int epoch, std::int64_t global_step);

}  // namespace qat::examples
