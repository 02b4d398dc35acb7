#include "framework/distributed/replica.h"

#include <vector>

namespace qat::distributed {

namespace {
thread_local ProcessGroupPtr g_replica_group;
}

const ProcessGroupPtr& replica_group() { return g_replica_group; }

ReplicaGuard::ReplicaGuard(ProcessGroupPtr group) : prev_(std::move(g_replica_group)) {
  g_replica_group = std::move(group);
}

ReplicaGuard::~ReplicaGuard() { g_replica_group = std::move(prev_); }

bool replicas_active() { return g_replica_group && g_replica_group->syncs(); }

void sync_device(float* values, std::int64_t n, ReduceOp op) {
  if (replicas_active() && n > 0) g_replica_group->all_reduce_cuda(values, n, DType::Float32, op);
}

void sync_device(double* values, std::int64_t n, ReduceOp op) {
  if (replicas_active() && n > 0) g_replica_group->all_reduce_cuda(values, n, DType::Float64, op);
}

void sync_min_max_device(float* dmin, float* dmax, std::int64_t n) {
  sync_device(dmin, n, ReduceOp::Min);
  sync_device(dmax, n, ReduceOp::Max);
}

// One MIN all-reduce over [min..., -max...]: max(a, b) = -min(-a, -b), and negation is exact.
void sync_min_max(float* min, float* max, std::int64_t n) {
  const ProcessGroupPtr& g = g_replica_group;
  if (!g || g->world_size() == 1 || n == 0) return;
  std::vector<float> both(static_cast<std::size_t>(2 * n));
  for (std::int64_t i = 0; i < n; ++i) {
    both[i] = min[i];
    both[n + i] = -max[i];
  }
  g->all_reduce(both.data(), 2 * n, DType::Float32, ReduceOp::Min);
  for (std::int64_t i = 0; i < n; ++i) {
    min[i] = both[i];
    max[i] = -both[n + i];
  }
}

void sync_sum(float* values, std::int64_t n) {
  const ProcessGroupPtr& g = g_replica_group;
  if (g && g->world_size() > 1 && n > 0) g->all_reduce(values, n, DType::Float32, ReduceOp::Sum);
}

void sync_sum(double* values, std::int64_t n) {
  const ProcessGroupPtr& g = g_replica_group;
  if (g && g->world_size() > 1 && n > 0) g->all_reduce(values, n, DType::Float64, ReduceOp::Sum);
}

}  // namespace qat::distributed
