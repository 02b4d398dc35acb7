#pragma once
// The processes of one data-parallel job and the collectives between them: Gloo over TCP for
// CPU tensors and, in a build with NCCL (QAT_NCCL, has_nccl()), NCCL for CUDA tensors in the same
// group (PyTorch's "cpu:gloo,cuda:nccl"; detail/nccl_group.cpp says what runs where).
//
//   auto group = distributed::init_process_group(distributed::GroupOptions::from_env());
//   group->all_reduce(t);                   // sum over every rank, in place
//   group->broadcast(t, /*root=*/0);
//
// Every rank must issue the same collectives in the same order, as with any collective library.
// They run one at a time, in issue order, on the group's communication thread, so an async
// all-reduce overlaps with whatever the caller computes next (DistributedDataParallel launches
// one per gradient bucket during the backward pass). A failed collective (a peer that exited or
// was killed, or a timeout) throws qat::Error naming the collective, the rank and the cause, and
// every later one fails at once: a broken job stops instead of hanging.
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "framework/tensor/tensor.h"

namespace qat::distributed {

enum class ReduceOp { Sum, Min, Max };

/// Where and how a process joins its group.
struct GroupOptions {
  int rank = 0;
  int world_size = 1;
  /// Rank 0 serves the rendezvous here; the others connect to it (torchrun's MASTER_ADDR/PORT).
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  /// Bound on every wait: joining, and each collective. A dead peer is noticed at once (its
  /// connections close); the timeout catches a peer that hangs.
  std::chrono::milliseconds timeout{std::chrono::seconds(300)};
  /// Network interface for the collectives (GLOO_SOCKET_IFNAME); "" picks the address from
  /// master_addr: loopback for a local job, else this host's name.
  std::string iface;
  /// How small blocking all-reduces (observer ranges, SyncBatchNorm sums, and DDP's last
  /// gradient bucket: the collectives the step waits on) travel. Off: like every collective,
  /// through Gloo's event-loop thread, which must be scheduled, read the bytes and wake the caller.
  /// Block / Spin: on a second set of connections in Gloo's synchronous pair mode, read by the
  /// calling thread itself, which sleeps in recv() (Block) or polls it (Spin: lowest latency, but
  /// it holds its core while it waits, which costs a rank sharing that core). Auto: Spin when
  /// every rank on this machine is bound to cores no other rank has (scripts/launch.sh, mpirun's
  /// --bind-to core), else Block. Min and max always qualify; a sum only with 2 ranks (there
  /// a + b == b + a, so every rank keeps the same bits). QAT_DIST_LANE=auto|off|block|spin.
  enum class Lane { Auto, Off, Block, Spin };
  Lane lane = Lane::Auto;
  /// The largest all-reduce, in bytes, that takes the lane.
  std::int64_t lane_bytes = 1 << 20;  // DistributedDataParallel's default bucket
  /// This process's index among the ranks on its machine (LOCAL_RANK, or mpirun's
  /// OMPI_COMM_WORLD_LOCAL_RANK); -1 when unknown. Picks its GPU: cuda_device().
  int local_rank = -1;
  /// Tests of the NCCL path on one GPU: a group of one that still creates its NCCL communicator
  /// and runs CUDA collectives (and module statistics' syncs) through it. Needs has_nccl().
  bool nccl_alone = false;

  /// RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT as torchrun sets them; under mpirun, which sets
  /// none of these, OMPI_COMM_WORLD_RANK / OMPI_COMM_WORLD_SIZE (then MASTER_ADDR defaults to
  /// 127.0.0.1: pass -x MASTER_ADDR=host for several machines). QAT_DIST_TIMEOUT (seconds) and
  /// GLOO_SOCKET_IFNAME are read too, and QAT_DIST_LANE. Throws qat::Error naming the variable and its
  /// value.
  static GroupOptions from_env();
  /// Throws qat::Error naming the field and value unless the options are usable.
  void validate() const;
  /// The GPU of this rank among `device_count`: local_rank, else rank % device_count (one rank
  /// per GPU: NCCL refuses two ranks of a communicator on one GPU). Throws qat::Error naming the
  /// values when there is no device or local_rank >= device_count.
  int cuda_device(int device_count) const;
};

/// A collective in flight.
class Work {
 public:
  struct State;
  explicit Work(std::shared_ptr<State> state) : state_(std::move(state)) {}
  /// Blocks until the collective is done; throws its error, if any.
  void wait() const;
  bool completed() const;

 private:
  std::shared_ptr<State> state_;
};

/// What a group carried since it started (benchmarks and tests).
struct GroupStats {
  std::int64_t all_reduce_calls = 0, all_reduce_bytes = 0;  // bytes of the tensors reduced
  std::int64_t broadcast_bytes = 0, all_gather_bytes = 0, barriers = 0;
  std::int64_t lane_calls = 0;  // all-reduces that took the synchronous lane
  std::int64_t nccl_calls = 0;  // collectives of CUDA tensors (NCCL), all kinds together
  GroupOptions::Lane lane = GroupOptions::Lane::Off;  // how it runs: Off, Block or Spin
};

class ProcessGroup {
 public:
  virtual ~ProcessGroup() = default;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;

  /// Reduces `t` over every rank in place (float32, float64, int32 or int64); returns at once,
  /// the result is there after wait(). A CUDA tensor goes through NCCL on the library's CUDA
  /// stream: every op queued after the call (any later CUDA op) already sees the result, and
  /// wait() also blocks the host until it is there (nothing to wait for to use it on the GPU).
  virtual std::shared_ptr<Work> all_reduce_async(const Tensor& t, ReduceOp op) = 0;
  /// The same on raw memory, which must stay valid until the work is done.
  virtual std::shared_ptr<Work> all_reduce_async(void* data, std::int64_t n, DType dtype,
                                                 ReduceOp op) = 0;
  /// Blocking all-reduce: run on the calling thread when no async collective is pending (no
  /// hand-over to the communication thread: what module statistics use in the forward pass).
  virtual void all_reduce(void* data, std::int64_t n, DType dtype, ReduceOp op) = 0;
  void all_reduce(const Tensor& t, ReduceOp op = ReduceOp::Sum);
  /// The all-reduce of CUDA memory (NCCL): queued on the library's CUDA stream after the ops
  /// before it, returns without waiting for it (no host sync). What module statistics use on
  /// CUDA. Throws qat::Error without NCCL in the build (has_nccl()).
  virtual void all_reduce_cuda(void* data, std::int64_t n, DType dtype, ReduceOp op);
  /// Whether the collectives run at all: world_size > 1, or a group of one with
  /// GroupOptions::nccl_alone (tests). Module statistics and DDP sync only then.
  virtual bool syncs() const { return world_size() > 1; }
  /// Rank `root`'s `t` into every rank's `t` (same shape and dtype everywhere). This and
  /// all_gather block the host until done, for CUDA tensors too.
  virtual void broadcast(const Tensor& t, int root) = 0;
  /// Every rank's `t` (same shape and dtype everywhere), stacked: (world_size, t.shape...).
  virtual Tensor all_gather(const Tensor& t) = 0;
  virtual void barrier() = 0;
  virtual GroupStats stats() const = 0;
  /// "rank 1 of 2" (for messages).
  std::string who() const;
};

using ProcessGroupPtr = std::shared_ptr<ProcessGroup>;

/// "auto", "off", "block" or "spin" (QAT_DIST_LANE's values).
const char* lane_name(GroupOptions::Lane lane);

/// Joins the group: rank 0 serves a small key-value rendezvous on master_port, every rank
/// registers there (its world size and Gloo's listening address) and Gloo connects a full mesh.
/// Throws qat::Error with a clear cause when: the options are out of range; rank 0 cannot listen
/// on the port; the master cannot be reached within the timeout; ranks disagree on the world
/// size; two processes claim one rank; or a rank does not join within the timeout.
/// world_size 1 gives a group whose collectives do nothing.
ProcessGroupPtr init_process_group(const GroupOptions& options);

/// Whether this build has the Gloo backend (QAT_DISTRIBUTED); without it only world_size 1 works.
bool has_gloo();
/// Whether this build has NCCL for CUDA tensors (QAT_NCCL; installed package: qat_HAS_NCCL).
/// Without it a CUDA tensor in a collective of more than one rank throws saying so.
bool has_nccl();

}  // namespace qat::distributed
