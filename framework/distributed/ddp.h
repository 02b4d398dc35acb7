#pragma once
// Data-parallel training: one replica of the model per process, gradients averaged over the
// replicas during backward, so that every replica takes the same optimizer step.
//
//   auto group = distributed::init_process_group(distributed::GroupOptions::from_env());
//   distributed::DistributedDataParallel ddp(model, group);   // checks and broadcasts rank 0's state
//   data::DataLoader loader(train, {.batch_size = 64 / group->world_size(),
//                                   .num_replicas = group->world_size(), .rank = group->rank()});
//   for (const data::Batch& b : loader) {
//     opt.zero_grad();
//     cross_entropy(ddp(b.images), b.labels).backward();     // buckets all-reduced as they fill
//     opt.step();                                            // same gradients: same step everywhere
//   }
//
// What keeps the replicas bit-identical: the starting state is broadcast from rank 0; the
// averaged gradients come out of a ring all-reduce, which leaves the same bits on every rank; and
// during a training forward through ddp(...), every statistic a module gathers from its batch is
// combined over the replicas first (distributed/replica.h): observers' min / max (min of mins,
// max of maxes, before the moving average), histogram counts, LSQ's initial mean |x|, and batch
// norm's mean and variance (SyncBatchNorm: statistics of the global batch, also inside the QAT
// ConvBn layers). A replica so computes what one process would compute on the global batch.
//
// On CUDA (a build with NCCL): every parameter on the GPU (one device for all, else the
// constructor throws), the buckets' flat buffers there too, summed through NCCL and averaged by a
// kernel, all queued on the library's one CUDA stream, so a step adds no host sync; observers'
// ranges are reduced on the device too. SyncBatchNorm is not implemented on CUDA yet (batch_norm
// throws under a replica group).
#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "framework/autograd/engine.h"
#include "framework/distributed/process_group.h"
#include "framework/nn/module.h"

namespace qat::distributed {

class DistributedDataParallel : private autograd::GradReadyObserver {
 public:
  struct Options {
    /// Gradients are all-reduced in buckets of about this many bytes, in reverse registration
    /// order (roughly the order backward produces them); a bucket's all-reduce starts as soon as
    /// its last gradient is ready and overlaps with the rest of backward.
    std::int64_t bucket_bytes = 1 << 20;
    /// Check at construction that every rank built the same model (names, shapes, dtypes).
    bool check_model = true;
  };

  /// Checks the model's structure across ranks (throws qat::Error naming the ranks that differ),
  /// broadcasts rank 0's parameters and buffers, and starts watching backward passes.
  DistributedDataParallel(nn::ModulePtr model, ProcessGroupPtr group, Options options);
  DistributedDataParallel(nn::ModulePtr model, ProcessGroupPtr group)
      : DistributedDataParallel(std::move(model), std::move(group), Options{}) {}
  ~DistributedDataParallel() override;
  DistributedDataParallel(const DistributedDataParallel&) = delete;
  DistributedDataParallel& operator=(const DistributedDataParallel&) = delete;

  /// The model's forward; in training mode with module statistics combined over the replicas.
  Tensor forward(const Tensor& x);
  Tensor operator()(const Tensor& x) { return forward(x); }

  nn::Module& module() const { return *model_; }
  const ProcessGroupPtr& group() const { return group_; }

  /// While alive, backward passes only accumulate gradients locally (gradient accumulation);
  /// the first backward after it all-reduces what was accumulated.
  class NoSync {
   public:
    explicit NoSync(DistributedDataParallel& ddp) : ddp_(ddp), prev_(ddp.sync_) { ddp_.sync_ = false; }
    ~NoSync() { ddp_.sync_ = prev_; }
    NoSync(const NoSync&) = delete;
    NoSync& operator=(const NoSync&) = delete;

   private:
    DistributedDataParallel& ddp_;
    bool prev_;
  };
  NoSync no_sync() { return NoSync(*this); }

  struct Stats {
    std::int64_t syncs = 0;           ///< backward passes whose gradients were all-reduced
    std::int64_t gradient_bytes = 0;  ///< bytes of the parameters' gradients (one step)
    std::int64_t reduced_bytes = 0;   ///< gradient bytes all-reduced, all syncs together
    std::int64_t buckets = 0;         ///< buckets per sync
    double wait_seconds = 0;          ///< time the steps waited for their all-reduces
  };
  const Stats& stats() const { return stats_; }

 private:
  struct Bucket {
    std::vector<int> params;  // indices into params_
    Tensor flat;              // their gradients, concatenated
    int pending = 0;          // gradients not yet ready in this pass
    std::shared_ptr<Work> work;
  };

  void leaf_ready(const TensorImpl* leaf) override;
  void backward_end() override;
  void check_same_model() const;
  void broadcast_state() const;
  void launch_ready_buckets(bool blocking);
  void launch(Bucket& b, bool blocking);
  void launch_cuda(Bucket& b);

  nn::ModulePtr model_;
  ProcessGroupPtr group_;
  Options options_;
  std::vector<Tensor> params_;                           // every parameter
  std::vector<int> bucket_of_;                           // params_ index -> bucket
  std::vector<char> ready_;                              // params_ index -> ready in this pass
  std::unordered_map<const TensorImpl*, int> index_of_;  // leaf -> params_ index
  std::vector<Bucket> buckets_;
  std::size_t next_bucket_ = 0;  // buckets are launched in order, the same on every rank
  bool in_pass_ = false;         // a leaf of ours was reported in this backward
  bool forwarded_ = false;       // a training forward went through forward() since the last sync
  bool sync_ = true;
  Stats stats_;
};

}  // namespace qat::distributed
