#pragma once
#include <cstdint>

#include "framework/tensor/tensor.h"

namespace qat::data {

/// An in-memory labelled image set, kept as bytes (a quarter of the float size); the
/// DataLoader converts one batch at a time.
struct Dataset {
  Tensor images;  // uint8 (N, rows, cols), or (N, C, H, W)
  Tensor labels;  // uint8 (N), each in [0, num_classes)
  int num_classes = 0;

  std::int64_t size() const { return labels.defined() ? labels.size(0) : 0; }
};

}  // namespace qat::data
