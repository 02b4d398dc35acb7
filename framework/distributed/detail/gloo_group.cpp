// The Gloo backend of ProcessGroup: a full mesh of TCP pairs joined through the rendezvous
// (detail/rendezvous.h), and one communication thread that runs the collectives in issue order.
// A second mesh, in Gloo's synchronous pair mode, carries the small blocking all-reduces the
// forward pass waits on (SyncLane).
#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <thread>
#include <tuple>
#include <vector>

#include "framework/distributed/detail/group_impl.h"
#include "framework/distributed/detail/rendezvous.h"
#include "framework/distributed/detail/sync_lane.h"

namespace qat::distributed::detail {

namespace {

using ReduceFn = void (*)(void*, const void*, const void*, size_t);

template <class T>
ReduceFn reduce_fn(ReduceOp op) {
  switch (op) {
    case ReduceOp::Min:
      return &gloo::min<T>;
    case ReduceOp::Max:
      return &gloo::max<T>;
    default:
      return &gloo::sum<T>;
  }
}

const char* op_name(ReduceOp op) {
  return op == ReduceOp::Min ? "min" : op == ReduceOp::Max ? "max" : "sum";
}

// Runs every collective of the group, in issue order, on one thread.
class GlooGroup final : public ProcessGroup {
 public:
  explicit GlooGroup(const GroupOptions& o) : options_(o) {
    join();
    worker_ = std::thread([this] { run(); });
  }

  ~GlooGroup() override {
    {
      std::lock_guard lock(m_);
      stop_ = true;
    }
    cv_.notify_all();
    worker_.join();
  }

  int rank() const override { return options_.rank; }
  int world_size() const override { return options_.world_size; }
  // the rendezvous, idle after the join: the NCCL backend shares its unique id through it
  gloo::rendezvous::Store* store() const { return client_.get(); }

  std::shared_ptr<Work> all_reduce_async(const Tensor& t, ReduceOp op) override {
    require_collective_tensor(t, "ProcessGroup::all_reduce", true);
    return all_reduce_async(t.raw_data(), t.numel(), t.dtype(), op);
  }

  std::shared_ptr<Work> all_reduce_async(void* data, std::int64_t n, DType dtype, ReduceOp op) override {
    if (n == 0) return std::make_shared<Work>(finished());
    return enqueue(count_all_reduce(n, dtype, op), [=, this] { reduce(data, n, dtype, op); });
  }

  void all_reduce(void* data, std::int64_t n, DType dtype, ReduceOp op) override {
    if (n == 0) return;
    // its own connections, so it need not wait for async work queued on the others
    if (lane_) {
      std::lock_guard lane_lock(lane_m_);
      if (lane_->takes(n, dtype, op)) {
        const std::string what = count_all_reduce(n, dtype, op) + " on the synchronous lane";
        {
          std::lock_guard lock(m_);
          ++stats_.lane_calls;
        }
        const std::string error = execute(what, [&] { lane_->all_reduce(data, n, dtype, op); });
        if (!error.empty()) throw Error(error);
        return;
      }
    }
    run_now(count_all_reduce(n, dtype, op), [=, this] { reduce(data, n, dtype, op); });
  }

  void broadcast(const Tensor& t, int root) override {
    require_collective_tensor(t, "ProcessGroup::broadcast");
    QAT_REQUIRE(root >= 0 && root < world_size(), "ProcessGroup::broadcast", "root must be in [0, ",
                world_size(), "), got ", root);
    {
      std::lock_guard lock(m_);
      stats_.broadcast_bytes += static_cast<std::int64_t>(t.nbytes());
    }
    if (t.numel() == 0) return;
    run_now(qat::detail::concat("broadcast (", t.nbytes(), " bytes from rank ", root, ")"), [&, this] {
      gloo::BroadcastOptions opts(context_);
      opts.setTag(next_tag());
      opts.setTimeout(options_.timeout);
      opts.setRoot(root);
      opts.setOutput(static_cast<char*>(t.raw_data()), t.nbytes());
      gloo::broadcast(opts);
    });
  }

  Tensor all_gather(const Tensor& t) override {
    require_collective_tensor(t, "ProcessGroup::all_gather");
    Shape s{world_size()};
    for (std::int64_t d : t.shape()) s.push_back(d);
    Tensor out = Tensor::empty(s, t.dtype());
    {
      std::lock_guard lock(m_);
      stats_.all_gather_bytes += static_cast<std::int64_t>(out.nbytes());
    }
    if (t.numel() == 0) return out;
    run_now(qat::detail::concat("all_gather (", t.nbytes(), " bytes per rank)"), [&, this] {
      gloo::AllgatherOptions opts(context_);
      opts.setTag(next_tag());
      opts.setTimeout(options_.timeout);
      opts.setInput(static_cast<char*>(t.raw_data()), t.nbytes());
      opts.setOutput(static_cast<char*>(out.raw_data()), out.nbytes());
      gloo::allgather(opts);
    });
    return out;
  }

  void barrier() override {
    {
      std::lock_guard lock(m_);
      ++stats_.barriers;
    }
    run_now("barrier", [this] {
      gloo::BarrierOptions opts(context_);
      opts.setTag(next_tag());
      opts.setTimeout(options_.timeout);
      gloo::barrier(opts);
    });
  }

  GroupStats stats() const override {
    std::lock_guard lock(m_);
    GroupStats s = stats_;
    s.lane = !lane_  ? GroupOptions::Lane::Off
             : spin_ ? GroupOptions::Lane::Spin
                     : GroupOptions::Lane::Block;
    return s;
  }

 private:
  std::string count_all_reduce(std::int64_t n, DType dtype, ReduceOp op) {
    const std::int64_t bytes = n * static_cast<std::int64_t>(element_size(dtype));
    std::lock_guard lock(m_);
    ++stats_.all_reduce_calls;
    stats_.all_reduce_bytes += bytes;
    return qat::detail::concat("all_reduce (", op_name(op), ", ", bytes, " bytes)");
  }

  void reduce(void* data, std::int64_t n, DType dtype, ReduceOp op) {
    switch (dtype) {
      case DType::Float32:
        typed_reduce<float>(static_cast<float*>(data), n, op);
        break;
      case DType::Float64:
        typed_reduce<double>(static_cast<double*>(data), n, op);
        break;
      case DType::Int32:
        typed_reduce<std::int32_t>(static_cast<std::int32_t*>(data), n, op);
        break;
      case DType::Int64:
        typed_reduce<std::int64_t>(static_cast<std::int64_t*>(data), n, op);
        break;
      default:
        QAT_CHECK(false, "all_reduce of ", dtype_name(dtype));
    }
  }

  // Gloo's ring: reduce-scatter then all-gather, so every rank ends with the same bits.
  template <class T>
  void typed_reduce(T* data, std::int64_t n, ReduceOp op) {
    const auto count = static_cast<std::size_t>(n);
    gloo::AllreduceOptions opts(context_);
    opts.setTag(next_tag());
    opts.setTimeout(options_.timeout);
    opts.setOutput(data, count);
    opts.setReduceFunction(reduce_fn<T>(op));
    opts.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
    gloo::allreduce(opts);
  }

  // The rendezvous: rank 0 serves it; every rank checks in with its world size (two processes
  // with one rank, or disagreeing sizes, fail here with a clear message), then Gloo exchanges
  // listening addresses through it and connects every pair.
  void join() {
    constexpr const char* fn = "init_process_group";
    const GroupOptions& o = options_;
    if (o.rank == 0) server_ = std::make_unique<detail::RendezvousServer>(o.master_port);
    const bool local = o.master_addr == "127.0.0.1" || o.master_addr == "localhost";
    client_ = std::make_unique<detail::RendezvousClient>(local ? "127.0.0.1" : o.master_addr,
                                                         o.master_port, o.timeout);
    const std::string size = std::to_string(o.world_size);
    const std::vector<char> size_bytes(size.begin(), size.end());
    // rank 0 announces the size; the others read it before they check in, so that each side of
    // a mismatch can name the other's value
    if (o.rank == 0) client_->set("qat/world_size", size_bytes);
    const std::vector<char> master_size = client_->get("qat/world_size");
    QAT_REQUIRE(client_->set_if_absent("qat/join/" + std::to_string(o.rank), size_bytes), fn, "RANK ",
                o.rank,
                " is already taken by another process of this job (each process needs "
                "its own RANK)");
    QAT_REQUIRE(master_size == size_bytes, fn, "this process has WORLD_SIZE=", o.world_size,
                " but rank 0 started the group with WORLD_SIZE=",
                std::string(master_size.begin(), master_size.end()));
    if (o.rank == 0) {
      for (int r = 1; r < o.world_size; ++r) {
        std::vector<char> theirs;
        try {
          theirs = client_->get("qat/join/" + std::to_string(r));
        } catch (const Error&) {
          throw Error(qat::detail::concat(fn, ": rank ", r, " did not join within ",
                                          o.timeout.count() / 1000.0, " s (WORLD_SIZE=", o.world_size,
                                          "; is every rank started, with this "
                                          "MASTER_ADDR / MASTER_PORT?)"));
        }
        QAT_REQUIRE(theirs == size_bytes, fn, "rank ", r,
                    " was started with WORLD_SIZE=", std::string(theirs.begin(), theirs.end()),
                    ", this one with ", o.world_size);
      }
    }
    gloo::transport::tcp::attr attr;
    if (!o.iface.empty())
      attr.iface = o.iface;
    else if (local)
      attr.hostname = "127.0.0.1";
    else {
      char host[256] = {};
      ::gethostname(host, sizeof host - 1);
      attr.hostname = host;
    }
    try {
      auto device = gloo::transport::tcp::CreateDevice(attr);
      auto context = std::make_shared<gloo::rendezvous::Context>(o.rank, o.world_size);
      context->setTimeout(o.timeout);
      context->connectFullMesh(*client_, device);
      context_ = std::move(context);
      if (o.lane != GroupOptions::Lane::Off && o.lane_bytes > 0) {
        gloo::rendezvous::PrefixStore store("qat/lane", *client_);
        auto lane = std::make_shared<gloo::rendezvous::Context>(o.rank, o.world_size);
        lane->setTimeout(o.timeout);
        lane->connectFullMesh(store, device);
        spin_ = o.lane == GroupOptions::Lane::Spin ||
                (o.lane == GroupOptions::Lane::Auto && cores_of_its_own(store));
        for (int r = 0; r < o.world_size; ++r)
          if (r != o.rank) lane->getPair(r)->setSync(/*enable=*/true, /*busyPoll=*/spin_);
        lane_ = std::make_unique<SyncLane>(std::move(lane), o.lane_bytes);
      }
    } catch (const Error&) {
      throw;
    } catch (const std::exception& e) {
      throw Error(qat::detail::concat(fn, ": rank ", o.rank, " of ", o.world_size,
                                      " could not connect to the other ranks: ", e.what()));
    }
  }

  // Whether every rank on this machine is bound to cores no other rank of the job may use: each
  // rank publishes its host name and affinity mask, and each reads all of them (a job of more
  // than 64 ranks does not spin). Every rank decides for itself, on the same facts.
  bool cores_of_its_own(gloo::rendezvous::Store& store) const {
    const int world = options_.world_size;
    if (world > 64) return false;
    cpu_set_t mine;
    CPU_ZERO(&mine);
    if (::sched_getaffinity(0, sizeof mine, &mine) != 0) return false;
    char host[256] = {};
    ::gethostname(host, sizeof host - 1);
    std::vector<char> entry(host, host + std::strlen(host) + 1);  // "host\0" + the mask
    const auto* bytes = reinterpret_cast<const char*>(&mine);
    entry.insert(entry.end(), bytes, bytes + sizeof mine);
    store.set("cpus/" + std::to_string(options_.rank), entry);
    std::vector<std::vector<char>> all(world);
    for (int r = 0; r < world; ++r) all[r] = store.get("cpus/" + std::to_string(r));
    std::vector<std::string> hosts(world);
    std::vector<cpu_set_t> masks(world);
    for (int r = 0; r < world; ++r) {
      const std::vector<char>& e = all[r];
      const auto nul = std::find(e.begin(), e.end(), '\0');
      if (nul == e.end() || static_cast<std::size_t>(e.end() - nul - 1) != sizeof(cpu_set_t))
        return false;  // not what this build publishes
      hosts[r].assign(e.begin(), nul);
      std::memcpy(&masks[r], &*(nul + 1), sizeof(cpu_set_t));
    }
    for (int a = 0; a < world; ++a)
      for (int b = a + 1; b < world; ++b) {
        if (hosts[a] != hosts[b]) continue;
        cpu_set_t both;
        CPU_AND(&both, &masks[a], &masks[b]);
        if (CPU_COUNT(&both) > 0) return false;
      }
    return true;
  }

  std::uint32_t next_tag() { return tag_++; }  // one collective runs at a time (busy_)

  std::shared_ptr<Work> enqueue(std::string what, std::function<void()> body) {
    auto state = std::make_shared<Work::State>();
    {
      std::lock_guard lock(m_);
      queue_.push_back({std::move(what), std::move(body), state});
    }
    cv_.notify_all();
    return std::make_shared<Work>(state);
  }

  // A blocking collective: on this thread when nothing is queued or running (saves two thread
  // hand-overs per call), else after the queued ones, in order.
  void run_now(std::string what, std::function<void()> body) {
    std::unique_lock lock(m_);
    if (!queue_.empty() || busy_) {
      lock.unlock();
      enqueue(std::move(what), std::move(body))->wait();
      return;
    }
    busy_ = true;
    lock.unlock();
    const std::string error = execute(what, body);
    lock.lock();
    busy_ = false;
    lock.unlock();
    cv_.notify_all();
    if (!error.empty()) throw Error(error);
  }

  // Runs one collective; returns its error message ("" when it succeeded). The worker, the
  // caller's inline path and the synchronous lane may run at once: broken_ has its own lock.
  std::string execute(const std::string& what, const std::function<void()>& body) {
    {
      std::lock_guard lock(broken_m_);
      if (!broken_.empty())
        return qat::detail::concat("ProcessGroup: ", what, " on ", who(),
                                   " refused: the group is broken since an earlier collective "
                                   "failed (",
                                   broken_, ")");
    }
    try {
      body();
      return "";
    } catch (const std::exception& e) {
      {
        std::lock_guard lock(broken_m_);
        if (broken_.empty()) broken_ = e.what();
      }
      return qat::detail::concat("ProcessGroup: ", what, " failed on ", who(), ": ", e.what(),
                                 " -- another rank exited, was killed, or stopped calling the same "
                                 "collectives (timeout ",
                                 options_.timeout.count() / 1000.0, " s)");
    }
  }

  void run() {
    for (;;) {
      Job job;
      {
        std::unique_lock lock(m_);
        cv_.wait(lock, [&] { return (stop_ && queue_.empty()) || (!queue_.empty() && !busy_); });
        if (queue_.empty()) return;
        job = std::move(queue_.front());
        queue_.pop_front();
        busy_ = true;
      }
      std::string error = execute(job.what, job.body);
      {
        std::lock_guard lock(m_);
        busy_ = false;
      }
      cv_.notify_all();
      {
        std::lock_guard lock(job.state->m);
        job.state->done = true;
        job.state->error = std::move(error);
      }
      job.state->cv.notify_all();
    }
  }

  struct Job {
    std::string what;
    std::function<void()> body;
    std::shared_ptr<Work::State> state;
  };

  GroupOptions options_;
  std::unique_ptr<detail::RendezvousServer> server_;
  std::unique_ptr<detail::RendezvousClient> client_;
  std::shared_ptr<gloo::Context> context_;
  std::uint32_t tag_ = 0;
  std::unique_ptr<SyncLane> lane_;  // null with GroupOptions::Lane::Off
  bool spin_ = false;               // the lane polls its sockets
  std::mutex lane_m_;
  std::mutex broken_m_;
  std::string broken_;  // the first error

  mutable std::mutex m_;
  std::condition_variable cv_;
  std::deque<Job> queue_;
  bool busy_ = false;  // a collective is running, on the worker or inline
  bool stop_ = false;
  GroupStats stats_;
  std::thread worker_;
};

}  // namespace

ProcessGroupPtr make_gloo_group(const GroupOptions& options, gloo::rendezvous::Store** store) {
  auto group = std::make_shared<GlooGroup>(options);
  if (store != nullptr) *store = group->store();
  return group;
}

}  // namespace qat::distributed::detail
