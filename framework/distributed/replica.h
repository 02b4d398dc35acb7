#pragma once
// Statistics that modules gather in their forward pass (observer ranges, histogram counts, LSQ's
// initial mean |x|, batch-norm moments) are combined over the replicas of a data-parallel model,
// so that every replica computes the same qparams and running statistics from the global batch.
// DistributedDataParallel::forward installs its group for the duration of a training forward;
// the functions below are no-ops otherwise (a single-process run, evaluation).
#include <cstdint>
#include <memory>

#include "framework/distributed/process_group.h"

namespace qat::distributed {

/// The group of the data-parallel forward running on this thread, or null.
const ProcessGroupPtr& replica_group();

/// RAII: makes `group` the replica group on this thread; restores the previous one.
class ReplicaGuard {
 public:
  explicit ReplicaGuard(ProcessGroupPtr group);
  ~ReplicaGuard();
  ReplicaGuard(const ReplicaGuard&) = delete;
  ReplicaGuard& operator=(const ReplicaGuard&) = delete;

 private:
  ProcessGroupPtr prev_;
};

/// RAII: what is gathered in this scope comes from state every replica holds identically (a
/// layer's weight, plain or with batch norm folded in), so it needs no collective: clears the
/// replica group for the scope.
class SameOnEveryReplica {
 public:
  SameOnEveryReplica() : guard_(nullptr) {}

 private:
  ReplicaGuard guard_;
};

/// min[i] = min over replicas, max[i] = max over replicas (one collective).
void sync_min_max(float* min, float* max, std::int64_t n);
/// values[i] = sum over replicas, in place.
void sync_sum(float* values, std::int64_t n);
void sync_sum(double* values, std::int64_t n);

}  // namespace qat::distributed
