#pragma once
// Internal (the Gloo backend, gloo_group.cpp): the synchronous lane of GroupOptions::lane.
#include <gloo/algorithm.h>
#include <gloo/allreduce_ring.h>
#include <gloo/context.h>

#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <tuple>
#include <vector>

#include "framework/distributed/process_group.h"

namespace qat::distributed::detail {

// Small blocking all-reduces on the calling thread, over pairs in Gloo's synchronous mode: the
// caller reads its socket itself (sleeping in recv, or spinning on recv(MSG_DONTWAIT)) instead
// of waiting for the device's event-loop thread to be scheduled and hand the bytes over. With a
// core per rank the loop thread shares its core with the busy compute thread, and those
// hand-overs cost 0.5-5 ms a few times an epoch; the forward pass waits for 4 observer
// all-reduces per step.
// Gloo's synchronous pairs take only bound buffers, which its classic algorithms use: one
// AllreduceRing per (dtype, op, count), made the first time (every rank issues the same calls in
// the same order, so every rank makes them in the same order) and reused; the data goes through
// the ring's staging buffer.
class SyncLane {
 public:
  SyncLane(std::shared_ptr<gloo::Context> context, std::int64_t max_bytes)
      : context_(std::move(context)), max_bytes_(max_bytes) {}

  // Whether (n, dtype, op) goes this way: small enough, and identical bits on every rank (min and
  // max are exact; with 2 ranks a sum is a + b on one and b + a on the other, equal in IEEE; with
  // more, the ring's order differs between ranks, so sums stay on the reduce-scatter path).
  bool takes(std::int64_t n, DType dtype, ReduceOp op) const {
    const std::int64_t bytes = n * static_cast<std::int64_t>(element_size(dtype));
    if (bytes > max_bytes_) return false;
    if (dtype != DType::Float32 && dtype != DType::Float64) return false;
    if (op == ReduceOp::Sum && context_->size != 2) return false;
    // a bounded number of rings; further shapes (the same on every rank) take the normal path
    return rings_.size() < kMaxRings || rings_.count({dtype, op, n}) > 0;
  }

  void all_reduce(void* data, std::int64_t n, DType dtype, ReduceOp op) {
    Ring& ring = ring_for(n, dtype, op);
    const std::size_t bytes = static_cast<std::size_t>(n) * element_size(dtype);
    std::memcpy(ring.staging.data(), data, bytes);
    ring.algorithm->run();
    std::memcpy(data, ring.staging.data(), bytes);
  }

 private:
  static constexpr std::size_t kMaxRings = 64;
  struct Ring {
    std::vector<char> staging;  // the ring reduces in place here; never resized (bound pointer)
    std::unique_ptr<gloo::Algorithm> algorithm;
  };

  template <class T>
  static const gloo::ReductionFunction<T>* function(ReduceOp op) {
    return op == ReduceOp::Min   ? gloo::ReductionFunction<T>::min
           : op == ReduceOp::Max ? gloo::ReductionFunction<T>::max
                                 : gloo::ReductionFunction<T>::sum;
  }

  template <class T>
  std::unique_ptr<gloo::Algorithm> make(Ring& ring, std::int64_t n, ReduceOp op) {
    std::vector<T*> ptrs{reinterpret_cast<T*>(ring.staging.data())};
    return std::make_unique<gloo::AllreduceRing<T>>(context_, ptrs, static_cast<int>(n),
                                                    function<T>(op));
  }

  Ring& ring_for(std::int64_t n, DType dtype, ReduceOp op) {
    auto [it, fresh] = rings_.try_emplace({dtype, op, n});
    Ring& ring = it->second;
    if (fresh) {
      ring.staging.resize(static_cast<std::size_t>(n) * element_size(dtype));
      ring.algorithm = dtype == DType::Float64 ? make<double>(ring, n, op) : make<float>(ring, n, op);
    }
    return ring;
  }

  std::shared_ptr<gloo::Context> context_;
  std::int64_t max_bytes_;
  std::map<std::tuple<DType, ReduceOp, std::int64_t>, Ring> rings_;
};

}  // namespace qat::distributed::detail
