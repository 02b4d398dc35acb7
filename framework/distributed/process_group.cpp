#include "framework/distributed/process_group.h"

#include <cstdlib>
#include <cstring>

#include "framework/distributed/detail/group_impl.h"
#include "framework/tensor/cuda.h"

namespace qat::distributed {

// ---- options --------------------------------------------------------------------------------

namespace {

// The integer value of environment variable `name`, or `fallback` when unset.
long env_int(const char* name, long fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  char* end = nullptr;
  errno = 0;
  const long x = std::strtol(v, &end, 10);
  QAT_REQUIRE(end != v && *end == '\0' && errno == 0, "GroupOptions::from_env", name, "='",
              qat::detail::printable(v), "' is not a whole number");
  return x;
}

std::string env_str(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v == nullptr || *v == '\0' ? fallback : std::string(v);
}

}  // namespace

GroupOptions GroupOptions::from_env() {
  GroupOptions o;
  const bool torchrun = std::getenv("RANK") != nullptr || std::getenv("WORLD_SIZE") != nullptr;
  o.rank = static_cast<int>(env_int(torchrun ? "RANK" : "OMPI_COMM_WORLD_RANK", 0));
  o.world_size = static_cast<int>(env_int(torchrun ? "WORLD_SIZE" : "OMPI_COMM_WORLD_SIZE", 1));
  o.master_addr = env_str("MASTER_ADDR", o.master_addr);
  o.master_port = static_cast<int>(env_int("MASTER_PORT", o.master_port));
  const long timeout_s = env_int("QAT_DIST_TIMEOUT", o.timeout.count() / 1000);
  QAT_REQUIRE(timeout_s >= 1 && timeout_s <= 86400, "GroupOptions::from_env",
              "QAT_DIST_TIMEOUT=", timeout_s, " is not in 1..86400 seconds");
  o.timeout = std::chrono::seconds(timeout_s);
  o.iface = env_str("GLOO_SOCKET_IFNAME", "");
  o.local_rank = static_cast<int>(env_int(torchrun ? "LOCAL_RANK" : "OMPI_COMM_WORLD_LOCAL_RANK", -1));
  const std::string lane = env_str("QAT_DIST_LANE", "auto");
  QAT_REQUIRE(lane == "auto" || lane == "off" || lane == "block" || lane == "spin",
              "GroupOptions::from_env", "QAT_DIST_LANE='", lane, "' must be auto, off, block or spin");
  o.lane = lane == "off"     ? Lane::Off
           : lane == "block" ? Lane::Block
           : lane == "spin"  ? Lane::Spin
                             : Lane::Auto;
  o.validate();
  return o;
}

const char* lane_name(GroupOptions::Lane lane) {
  switch (lane) {
    case GroupOptions::Lane::Off:
      return "off";
    case GroupOptions::Lane::Block:
      return "block";
    case GroupOptions::Lane::Spin:
      return "spin";
    default:
      return "auto";
  }
}

void GroupOptions::validate() const {
  constexpr const char* fn = "init_process_group";
  QAT_REQUIRE(world_size >= 1 && world_size <= 65536, fn, "WORLD_SIZE must be in 1..65536, got ",
              world_size);
  QAT_REQUIRE(rank >= 0 && rank < world_size, fn, "RANK must be in [0, ", world_size,
              ") for WORLD_SIZE ", world_size, ", got ", rank);
  QAT_REQUIRE(master_port >= 1 && master_port <= 65535, fn, "MASTER_PORT must be in 1..65535, got ",
              master_port);
  QAT_REQUIRE(!master_addr.empty(), fn, "MASTER_ADDR is empty");
  QAT_REQUIRE(timeout.count() > 0, fn, "timeout must be positive, got ", timeout.count(), " ms");
  QAT_REQUIRE(lane_bytes >= 0, fn, "lane_bytes must be >= 0, got ", lane_bytes);
  QAT_REQUIRE(local_rank >= -1 && local_rank < 65536, fn, "LOCAL_RANK must be in [0, 65536), got ",
              local_rank);
  QAT_REQUIRE(!nccl_alone || world_size == 1, fn, "nccl_alone is for a group of one, WORLD_SIZE is ",
              world_size);
}

int GroupOptions::cuda_device(int device_count) const {
  constexpr const char* fn = "GroupOptions::cuda_device";
  QAT_REQUIRE(device_count >= 1, fn, "rank ", rank, " has no CUDA device to run on (", device_count,
              " devices)");
  if (local_rank < 0) return rank % device_count;
  QAT_REQUIRE(local_rank < device_count, fn, "LOCAL_RANK=", local_rank, " but this machine has ",
              device_count, " CUDA device", device_count == 1 ? "" : "s",
              " (one rank per GPU: NCCL refuses two ranks of a job on one GPU)");
  return local_rank;
}

void ProcessGroup::all_reduce(const Tensor& t, ReduceOp op) {
  if (t.defined() && t.device() == Device::CUDA) {
    detail::require_reduced_dtype(t.dtype(), "ProcessGroup::all_reduce");
    all_reduce_cuda(t.cuda_raw_data(), t.numel(), t.dtype(), op);
    return;
  }
  detail::require_collective_tensor(t, "ProcessGroup::all_reduce", true);
  all_reduce(t.raw_data(), t.numel(), t.dtype(), op);
}

void ProcessGroup::all_reduce_cuda(void*, std::int64_t n, DType dtype, ReduceOp) {
  detail::require_reduced_dtype(dtype, "ProcessGroup::all_reduce");
  if (n == 0 || !syncs()) return;
  throw Error(detail::no_nccl_message("ProcessGroup::all_reduce"));
}

std::string ProcessGroup::who() const {
  return qat::detail::concat("rank ", rank(), " of ", world_size());
}

// ---- work -----------------------------------------------------------------------------------

void Work::wait() const {
  std::unique_lock lock(state_->m);
  if (state_->device_wait && !state_->done) {  // a CUDA collective: its event, once
    state_->error = state_->device_wait();
    state_->done = true;
  }
  state_->cv.wait(lock, [&] { return state_->done; });
  if (!state_->error.empty()) throw Error(state_->error);
}

bool Work::completed() const {
  std::lock_guard lock(state_->m);
  if (state_->device_query && !state_->done) return state_->device_query();
  return state_->done;
}

namespace detail {

std::shared_ptr<Work::State> finished(std::string error) {
  auto s = std::make_shared<Work::State>();
  s->done = true;
  s->error = std::move(error);
  return s;
}

std::string no_nccl_message(const char* fn) {
  return qat::detail::concat(
      fn, ": a CUDA tensor in a collective needs NCCL, and this build has none (",
      cuda::is_built() ? "configured with QAT_NCCL=OFF, without Gloo, or without nccl.h / libnccl in "
                         "the CUDA toolkit folder"
                       : "it has no CUDA backend",
      "): move the tensor to the CPU or rebuild with NCCL");
}

void require_reduced_dtype(DType d, const char* fn) {
  QAT_REQUIRE(d == DType::Float32 || d == DType::Float64 || d == DType::Int32 || d == DType::Int64, fn,
              "dtype ", dtype_name(d), " is not supported (float32, float64, int32, int64)");
}

void require_collective_tensor(const Tensor& t, const char* fn, bool reduced) {
  QAT_REQUIRE(t.defined(), fn, "undefined tensor");
  if (t.device() == Device::CUDA) {
    if (!has_nccl()) throw Error(no_nccl_message(fn));
    throw Error(qat::detail::concat(fn, ": a CUDA tensor reached the CPU (Gloo) backend"));
  }
  if (reduced) require_reduced_dtype(t.dtype(), fn);
}

}  // namespace detail

namespace {

using detail::finished;
using detail::require_collective_tensor;

// A group of one: every collective is the identity (CUDA tensors too: nothing to move).
void require_any_device(const Tensor& t, const char* fn) {
  QAT_REQUIRE(t.defined(), fn, "undefined tensor");
}

class SingleGroup final : public ProcessGroup {
 public:
  int rank() const override { return 0; }
  int world_size() const override { return 1; }
  std::shared_ptr<Work> all_reduce_async(const Tensor& t, ReduceOp) override {
    require_any_device(t, "ProcessGroup::all_reduce");
    detail::require_reduced_dtype(t.dtype(), "ProcessGroup::all_reduce");
    return std::make_shared<Work>(finished());
  }
  std::shared_ptr<Work> all_reduce_async(void*, std::int64_t, DType, ReduceOp) override {
    return std::make_shared<Work>(finished());
  }
  void all_reduce(void*, std::int64_t, DType, ReduceOp) override {}
  void all_reduce_cuda(void*, std::int64_t, DType dtype, ReduceOp) override {
    detail::require_reduced_dtype(dtype, "ProcessGroup::all_reduce");
  }
  void broadcast(const Tensor& t, int root) override {
    require_any_device(t, "ProcessGroup::broadcast");
    QAT_REQUIRE(root == 0, "ProcessGroup::broadcast", "root must be in [0, 1), got ", root);
  }
  Tensor all_gather(const Tensor& t) override {
    require_any_device(t, "ProcessGroup::all_gather");
    Shape s{1};
    for (std::int64_t d : t.shape()) s.push_back(d);
    return t.clone().view_as_shape(s);
  }
  void barrier() override {}
  GroupStats stats() const override { return {}; }
};

}  // namespace

ProcessGroupPtr detail::make_single_group() { return std::make_shared<SingleGroup>(); }

bool has_nccl() {
#ifdef QAT_HAS_NCCL
  return true;
#else
  return false;
#endif
}

bool has_gloo() {
#ifdef QAT_HAS_GLOO
  return true;
#else
  return false;
#endif
}

ProcessGroupPtr init_process_group(const GroupOptions& options) {
  options.validate();
#ifdef QAT_HAS_NCCL
  if (options.world_size == 1)
    return options.nccl_alone ? detail::make_nccl_group(detail::make_single_group(), nullptr, options)
                              : detail::make_single_group();
  gloo::rendezvous::Store* store = nullptr;
  ProcessGroupPtr cpu = detail::make_gloo_group(options, &store);
  return detail::make_nccl_group(std::move(cpu), store, options);
#else
  if (options.nccl_alone) throw Error(detail::no_nccl_message("init_process_group (nccl_alone)"));
  if (options.world_size == 1) return detail::make_single_group();
#ifdef QAT_HAS_GLOO
  return detail::make_gloo_group(options);
#else
  throw Error(qat::detail::concat(
      "init_process_group: this build has no distributed backend (install libgloo-dev and rebuild), "
      "so WORLD_SIZE must be 1, got ",
      options.world_size));
#endif
#endif
}

}  // namespace qat::distributed
