#pragma once
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <vector>

#include "framework/data/dataset.h"

namespace qat::data {

/// One mini-batch, converted from the dataset's bytes.
struct Batch {
  Tensor images;  // float32 (B, 1, rows, cols), (B, C, H, W), or (B, features) with flatten; pixel / 255
  Tensor labels;  // int64 (B)
};

/// Iterates a Dataset in mini-batches, reshuffled every epoch.
///
///   DataLoader loader(train, {.batch_size = 64, .seed = 1});
///   for (int e = 0; e < epochs; ++e)
///     for (const Batch& b : loader) { ... }
///
/// Epoch e's order is a Fisher-Yates permutation drawn from a Generator seeded by (seed, e),
/// so the same seed gives the same sequence of epochs, and `state()`/`set_state()` resume a
/// run at the exact batch. Iteration continues from the loader's position: a loop that
/// finishes an epoch leaves the loader at the start of the next one; a loop left early
/// resumes where it stopped. Batch buffers come from the tensor pool and are dropped before
/// the next batch is made, so steady-state iteration allocates nothing new.
class DataLoader {
 public:
  struct Options {
    std::int64_t batch_size = 64;
    bool shuffle = true;
    bool drop_last = false;  // drop the last batch when it is smaller than batch_size
    std::uint64_t seed = 0;
    bool flatten = false;  // images as (B, features)
    /// Data-parallel sharding (PyTorch's DistributedSampler): the epoch's order, the same on
    /// every replica, is padded by wrapping around to a multiple of num_replicas, and replica
    /// `rank` takes positions rank, rank + num_replicas, ... So every replica has the same
    /// number of batches, the shards are disjoint (up to the padding), and step s of the replicas
    /// together sees what one loader with batch_size * num_replicas sees at step s.
    std::int64_t num_replicas = 1;
    std::int64_t rank = 0;
  };

  /// Where the loader stands: the next batch is batch `batch` of epoch `epoch` under `seed`.
  struct State {
    std::uint64_t seed = 0;
    std::int64_t epoch = 0;
    std::int64_t batch = 0;
    bool operator==(const State&) const = default;
  };

  /// Keeps a handle on the dataset's tensors (no copy). Throws if batch_size < 1, the shard
  /// (num_replicas, rank) is out of range, or the dataset is malformed: images not uint8 of rank >= 2, labels not uint8 (N), or a label
  /// outside [0, num_classes).
  DataLoader(const Dataset& dataset, const Options& options);

  /// Fills `batch` with the next batch of the current epoch and returns true; at the end of
  /// the epoch returns false and moves to the start of the next epoch.
  bool next(Batch& batch);

  class Iterator;
  /// Continues the current epoch from the loader's position.
  Iterator begin();
  std::default_sentinel_t end() const { return {}; }

  /// Batches per epoch (of this replica's shard).
  std::int64_t size() const;
  /// Samples per epoch in this replica's shard.
  std::int64_t shard_size() const;
  std::int64_t epoch() const { return epoch_; }
  /// Moves to the first batch of `epoch` (>= 0).
  void set_epoch(std::int64_t epoch);

  State state() const { return {seed_, epoch_, cursor_}; }
  /// Throws if epoch < 0 or batch is outside [0, size()].
  void set_state(const State& state);

  const Dataset& dataset() const { return dataset_; }
  const Options& options() const { return options_; }

 private:
  /// Builds order_ for the current epoch when it is stale.
  void prepare_order();

  Dataset dataset_;
  Options options_;
  Shape sample_shape_;  // one converted sample, without the batch dimension
  std::uint64_t seed_;
  std::int64_t epoch_ = 0;
  std::int64_t cursor_ = 0;          // next batch within the epoch
  std::vector<std::int64_t> order_;  // sample indices of the current epoch
  std::int64_t order_epoch_ = -1;    // the epoch order_ was drawn for
  std::uint64_t order_seed_ = 0;
};

/// Input iterator over the rest of the current epoch; it owns the current batch.
class DataLoader::Iterator {
 public:
  using value_type = Batch;
  using difference_type = std::ptrdiff_t;

  const Batch& operator*() const { return batch_; }
  const Batch* operator->() const { return &batch_; }
  Iterator& operator++() {
    done_ = !loader_->next(batch_);
    return *this;
  }
  void operator++(int) { ++*this; }
  bool operator==(std::default_sentinel_t) const { return done_; }

 private:
  friend class DataLoader;
  explicit Iterator(DataLoader& loader) : loader_(&loader) { ++*this; }

  DataLoader* loader_;
  Batch batch_;
  bool done_ = false;
};

inline DataLoader::Iterator DataLoader::begin() { return Iterator(*this); }

}  // namespace qat::data
