#pragma once
#include <string>
#include <utility>

#include "framework/tensor/error.h"

namespace qat::io {

/// A checkpoint that cannot be read, written or applied. what() is
/// "checkpoint '<source>': <problem>", where source is the file path, "<memory>" or "<stream>".
class CheckpointError : public Error {
 public:
  CheckpointError(std::string source, const std::string& problem)
      : Error("checkpoint '" + source + "': " + problem), source_(std::move(source)) {}
  /// The file path (or "<memory>" / "<stream>") the error is about.
  const std::string& source() const { return source_; }

 private:
  std::string source_;
};

}  // namespace qat::io
