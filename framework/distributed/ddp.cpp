#include "framework/distributed/ddp.h"

#include <chrono>
#include <cstring>
#include <sstream>
#include <utility>

#include "framework/autograd/grad_mode.h"
#include "framework/distributed/replica.h"
#include "framework/kernels/cuda/kernels.h"
#include "framework/kernels/cuda/runtime.h"

namespace qat::distributed {

namespace {

// FNV-1a over the text of every parameter's and buffer's name, dtype and shape.
std::int64_t structure_hash(const nn::Module& m, std::int64_t* tensors, std::int64_t* values) {
  std::ostringstream os;
  *tensors = *values = 0;
  for (const auto& [name, t] : m.named_state()) {
    os << name << ' ' << dtype_name(t.dtype()) << t.shape() << ';';
    ++*tensors;
    *values += t.numel();
  }
  std::uint64_t h = 1469598103934665603ULL;
  for (unsigned char c : os.str()) h = (h ^ c) * 1099511628211ULL;
  return static_cast<std::int64_t>(h >> 1);
}

}  // namespace

DistributedDataParallel::DistributedDataParallel(nn::ModulePtr model, ProcessGroupPtr group,
                                                 Options options)
    : model_(std::move(model)), group_(std::move(group)), options_(options) {
  constexpr const char* fn = "DistributedDataParallel";
  QAT_REQUIRE(model_ != nullptr, fn, "model is null");
  QAT_REQUIRE(group_ != nullptr, fn, "group is null");
  QAT_REQUIRE(options_.bucket_bytes >= 1, fn, "bucket_bytes must be >= 1, got ", options_.bucket_bytes);
  if (options_.check_model) check_same_model();
  broadcast_state();

  // Buckets over every parameter, last registered first, one dtype per bucket. Every one: a
  // quantizer switches requires_grad on its scale when its warm-up ends (LSQ), the same step on
  // every rank.
  params_ = model_->parameters();
  // one device for every parameter: a bucket's flat buffer lives there (CUDA: NCCL)
  for (const Tensor& p : params_)
    QAT_REQUIRE(p.device() == params_.front().device(), fn,
                "parameters on two devices: ", params_.front().device(), " and ", p.device(), " (shape ",
                p.shape(), "); move the whole model with Module::to before wrapping it");
  const Device device = params_.empty() ? Device::CPU : params_.front().device();
  bucket_of_.assign(params_.size(), -1);
  ready_.assign(params_.size(), 0);
  std::int64_t filled = 0;
  for (int i = static_cast<int>(params_.size()) - 1; i >= 0; --i) {
    const Tensor& p = params_[i];
    index_of_[p.impl_ptr().get()] = i;
    const std::int64_t bytes = static_cast<std::int64_t>(p.nbytes());
    stats_.gradient_bytes += bytes;
    if (buckets_.empty() || filled + bytes > options_.bucket_bytes ||
        params_[buckets_.back().params.front()].dtype() != p.dtype()) {
      buckets_.emplace_back();
      filled = 0;
    }
    buckets_.back().params.push_back(i);
    bucket_of_[i] = static_cast<int>(buckets_.size()) - 1;
    filled += bytes;
  }
  for (Bucket& b : buckets_) {
    std::int64_t n = 0;
    for (int i : b.params) n += params_[i].numel();
    b.flat = Tensor::empty(Shape{n}, params_[b.params.front()].dtype(), device);
    b.pending = static_cast<int>(b.params.size());
  }
  stats_.buckets = static_cast<std::int64_t>(buckets_.size());
  if (group_->syncs()) autograd::add_grad_ready_observer(this);  // one replica: nothing to sync
}

DistributedDataParallel::~DistributedDataParallel() { autograd::remove_grad_ready_observer(this); }

// Rank r's (hash, tensors, values) next to every other rank's: a model built differently on one
// rank (another architecture, config or rule) is named here instead of deadlocking later.
void DistributedDataParallel::check_same_model() const {
  Tensor mine = Tensor::empty(Shape{3}, DType::Int64);
  std::int64_t* v = mine.data<std::int64_t>();
  v[0] = structure_hash(*model_, &v[1], &v[2]);
  const Tensor all = group_->all_gather(mine);
  const std::int64_t* a = all.data<std::int64_t>();
  for (int r = 1; r < group_->world_size(); ++r) {
    if (a[3 * r] == a[0] && a[3 * r + 1] == a[1] && a[3 * r + 2] == a[2]) continue;
    throw Error(qat::detail::concat(
        "DistributedDataParallel: the model differs between ranks: rank ", r, " has ", a[3 * r + 1],
        " parameters and buffers with ", a[3 * r + 2], " values (structure hash ", a[3 * r],
        "), rank 0 has ", a[1], " with ", a[2], " (hash ", a[0],
        "); every rank must build the same model (architecture, QAT config and rules) before "
        "wrapping it"));
  }
}

void DistributedDataParallel::broadcast_state() const {
  NoGradGuard no_grad;
  for (const auto& [name, t] : model_->named_state()) group_->broadcast(t, 0);
}

Tensor DistributedDataParallel::forward(const Tensor& x) {
  if (!model_->is_training() || !group_->syncs()) return (*model_)(x);
  forwarded_ = true;
  ReplicaGuard replicas(group_);
  return (*model_)(x);
}

void DistributedDataParallel::leaf_ready(const TensorImpl* leaf) {
  if (!sync_) return;
  const auto it = index_of_.find(leaf);
  if (it == index_of_.end()) return;
  const int i = it->second;
  in_pass_ = true;
  if (ready_[i]) return;
  ready_[i] = 1;
  if (--buckets_[bucket_of_[i]].pending == 0) launch_ready_buckets(/*blocking=*/false);
}

// Launches, in bucket order, every bucket whose gradients are all ready. The last bucket (its
// gradients are the backward pass's last: nothing is left to overlap with), and every bucket at
// backward_end, is summed on this thread: a small one takes the group's synchronous lane
// (GroupOptions::lane) instead of waiting for the communication threads to be scheduled.
void DistributedDataParallel::launch_ready_buckets(bool blocking) {
  while (next_bucket_ < buckets_.size() && buckets_[next_bucket_].pending == 0) {
    const bool last = next_bucket_ + 1 == buckets_.size();
    launch(buckets_[next_bucket_++], blocking || last);
  }
}

// Copies the bucket's gradients (zeros for a parameter that got none) into its flat buffer and
// starts their sum over the ranks.
void DistributedDataParallel::launch(Bucket& b, bool blocking) {
  if (b.flat.device() == Device::CUDA) {
    launch_cuda(b);
    return;
  }
  auto* dst = static_cast<char*>(b.flat.raw_data());
  for (int i : b.params) {
    const Tensor g = params_[i].grad();
    const std::size_t bytes = params_[i].nbytes();
    if (g.defined())
      std::memcpy(dst, g.raw_data(), bytes);
    else
      std::memset(dst, 0, bytes);
    dst += bytes;
  }
  if (blocking) {
    const auto t0 = std::chrono::steady_clock::now();
    group_->all_reduce(b.flat, ReduceOp::Sum);
    stats_.wait_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  } else
    b.work = group_->all_reduce_async(b.flat, ReduceOp::Sum);
}

// CUDA: the gradients copied into the flat buffer on the device and summed through NCCL, all
// queued on the one stream (no host sync; the copies and the sum do not overlap with the rest of
// the backward pass, which runs on the same stream).
void DistributedDataParallel::launch_cuda(Bucket& b) {
  constexpr const char* fn = "DistributedDataParallel";
  auto* dst = static_cast<char*>(b.flat.cuda_raw_data());
  for (int i : b.params) {
    const Tensor g = params_[i].grad();
    const std::size_t bytes = params_[i].nbytes();
    if (g.defined()) {
      QAT_REQUIRE(g.device() == Device::CUDA, fn, "the gradient of a CUDA parameter (shape ",
                  params_[i].shape(), ") is on ", g.device());
      cuda::detail::copy(dst, Device::CUDA, g.cuda_raw_data(), Device::CUDA, bytes, fn);
    } else {
      const std::uint64_t zero = 0;
      cuda::detail::fill(dst, &zero, element_size(params_[i].dtype()), params_[i].numel(), fn);
    }
    dst += bytes;
  }
  group_->all_reduce(b.flat, ReduceOp::Sum);  // NCCL, queued: returns at once
}

// grad = (sum over ranks) / world_size, written back into every parameter's .grad.
void DistributedDataParallel::backward_end() {
  if (!sync_ || !in_pass_) return;
  in_pass_ = false;
  // A training forward that bypassed ddp(...) gathered its statistics on this replica alone: its
  // observers and batch norms would drift from the other replicas' without a word.
  const bool forwarded = std::exchange(forwarded_, false);
  for (Bucket& b : buckets_) b.pending = 0;  // unused parameters: their bucket goes with zeros
  const auto t0 = std::chrono::steady_clock::now();
  launch_ready_buckets(/*blocking=*/true);
  const double inv = 1.0 / group_->world_size();
  for (Bucket& b : buckets_) {
    if (b.work) b.work->wait();  // launched during the backward pass
    b.work.reset();
    stats_.reduced_bytes += static_cast<std::int64_t>(b.flat.nbytes());
    std::int64_t at = 0;
    for (int i : b.params) {
      const Tensor& p = params_[i];
      if (!p.requires_grad()) {  // frozen on every rank: it stays without a gradient
        at += p.numel();
        continue;
      }
      Tensor g = p.grad();
      if (!g.defined()) {
        g = Tensor::empty(p.shape(), p.dtype(), p.device());
        p.impl().grad = g.impl_ptr();
      }
      const std::int64_t n = p.numel();
      if (b.flat.device() == Device::CUDA) {  // on the device, queued after the all-reduce
        using kernels::cuda::UnaryOp;
        if (p.dtype() == DType::Float64)
          kernels::cuda::unary(UnaryOp::MulScalar, b.flat.cuda_data<double>() + at,
                               g.cuda_data<double>(), n, inv);
        else
          kernels::cuda::unary(UnaryOp::MulScalar, b.flat.cuda_data<float>() + at, g.cuda_data<float>(),
                               n, static_cast<float>(inv));
      } else if (p.dtype() == DType::Float64) {
        const double* s = b.flat.data<double>() + at;
        double* d = g.data<double>();
        for (std::int64_t k = 0; k < n; ++k) d[k] = s[k] * inv;
      } else {
        const float* s = b.flat.data<float>() + at;
        float* d = g.data<float>();
        const auto f = static_cast<float>(inv);
        for (std::int64_t k = 0; k < n; ++k) d[k] = s[k] * f;
      }
      at += n;
    }
    b.pending = static_cast<int>(b.params.size());
  }
  stats_.wait_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::fill(ready_.begin(), ready_.end(), 0);
  next_bucket_ = 0;
  ++stats_.syncs;
  QAT_REQUIRE(forwarded || !model_->is_training(), "DistributedDataParallel",
              "backward of a training forward that did not go through ddp(x) (it called the model "
              "directly): observers and batch norm saw this replica's batch only; call ddp(x)");
}

}  // namespace qat::distributed
