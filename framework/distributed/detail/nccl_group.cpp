// NCCL for CUDA tensors (PyTorch's "cpu:gloo,cuda:nccl"): the group made by init_process_group
// keeps its CPU group (Gloo, or the group of one) for CPU tensors and sends CUDA tensors to an
// NCCL communicator, created at the first CUDA collective (every rank issues the same
// collectives in the same order, so every rank creates it at the same call): rank 0 makes the
// unique id and sets it in the rendezvous store, the others get it there.
//
// Every NCCL call is queued on the library's one CUDA stream (kernels/cuda/check.h stream()), so
// the kernels before a collective produce its input and those after it read its output, without
// a host sync: all_reduce_cuda and a CUDA all_reduce_async return at once (their Work::wait blocks
// the host on an event recorded after the collective); broadcast, all_gather and barrier wait.
//
// Failures: an NCCL error names the collective, the rank and ncclGetErrorString (+ ncclGetLastError).
// A watchdog thread follows the queued collectives by their events; when NCCL reports an
// asynchronous error (ncclCommGetAsyncError: a peer's connection closed, over sockets or IB) or
// the oldest one is older than GroupOptions::timeout (a peer that died or hangs where NCCL cannot
// tell, e.g. over NVLink / shared memory), it aborts the communicator (ncclCommAbort: the queued
// NCCL kernels return, so a host waiting on the stream wakes), and every later collective throws.
// Not covered: CUDA work of this process that hangs by itself, and a rank that never reaches its
// first CUDA collective is named only by the timeout of the unique id's get (the rendezvous).
#include <nccl.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>

#include "framework/distributed/detail/group_impl.h"
#include "framework/distributed/detail/rendezvous.h"
#include "framework/kernels/cuda/check.h"
#include "framework/kernels/cuda/runtime.h"

namespace qat::distributed::detail {

std::string nccl_error_text(int result, const std::string& what, const std::string& who,
                            const char* last_error) {
  const auto r = static_cast<ncclResult_t>(result);
  std::string s = qat::detail::concat("ProcessGroup: ", what, " (NCCL) failed on ", who, ": ",
                                      ncclGetErrorString(r));
  if (last_error != nullptr && *last_error != '\0') s += qat::detail::concat(" (", last_error, ")");
  return s;
}

namespace {

using Clock = std::chrono::steady_clock;

ncclDataType_t nccl_type(DType d) {
  switch (d) {
    case DType::Float32:
      return ncclFloat32;
    case DType::Float64:
      return ncclFloat64;
    case DType::Int32:
      return ncclInt32;
    default:
      return ncclInt64;
  }
}

ncclRedOp_t nccl_op(ReduceOp op) {
  return op == ReduceOp::Min ? ncclMin : op == ReduceOp::Max ? ncclMax : ncclSum;
}

const char* op_name(ReduceOp op) {
  return op == ReduceOp::Min ? "min" : op == ReduceOp::Max ? "max" : "sum";
}

// One queued collective: its event, when it was queued, and its error once known.
struct Pending {
  cudaEvent_t event = nullptr;
  Clock::time_point queued;
  std::string what;
  std::mutex m;
  bool done = false;
  std::string error;
  ~Pending() {
    if (event != nullptr) cudaEventDestroy(event);
  }
};

// The NCCL communicator of one group and its watchdog.
class Communicator {
 public:
  Communicator(const GroupOptions& o, gloo::rendezvous::Store* store, std::string who)
      : options_(o), who_(std::move(who)) {
    constexpr const char* fn = "ProcessGroup (NCCL setup)";
    cuda::detail::require_device(fn);
    QAT_CUDA_CHECK(cudaGetDevice(&device_), fn);
    stream_ = cuda::detail::stream(fn);
    auto make_id = [&] {
      ncclUniqueId id;
      check(ncclGetUniqueId(&id), "ncclGetUniqueId");
      return std::vector<char>(id.internal, id.internal + sizeof id.internal);
    };
    const std::vector<char> bytes =
        store == nullptr ? make_id() : share_from_rank0(*store, o.rank, "qat/nccl/unique_id", make_id);
    QAT_CHECK(bytes.size() == sizeof(ncclUniqueId), "NCCL unique id of ", bytes.size(), " bytes");
    ncclUniqueId id;
    std::copy(bytes.begin(), bytes.end(), id.internal);
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;  // bounded by the timeout below instead of hanging on a missing rank
    const ncclResult_t r = ncclCommInitRankConfig(&comm_, o.world_size, id, o.rank, &config);
    if (r != ncclSuccess && r != ncclInProgress) check(r, "ncclCommInitRankConfig");
    settle("NCCL communicator setup");
    watchdog_ = std::thread([this] { watch(); });
  }

  ~Communicator() {
    // queued collectives first: done, or aborted by the watchdog (error or timeout)
    for (;;) {
      {
        std::lock_guard lock(m_);
        if (pending_.empty() || !broken_.empty()) {
          stop_ = true;
          break;
        }
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    cv_.notify_all();
    watchdog_.join();
    if (comm_ == nullptr) return;
    if (broken_.empty() && cudaStreamSynchronize(stream_) == cudaSuccess) {
      ncclCommFinalize(comm_);
      ncclResult_t state = ncclInProgress;
      const auto deadline = Clock::now() + options_.timeout;
      while (ncclCommGetAsyncError(comm_, &state) == ncclSuccess && state == ncclInProgress &&
             Clock::now() < deadline)
        std::this_thread::sleep_for(std::chrono::microseconds(100));
      if (state == ncclSuccess) {
        ncclCommDestroy(comm_);
        return;
      }
    }
    ncclCommAbort(comm_);
  }

  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  // Queues `call(comm, stream)` and an event after it; the event's Pending is returned.
  template <class Call>
  std::shared_ptr<Pending> enqueue(const std::string& what, Call call) {
    std::unique_lock lock(m_);
    QAT_REQUIRE(broken_.empty(), "ProcessGroup", what, " on ", who_,
                " refused: the NCCL communicator was aborted after an earlier failure (", broken_, ")");
    auto p = std::make_shared<Pending>();
    p->what = what;
    p->queued = Clock::now();
    QAT_CUDA_CHECK(cudaEventCreateWithFlags(&p->event, cudaEventDisableTiming), "ProcessGroup");
    const ncclResult_t r = call(comm_, stream_);
    if (r != ncclSuccess && r != ncclInProgress) fail_locked(nccl_error_text(r, what, who_, last()));
    if (r == ncclInProgress) {
      lock.unlock();
      settle(what);
      lock.lock();
    }
    QAT_CUDA_CHECK(cudaEventRecord(p->event, stream_), "ProcessGroup");
    pending_.push_back(p);
    lock.unlock();
    cv_.notify_all();
    return p;
  }

  // Blocks until `p` is done; its error or "".
  static std::string wait(const std::shared_ptr<Pending>& p) {
    for (int spins = 0;; ++spins) {
      {
        std::lock_guard lock(p->m);
        if (p->done || !p->error.empty()) return p->error;
      }
      const cudaError_t e = cudaEventQuery(p->event);
      if (e == cudaSuccess) {
        std::lock_guard lock(p->m);
        p->done = true;
        return p->error;
      }
      if (e != cudaErrorNotReady) {
        cudaGetLastError();
        return qat::detail::concat("ProcessGroup: ", p->what, " (NCCL): ", cudaGetErrorString(e));
      }
      if (spins < 64)
        std::this_thread::yield();
      else
        std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }

  static bool query(const std::shared_ptr<Pending>& p) {
    std::lock_guard lock(p->m);
    return p->done || !p->error.empty() || cudaEventQuery(p->event) == cudaSuccess;
  }

 private:
  const char* last() const { return comm_ != nullptr ? ncclGetLastError(comm_) : nullptr; }

  void check(ncclResult_t r, const std::string& what) {
    if (r != ncclSuccess) throw Error(nccl_error_text(r, what, who_, last()));
  }

  // Polls until the communicator's last call is no longer in progress (nonblocking mode), up to
  // the timeout; aborts and throws on an error or the timeout.
  void settle(const std::string& what) {
    const auto deadline = Clock::now() + options_.timeout;
    for (;;) {
      ncclResult_t state = ncclSuccess;
      const ncclResult_t r = ncclCommGetAsyncError(comm_, &state);
      if (r != ncclSuccess) state = r;
      if (state == ncclSuccess) return;
      std::lock_guard lock(m_);
      if (state != ncclInProgress) fail_locked(nccl_error_text(state, what, who_, last()));
      if (Clock::now() > deadline)
        fail_locked(qat::detail::concat("ProcessGroup: ", what, " (NCCL) on ", who_, " not done after ",
                                        options_.timeout.count() / 1000.0,
                                        " s: another rank did not reach the same collective"));
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  }

  // Marks the communicator broken, aborts it (queued NCCL kernels return) and throws `message`.
  [[noreturn]] void fail_locked(const std::string& message) {
    abort_locked(message);
    throw Error(message);
  }

  void abort_locked(const std::string& message) {
    if (!broken_.empty()) return;
    broken_ = message;
    if (comm_ != nullptr) ncclCommAbort(comm_);
    comm_ = nullptr;
    for (const auto& p : pending_) {
      std::lock_guard plock(p->m);
      if (!p->done) p->error = message;
    }
    pending_.clear();
  }

  // The watchdog: retires completed collectives in order; aborts on an asynchronous NCCL error or
  // when the oldest one has waited longer than the timeout.
  void watch() {
    cudaSetDevice(device_);  // cudaEventQuery on this thread
    std::unique_lock lock(m_);
    while (!stop_) {
      if (pending_.empty() || !broken_.empty()) {
        cv_.wait(lock, [&] { return stop_ || (!pending_.empty() && broken_.empty()); });
        continue;
      }
      while (!pending_.empty() && cudaEventQuery(pending_.front()->event) == cudaSuccess) {
        {
          std::lock_guard plock(pending_.front()->m);
          pending_.front()->done = true;
        }
        pending_.pop_front();
      }
      cudaGetLastError();
      ncclResult_t state = ncclSuccess;
      if (ncclCommGetAsyncError(comm_, &state) == ncclSuccess && state != ncclSuccess &&
          state != ncclInProgress) {
        abort_locked(nccl_error_text(state, pending_.empty() ? "a collective" : pending_.front()->what,
                                     who_, last()) +
                     " -- another rank exited, was killed, or stopped calling the same collectives");
        continue;
      }
      if (!pending_.empty() && Clock::now() - pending_.front()->queued > options_.timeout) {
        abort_locked(qat::detail::concat("ProcessGroup: ", pending_.front()->what, " (NCCL) on ", who_,
                                         " not done after ", options_.timeout.count() / 1000.0,
                                         " s: another rank died, hangs, or stopped calling the same "
                                         "collectives; the NCCL communicator was aborted"));
        continue;
      }
      cv_.wait_for(lock, std::chrono::milliseconds(1));
    }
  }

  GroupOptions options_;
  std::string who_;
  int device_ = 0;
  cudaStream_t stream_ = nullptr;
  ncclComm_t comm_ = nullptr;
  std::mutex m_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Pending>> pending_;
  std::string broken_;
  bool stop_ = false;
  std::thread watchdog_;
};

// CPU tensors to `cpu`, CUDA tensors to the communicator.
class NcclGroup final : public ProcessGroup {
 public:
  NcclGroup(ProcessGroupPtr cpu, gloo::rendezvous::Store* store, const GroupOptions& o)
      : cpu_(std::move(cpu)), store_(store), options_(o) {}

  int rank() const override { return options_.rank; }
  int world_size() const override { return options_.world_size; }
  bool syncs() const override { return options_.world_size > 1 || options_.nccl_alone; }

  std::shared_ptr<Work> all_reduce_async(const Tensor& t, ReduceOp op) override {
    if (!t.defined() || t.device() == Device::CPU) return cpu_->all_reduce_async(t, op);
    require_reduced_dtype(t.dtype(), "ProcessGroup::all_reduce");
    if (t.numel() == 0) return std::make_shared<Work>(finished());
    return work(reduce(t.cuda_raw_data(), t.numel(), t.dtype(), op));
  }
  std::shared_ptr<Work> all_reduce_async(void* data, std::int64_t n, DType dtype, ReduceOp op) override {
    return cpu_->all_reduce_async(data, n, dtype, op);
  }
  void all_reduce(void* data, std::int64_t n, DType dtype, ReduceOp op) override {
    cpu_->all_reduce(data, n, dtype, op);
  }
  void all_reduce_cuda(void* data, std::int64_t n, DType dtype, ReduceOp op) override {
    require_reduced_dtype(dtype, "ProcessGroup::all_reduce");
    if (n > 0) reduce(data, n, dtype, op);
  }

  void broadcast(const Tensor& t, int root) override {
    if (!t.defined() || t.device() == Device::CPU) return cpu_->broadcast(t, root);
    QAT_REQUIRE(root >= 0 && root < world_size(), "ProcessGroup::broadcast", "root must be in [0, ",
                world_size(), "), got ", root);
    if (t.numel() == 0) return;
    void* p = t.cuda_raw_data();
    const std::size_t bytes = t.nbytes();
    finish(comm().enqueue(qat::detail::concat("broadcast (", bytes, " bytes from rank ", root, ")"),
                          [&](ncclComm_t c, cudaStream_t s) {
                            return ncclBroadcast(p, p, bytes, ncclUint8, root, c, s);
                          }));
  }

  Tensor all_gather(const Tensor& t) override {
    if (!t.defined() || t.device() == Device::CPU) return cpu_->all_gather(t);
    Shape s{world_size()};
    for (std::int64_t d : t.shape()) s.push_back(d);
    Tensor out = Tensor::empty(s, t.dtype(), Device::CUDA);
    if (t.numel() == 0) return out;
    const void* in = t.cuda_raw_data();
    void* o = out.cuda_raw_data();
    const std::size_t bytes = t.nbytes();
    finish(comm().enqueue(
        qat::detail::concat("all_gather (", bytes, " bytes per rank)"),
        [&](ncclComm_t c, cudaStream_t st) { return ncclAllGather(in, o, bytes, ncclUint8, c, st); }));
    return out;
  }

  // The CPU group's barrier; with a communicator, also a 1-element NCCL all-reduce that the host
  // waits for: every rank's CUDA work queued before it is done.
  void barrier() override {
    cpu_->barrier();
    if (!has_comm()) return;
    const Tensor one = Tensor::zeros(Shape{1}, DType::Int32, Device::CUDA);
    finish(reduce(one.cuda_raw_data(), 1, DType::Int32, ReduceOp::Sum, "barrier"));
  }

  GroupStats stats() const override {
    GroupStats s = cpu_->stats();
    std::lock_guard lock(m_);
    s.nccl_calls = nccl_calls_;
    return s;
  }

 private:
  bool has_comm() const {
    std::lock_guard lock(m_);
    return comm_ != nullptr;
  }

  // The communicator, made at the first CUDA collective; a failed setup is not retried (the
  // other ranks may have moved on: rank 0's unique id is set once).
  Communicator& comm() {
    std::lock_guard lock(m_);
    ++nccl_calls_;
    if (comm_) return *comm_;
    QAT_REQUIRE(setup_error_.empty(), "ProcessGroup", "the NCCL communicator of ", who(),
                " could not be set up earlier: ", setup_error_);
    try {
      comm_ = std::make_unique<Communicator>(options_, store_, who());
    } catch (const Error& e) {
      setup_error_ = e.what();
      throw;
    }
    return *comm_;
  }

  std::shared_ptr<Pending> reduce(void* data, std::int64_t n, DType dtype, ReduceOp op,
                                  const char* name = nullptr) {
    const std::string what =
        name != nullptr
            ? std::string(name)
            : qat::detail::concat("all_reduce (", op_name(op), ", ",
                                  n * static_cast<std::int64_t>(element_size(dtype)), " bytes)");
    return comm().enqueue(what, [&](ncclComm_t c, cudaStream_t s) {
      return ncclAllReduce(data, data, static_cast<std::size_t>(n), nccl_type(dtype), nccl_op(op), c, s);
    });
  }

  static std::shared_ptr<Work> work(std::shared_ptr<Pending> p) {
    auto state = std::make_shared<Work::State>();
    state->device_wait = [p] { return Communicator::wait(p); };
    state->device_query = [p] { return Communicator::query(p); };
    return std::make_shared<Work>(std::move(state));
  }

  static void finish(const std::shared_ptr<Pending>& p) {
    const std::string error = Communicator::wait(p);
    if (!error.empty()) throw Error(error);
  }

  ProcessGroupPtr cpu_;
  gloo::rendezvous::Store* store_;  // owned by cpu_ (null for a group of one)
  GroupOptions options_;
  mutable std::mutex m_;
  std::unique_ptr<Communicator> comm_;
  std::string setup_error_;
  std::int64_t nccl_calls_ = 0;
};

}  // namespace

ProcessGroupPtr make_nccl_group(ProcessGroupPtr cpu, gloo::rendezvous::Store* store,
                                const GroupOptions& options) {
  return std::make_shared<NcclGroup>(std::move(cpu), store, options);
}

}  // namespace qat::distributed::detail
