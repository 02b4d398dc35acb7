#include "framework/data/dataloader.h"

#include <algorithm>
#include <array>
#include <numeric>

#include "framework/kernels/cpu/elementwise.h"
#include "framework/tensor/random.h"

namespace qat::data {
namespace {

/// A well-mixed seed per (seed, epoch): the splitmix64 finaliser is a bijection, so the
/// epochs of one seed never share a stream and neighbouring epochs are decorrelated.
std::uint64_t epoch_seed(std::uint64_t seed, std::int64_t epoch) {
  std::uint64_t z =
      seed ^ (static_cast<std::uint64_t>(epoch) * 0xD1B54A32D192ED03ULL + 0x8CB92BA72F3D8DD7ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

}  // namespace

DataLoader::DataLoader(const Dataset& dataset, const Options& options)
    : dataset_(dataset), options_(options), seed_(options.seed) {
  static constexpr const char* fn = "DataLoader";
  QAT_REQUIRE(options.batch_size >= 1, fn, "batch_size must be >= 1, got ", options.batch_size);
  QAT_REQUIRE(options.num_replicas >= 1, fn, "num_replicas must be >= 1, got ", options.num_replicas);
  QAT_REQUIRE(options.rank >= 0 && options.rank < options.num_replicas, fn, "rank must be in [0, ",
              options.num_replicas, "), got ", options.rank);
  require_dtype(dataset.images, DType::UInt8, fn, "dataset.images");
  require_dtype(dataset.labels, DType::UInt8, fn, "dataset.labels");
  const Shape& s = dataset.images.shape();
  QAT_REQUIRE(s.rank() >= 2, fn, "dataset.images must be (N, ...) with rank >= 2, got shape ", s);
  QAT_REQUIRE(dataset.labels.dim() == 1 && dataset.labels.size(0) == s[0], fn,
              "dataset.labels of shape ", dataset.labels.shape(), " does not match ", s[0], " images");
  QAT_REQUIRE(dataset.num_classes >= 1, fn, "dataset.num_classes must be >= 1, got ",
              dataset.num_classes);
  const std::uint8_t* y = dataset.labels.data<std::uint8_t>();
  for (std::int64_t i = 0; i < s[0]; ++i)
    QAT_REQUIRE(y[i] < dataset.num_classes, fn, "label ", int{y[i]}, " at index ", i,
                " is out of range [0, ", dataset.num_classes, ")");

  // (N, rows, cols) gains a channel; (N, C, H, W) and (N, features) keep their shape.
  for (int d = 1; d < s.rank(); ++d) sample_shape_.push_back(s[d]);
  if (options.flatten)
    sample_shape_ = Shape{sample_shape_.numel()};
  else if (s.rank() == 3)
    sample_shape_ = Shape{1, s[1], s[2]};
}

std::int64_t DataLoader::shard_size() const {
  const std::int64_t r = options_.num_replicas;
  return (dataset_.size() + r - 1) / r;
}

std::int64_t DataLoader::size() const {
  const std::int64_t n = shard_size(), b = options_.batch_size;
  return options_.drop_last ? n / b : (n + b - 1) / b;
}

void DataLoader::set_epoch(std::int64_t epoch) { set_state({seed_, epoch, 0}); }

void DataLoader::set_state(const State& st) {
  QAT_REQUIRE(st.epoch >= 0, "DataLoader::set_state", "epoch must be >= 0, got ", st.epoch);
  QAT_REQUIRE(st.batch >= 0 && st.batch <= size(), "DataLoader::set_state", "batch must be in [0, ",
              size(), "], got ", st.batch);
  seed_ = st.seed;
  epoch_ = st.epoch;
  cursor_ = st.batch;
}

void DataLoader::prepare_order() {
  const std::int64_t n = dataset_.size();
  if (order_epoch_ == epoch_ && order_seed_ == seed_ && !order_.empty()) return;
  order_.resize(n);
  std::iota(order_.begin(), order_.end(), 0);
  if (options_.shuffle) {
    Generator gen(epoch_seed(seed_, epoch_));
    for (std::int64_t i = n - 1; i > 0; --i)  // Fisher-Yates
      std::swap(order_[i], order_[gen.below(static_cast<std::uint64_t>(i + 1))]);
  }
  if (options_.num_replicas > 1) {  // this replica's positions of the padded order
    std::vector<std::int64_t> shard(shard_size());
    for (std::size_t i = 0; i < shard.size(); ++i)
      shard[i] = order_[(static_cast<std::int64_t>(i) * options_.num_replicas + options_.rank) % n];
    order_ = std::move(shard);
  }
  order_epoch_ = epoch_;
  order_seed_ = seed_;
}

bool DataLoader::next(Batch& batch) {
  if (cursor_ >= size()) {
    ++epoch_;
    cursor_ = 0;
    return false;
  }
  prepare_order();
  const std::int64_t begin = cursor_ * options_.batch_size;
  const std::int64_t B = std::min(options_.batch_size, shard_size() - begin);
  ++cursor_;

  // Drop the previous batch first so that the pool hands its buffers straight back.
  batch = Batch{};
  Shape image_shape{B};
  for (std::int64_t d : sample_shape_) image_shape.push_back(d);
  batch.images = Tensor::empty(image_shape, DType::Float32);  // (B, ...)
  batch.labels = Tensor::empty(Shape{B}, DType::Int64);       // (B)

  const std::int64_t sample = sample_shape_.numel();
  const std::uint8_t* src = dataset_.images.data<std::uint8_t>();
  const std::uint8_t* y = dataset_.labels.data<std::uint8_t>();
  float* dst = batch.images.data<float>();
  std::int64_t* labels = batch.labels.data<std::int64_t>();
  for (std::int64_t b = 0; b < B; ++b) {
    const std::int64_t i = order_[begin + b];
    const std::uint8_t* px = src + i * sample;
    float* out = dst + b * sample;
    kernels::unit_from_bytes(px, out, sample);
    labels[b] = y[i];
  }
  return true;
}

}  // namespace qat::data
