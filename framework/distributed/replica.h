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

/// Whether statistics gathered now are combined over replicas: a replica group is set and it
/// syncs (ProcessGroup::syncs: more than one rank, or a group of one forced through NCCL).
bool replicas_active();

/// min[i] = min over replicas, max[i] = max over replicas (one collective).
void sync_min_max(float* min, float* max, std::int64_t n);
/// values[i] = sum over replicas, in place.
void sync_sum(float* values, std::int64_t n);
void sync_sum(double* values, std::int64_t n);

/// The device variants: pointers to CUDA memory, reduced on the device through NCCL, queued on
/// the library's CUDA stream after the kernels that produced them (no host round trip, no host
/// sync). No-ops unless replicas_active(); without NCCL in the build they throw saying so.
/// values[i] = min (or max, sum) over replicas, in place.
void sync_device(float* values, std::int64_t n, ReduceOp op);
void sync_device(double* values, std::int64_t n, ReduceOp op);
/// dmin[i] = min over replicas, dmax[i] = max over replicas (two collectives).
void sync_min_max_device(float* dmin, float* dmax, std::int64_t n);

}  // namespace qat::distributed
