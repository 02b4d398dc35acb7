#pragma once
// Internal: what the ProcessGroup backends share.
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "framework/distributed/process_group.h"

namespace gloo::rendezvous {
class Store;
}

namespace qat::distributed {

struct Work::State {
  std::mutex m;
  std::condition_variable cv;
  bool done = false;
  std::string error;  // empty: success
  /// A CUDA collective (NCCL): done when its event has completed. wait() calls `device_wait`
  /// once (blocks until the event, returns the error or ""); completed() asks `device_query`.
  std::function<std::string()> device_wait;
  std::function<bool()> device_query;
};

namespace detail {

/// A Work that is already done (with `error`, if not empty).
std::shared_ptr<Work::State> finished(std::string error = "");
/// Throws naming `fn` unless `t` is a defined CPU tensor (a CUDA one: the message says that it
/// needs NCCL, and whether this build has it); `reduced`: all_reduce needs float32, float64,
/// int32 or int64 (broadcast and all_gather move any bytes).
void require_collective_tensor(const Tensor& t, const char* fn, bool reduced = false);
/// The dtype check of all_reduce alone (any device).
void require_reduced_dtype(DType d, const char* fn);
/// "<fn>: a CUDA tensor needs NCCL, and this build has none (...)".
std::string no_nccl_message(const char* fn);
/// The Gloo group of `options` (world_size > 1); built only with QAT_HAS_GLOO. `store`, when not
/// null, receives its rendezvous store (valid while the group lives).
ProcessGroupPtr make_gloo_group(const GroupOptions& options, gloo::rendezvous::Store** store = nullptr);
/// The group of one: every collective is the identity.
ProcessGroupPtr make_single_group();
/// `cpu` for CPU tensors, NCCL for CUDA tensors (built only with QAT_HAS_NCCL): the
/// communicator is created at the first CUDA collective, its unique id shared through `store`
/// (null for a group of one).
/// "ProcessGroup: <what> (NCCL) failed on <who>: <ncclGetErrorString(result)> (<last_error>)";
/// built only with QAT_HAS_NCCL.
std::string nccl_error_text(int result, const std::string& what, const std::string& who,
                            const char* last_error);
ProcessGroupPtr make_nccl_group(ProcessGroupPtr cpu, gloo::rendezvous::Store* store,
                                const GroupOptions& options);

}  // namespace detail
}  // namespace qat::distributed
