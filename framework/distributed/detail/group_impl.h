#pragma once
// Internal: what the ProcessGroup backends share.
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>

#include "framework/distributed/process_group.h"

namespace qat::distributed {

struct Work::State {
  std::mutex m;
  std::condition_variable cv;
  bool done = false;
  std::string error;  // empty: success
};

namespace detail {

/// A Work that is already done (with `error`, if not empty).
std::shared_ptr<Work::State> finished(std::string error = "");
/// Throws naming `fn` unless `t` is a defined CPU tensor; `reduced`: all_reduce needs float32,
/// float64, int32 or int64 (broadcast and all_gather move any bytes).
void require_collective_tensor(const Tensor& t, const char* fn, bool reduced = false);
/// The Gloo group of `options` (world_size > 1); built only with QAT_HAS_GLOO.
ProcessGroupPtr make_gloo_group(const GroupOptions& options);

}  // namespace detail
}  // namespace qat::distributed
