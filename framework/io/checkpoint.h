#pragma once
#include <cstdint>
#include <iosfwd>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "framework/io/checkpoint_error.h"
#include "framework/io/format.h"
#include "framework/tensor/random.h"
#include "framework/tensor/tensor.h"

namespace qat::io {

/// An optimizer as Optimizer::kind(), hyperparameters() and state() expose it.
struct OptimizerState {
  std::string kind;                               ///< "sgd", "adam", ...
  std::map<std::string, double> hyperparameters;  ///< lr included
  NamedTensors state;                             ///< "<param>.<slot>" -> tensor
};

/// What an exact resume needs besides the model and the optimizer.
struct TrainingState {
  std::int64_t epoch = 0;
  std::int64_t global_step = 0;
  std::map<std::string, Generator::State> generators;  ///< e.g. "default", "loader"
  std::map<std::string, std::int64_t> counters;        ///< any other named counters
};

/// Where a checkpoint was read from; filled by the readers, ignored by the writers.
struct CheckpointInfo {
  std::string source;  ///< file path, "<memory>" or "<stream>"
  std::uint32_t format_version = 0;
  Version written_by;
  ArchiveKind archive = ArchiveKind::Binary;
  std::uint64_t payload_bytes = 0;
};

/// Everything a checkpoint file holds. Tensors of any dtype, by dotted name (a model's
/// parameters and buffers, see snapshot()); metadata is free-form text (the quantization layer
/// keeps its per-layer specs there); optimizer and training state are optional.
struct Checkpoint {
  NamedTensors tensors;
  std::map<std::string, std::string> metadata;
  std::optional<OptimizerState> optimizer;
  std::optional<TrainingState> training;
  CheckpointInfo info;
};

struct SaveOptions {
  ArchiveKind archive = ArchiveKind::Binary;
};

// ---- writing: header + payload. Tensors must be defined CPU tensors with unique names. ----

/// The complete file image of `ckpt`.
std::string to_bytes(const Checkpoint& ckpt, const SaveOptions& options = {});
/// Writes the file image to `os`; throws CheckpointError("<stream>") if the stream fails.
void write(const Checkpoint& ckpt, std::ostream& os, const SaveOptions& options = {});
/// The payload of `ckpt` as Boost XML archive text: what an ArchiveKind::Xml file holds after its
/// header, whatever archive the checkpoint was read from. For inspection and diffs
/// (qat-inspect --xml); tensors must be writable as for to_bytes.
std::string to_xml(const Checkpoint& ckpt);
/// Writes `path` atomically (temporary file in the same directory, fsync, rename, fsync of the
/// directory): a crash or error at any point leaves the previous file intact. Throws
/// CheckpointError naming `path`.
void save(const Checkpoint& ckpt, const std::string& path, const SaveOptions& options = {});

// ---- reading: everything is validated (header, length, CRC, decoding, counts and sizes
// against the bytes present) before anything is returned. Errors are CheckpointError naming
// the source. ----

/// Reads a file image held in memory; its size must match the header exactly.
Checkpoint from_bytes(std::string_view bytes, const std::string& source = "<memory>");
/// Reads one checkpoint from `is`, which is left just after it.
Checkpoint read(std::istream& is, const std::string& source = "<stream>");
/// Reads the file at `path`.
Checkpoint load(const std::string& path);

}  // namespace qat::io
