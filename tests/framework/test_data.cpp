#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <boost/test/unit_test.hpp>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <string>
#include <vector>

#include "common/errors.h"
#include "framework/data/dataloader.h"
#include "framework/data/idx.h"
#include "framework/tensor/storage.h"

using namespace qat;
using test::error_of;
using namespace qat::data;
namespace fs = std::filesystem;

namespace {

using Bytes = std::vector<std::uint8_t>;

void put_be32(Bytes& b, std::uint32_t v) {
  for (int s = 24; s >= 0; s -= 8) b.push_back(static_cast<std::uint8_t>(v >> s));
}

Bytes idx_images(std::uint32_t n, std::uint32_t rows, std::uint32_t cols, const Bytes& pixels,
                 std::uint32_t magic = 0x00000803) {
  Bytes b;
  for (std::uint32_t v : {magic, n, rows, cols}) put_be32(b, v);
  b.insert(b.end(), pixels.begin(), pixels.end());
  return b;
}

Bytes idx_labels(std::uint32_t n, const Bytes& labels, std::uint32_t magic = 0x00000801) {
  Bytes b;
  for (std::uint32_t v : {magic, n}) put_be32(b, v);
  b.insert(b.end(), labels.begin(), labels.end());
  return b;
}

/// A fresh directory under /tmp, removed with everything in it at the end of the test.
struct TempDir {
  fs::path path;
  TempDir() {
    static int counter = 0;
    path = fs::temp_directory_path() /
           ("qat_test_data_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }

  /// Writes `bytes` to `name`, gzip-compressed with zlib when the name ends in ".gz".
  std::string write(const std::string& name, const Bytes& bytes) const {
    const std::string p = (path / name).string();
    if (name.ends_with(".gz")) {
      gzFile f = gzopen(p.c_str(), "wb");
      BOOST_REQUIRE(f != nullptr);
      if (!bytes.empty())
        BOOST_REQUIRE(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())) > 0);
      BOOST_REQUIRE(gzclose(f) == Z_OK);
    } else {
      std::ofstream(p, std::ios::binary)
          .write(reinterpret_cast<const char*>(bytes.data()),
                 static_cast<std::streamsize>(bytes.size()));
    }
    return p;
  }
};

constexpr std::uint32_t kN = 7, kRows = 5, kCols = 3;

Bytes test_pixels(std::uint32_t n = kN) {
  Bytes px(n * kRows * kCols);
  for (std::size_t i = 0; i < px.size(); ++i) px[i] = static_cast<std::uint8_t>((i * 37 + 11) % 256);
  return px;
}

Bytes test_labels(std::uint32_t n = kN) {
  Bytes y(n);
  for (std::uint32_t i = 0; i < n; ++i) y[i] = static_cast<std::uint8_t>((i * 3) % 10);
  return y;
}

/// N images of 4x3 whose first pixel is the sample index; label = index % 10.
Dataset indexed_dataset(std::int64_t n) {
  Tensor images = Tensor::empty(Shape{n, 4, 3}, DType::UInt8);
  Tensor labels = Tensor::empty(Shape{n}, DType::UInt8);
  std::uint8_t* px = images.data<std::uint8_t>();
  for (std::int64_t i = 0; i < n; ++i) {
    for (int k = 0; k < 12; ++k) px[i * 12 + k] = static_cast<std::uint8_t>((i + 17 * k) % 256);
    labels.data<std::uint8_t>()[i] = static_cast<std::uint8_t>(i % 10);
  }
  return {images, labels, 10};
}

/// Sample indices of the rest of the current epoch, read back from the first pixel.
std::vector<std::int64_t> epoch_order(DataLoader& loader) {
  std::vector<std::int64_t> order;
  for (const Batch& b : loader) {
    const float* px = b.images.data<float>();
    const std::int64_t sample = b.images.numel() / b.images.size(0);
    for (std::int64_t i = 0; i < b.images.size(0); ++i)
      order.push_back(static_cast<std::int64_t>(px[i * sample] * 255.0f + 0.5f));
  }
  return order;
}

struct HasFashionMnist {
  boost::test_tools::assertion_result operator()(boost::unit_test::test_unit_id) const {
    boost::test_tools::assertion_result r =
        fs::exists(std::string(kFashionMnistDir) + "/t10k-images-idx3-ubyte.gz");
    if (!r) r.message() << kFashionMnistDir << " is absent";
    return r;
  }
};

}  // namespace

BOOST_AUTO_TEST_SUITE(idx)

BOOST_AUTO_TEST_CASE(reads_gzip_and_plain_files) {
  TempDir dir;
  const Bytes px = test_pixels(), y = test_labels();
  for (const std::string ext : {".gz", ""}) {
    BOOST_TEST_CONTEXT("extension '" << ext << "'") {
      const Tensor images = read_idx_images(dir.write("images" + ext, idx_images(kN, kRows, kCols, px)));
      BOOST_TEST(images.dtype() == DType::UInt8);
      BOOST_TEST(images.shape() == (Shape{kN, kRows, kCols}));
      BOOST_TEST(images.to_vector<std::uint8_t>() == px, boost::test_tools::per_element());
      const Tensor labels = read_idx_labels(dir.write("labels" + ext, idx_labels(kN, y)), 10);
      BOOST_TEST(labels.shape() == (Shape{kN}));
      BOOST_TEST(labels.to_vector<std::uint8_t>() == y, boost::test_tools::per_element());
    }
  }
  const Dataset d = load_idx(dir.write("i.gz", idx_images(kN, kRows, kCols, px)),
                             dir.write("l", idx_labels(kN, y)), 10);
  BOOST_TEST(d.size() == kN);
  BOOST_TEST(d.num_classes == 10);
  // an empty set is valid
  BOOST_TEST(read_idx_images(dir.write("e.gz", idx_images(0, 28, 28, {}))).shape() ==
             (Shape{0, 28, 28}));
}

BOOST_AUTO_TEST_CASE(malformed_files_name_the_path_and_the_reason) {
  TempDir dir;
  const Bytes px = test_pixels(), y = test_labels();
  const std::string missing = (dir.path / "train-images-idx3-ubyte.gz").string();
  BOOST_TEST(error_of([&] { read_idx_images(missing); }) ==
             "read_idx_images: " + missing + ": cannot open: No such file or directory");

  const std::string labels_as_images = dir.write("l.gz", idx_labels(kN, y));
  BOOST_TEST(error_of([&] { read_idx_images(labels_as_images); }) ==
             "read_idx_images: " + labels_as_images +
                 ": bad magic number 0x00000801, expected 0x00000803 (IDX ubyte images)");
  const std::string images_as_labels = dir.write("i", idx_images(kN, kRows, kCols, px));
  BOOST_TEST(error_of([&] { read_idx_labels(images_as_labels); }) ==
             "read_idx_labels: " + images_as_labels +
                 ": bad magic number 0x00000803, expected 0x00000801 (IDX ubyte labels)");

  const std::string short_header = dir.write("h.gz", Bytes{0, 0, 8, 3, 0, 0, 0, 7, 0, 0});
  BOOST_TEST(error_of([&] { read_idx_images(short_header); }) ==
             "read_idx_images: " + short_header +
                 ": truncated: expected a 16-byte header, got 10 bytes");
  const std::string empty = dir.write("empty", {});
  BOOST_TEST(error_of([&] { read_idx_labels(empty); }) ==
             "read_idx_labels: " + empty + ": truncated: expected a 8-byte header, got 0 bytes");

  for (const std::string ext : {".gz", ""}) {
    const std::string cut =
        dir.write("cut" + ext, idx_images(kN, kRows, kCols, Bytes(px.begin(), px.begin() + 50)));
    BOOST_TEST(error_of([&] { read_idx_images(cut); }) ==
               "read_idx_images: " + cut + ": truncated: expected 105 bytes of pixels, got 50");
    const std::string cut_labels =
        dir.write("cutl" + ext, idx_labels(kN, Bytes(y.begin(), y.begin() + 4)));
    BOOST_TEST(error_of([&] { read_idx_labels(cut_labels); }) ==
               "read_idx_labels: " + cut_labels + ": truncated: expected 7 bytes of labels, got 4");
  }

  // a gzip stream cut in the middle: zlib stops early and reports the shortfall
  Bytes big_px(3000 * kRows * kCols);
  for (std::size_t i = 0; i < big_px.size(); ++i) big_px[i] = static_cast<std::uint8_t>((i * i) >> 3);
  const std::string whole = dir.write("whole.gz", idx_images(3000, kRows, kCols, big_px));
  const auto size = fs::file_size(whole);
  fs::resize_file(whole, size / 2);
  const std::string err = error_of([&] { read_idx_images(whole); });
  BOOST_TEST(
      err.starts_with("read_idx_images: " + whole + ": truncated: expected 45000 bytes of pixels, got "),
      err);

  const std::string corrupt = dir.write("corrupt.gz", idx_images(kN, kRows, kCols, px));
  {
    std::fstream f(corrupt, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(12);
    f.write("\xff\xff\xff\xff\xff\xff", 6);  // garble the deflate stream
  }
  const std::string garbled = error_of([&] { read_idx_images(corrupt); });
  BOOST_TEST(garbled.starts_with("read_idx_images: " + corrupt + ": read error: "), garbled);
  BOOST_TEST(garbled.find(corrupt, 20) == std::string::npos, garbled);  // the path once
  BOOST_TEST(error_of([&] { read_idx_images(dir.path.string()); }) ==
             "read_idx_images: " + dir.path.string() + ": read error: Is a directory");

  Bytes bad_y = y;
  bad_y[3] = 12;
  const std::string out_of_range = dir.write("y.gz", idx_labels(kN, bad_y));
  BOOST_TEST(error_of([&] { read_idx_labels(out_of_range, 10); }) ==
             "read_idx_labels: " + out_of_range + ": label 12 at index 3 is out of range [0, 10)");
  BOOST_TEST(read_idx_labels(out_of_range, 13).to_vector<std::uint8_t>()[3] == 12);

  const std::string zero_cols = dir.write("z", idx_images(kN, kRows, 0, {}));
  BOOST_TEST(error_of([&] { read_idx_images(zero_cols); }) ==
             "read_idx_images: " + zero_cols + ": bad image size 5x0");
  const std::string huge = dir.write("huge", idx_images(0xFFFFFFFFu, 28, 28, px));
  BOOST_TEST(
      error_of([&] { read_idx_images(huge); }) ==
      "read_idx_images: " + huge +
          ": header claims 4294967295 images of 28x28 pixels, more than the 2 GiB this reader accepts");

  const std::string images = dir.write("im.gz", idx_images(kN, kRows, kCols, px));
  const std::string fewer = dir.write("fewer.gz", idx_labels(kN - 1, Bytes(y.begin(), y.end() - 1)));
  BOOST_TEST(error_of([&] { load_idx(images, fewer, 10); }) ==
             "load_idx: " + images + " holds 7 images but " + fewer + " holds 6 labels");

  const std::string d = dir.path.string();
  BOOST_TEST(error_of([&] { load_fashion_mnist(d, false); }) ==
             "read_idx_images: " + d +
                 "/t10k-images-idx3-ubyte.gz: cannot open: No such file or directory");
}

BOOST_AUTO_TEST_CASE(real_fashion_mnist_test_set, *boost::unit_test::precondition(HasFashionMnist())) {
  const Dataset test = load_fashion_mnist(kFashionMnistDir, false);
  BOOST_TEST(test.images.shape() == (Shape{10000, 28, 28}));
  BOOST_TEST(test.size() == 10000);
  std::vector<int> histogram(10, 0);
  for (std::uint8_t y : test.labels.to_vector<std::uint8_t>()) ++histogram[y];
  BOOST_TEST(histogram == std::vector<int>(10, 1000), boost::test_tools::per_element());
  DataLoader loader(test, {.batch_size = 64});
  BOOST_TEST(loader.size() == 157);
  std::int64_t seen = 0;
  for (const Batch& b : loader) seen += b.labels.size(0);
  BOOST_TEST(seen == 10000);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(dataloader)

static_assert(std::input_iterator<DataLoader::Iterator>);
static_assert(std::sentinel_for<std::default_sentinel_t, DataLoader::Iterator>);

BOOST_AUTO_TEST_CASE(batch_shapes_values_and_last_partial_batch) {
  const Dataset d = indexed_dataset(10);
  DataLoader loader(d, {.batch_size = 4, .shuffle = false});
  BOOST_TEST(loader.size() == 3);
  std::vector<std::int64_t> sizes;
  std::int64_t next_index = 0;
  for (const Batch& b : loader) {
    const std::int64_t B = b.images.size(0);
    sizes.push_back(B);
    BOOST_TEST(b.images.dtype() == DType::Float32);
    BOOST_TEST(b.images.shape() == (Shape{B, 1, 4, 3}));
    BOOST_TEST(b.labels.dtype() == DType::Int64);
    BOOST_TEST(b.labels.shape() == (Shape{B}));
    for (std::int64_t i = 0; i < B; ++i, ++next_index) {
      BOOST_TEST(b.labels.data<std::int64_t>()[i] == next_index % 10);
      for (int k = 0; k < 12; ++k) {
        const std::uint8_t px = d.images.data<std::uint8_t>()[next_index * 12 + k];
        BOOST_TEST(b.images.data<float>()[i * 12 + k] == static_cast<float>(px) / 255.0f);
      }
    }
  }
  BOOST_TEST(sizes == (std::vector<std::int64_t>{4, 4, 2}), boost::test_tools::per_element());
  BOOST_TEST(loader.epoch() == 1);

  DataLoader dropping(d, {.batch_size = 4, .drop_last = true});
  BOOST_TEST(dropping.size() == 2);
  BOOST_TEST(epoch_order(dropping).size() == 8u);
  DataLoader flat(d, {.batch_size = 3, .flatten = true});
  Batch b;
  BOOST_TEST(flat.next(b));
  BOOST_TEST(b.images.shape() == (Shape{3, 12}));
  DataLoader whole(d, {.batch_size = 64});
  BOOST_TEST(whole.size() == 1);
  BOOST_TEST(epoch_order(whole).size() == 10u);
  // rank-4 images keep their channels
  Dataset chw{Tensor::zeros(Shape{5, 3, 2, 2}, DType::UInt8), Tensor::zeros(Shape{5}, DType::UInt8), 2};
  DataLoader color(chw, {.batch_size = 2});
  BOOST_TEST(color.next(b));
  BOOST_TEST(b.images.shape() == (Shape{2, 3, 2, 2}));
}

BOOST_AUTO_TEST_CASE(every_sample_once_per_epoch_and_seeded_orders) {
  const Dataset d = indexed_dataset(53);
  DataLoader a(d, {.batch_size = 8, .seed = 7}), same(d, {.batch_size = 8, .seed = 7}),
      other(d, {.batch_size = 8, .seed = 8}), plain(d, {.batch_size = 8, .shuffle = false});
  std::vector<std::vector<std::int64_t>> epochs;
  for (int e = 0; e < 3; ++e) {
    const auto order = epoch_order(a);
    BOOST_TEST(order.size() == 53u);
    BOOST_TEST(std::set<std::int64_t>(order.begin(), order.end()).size() == 53u);
    BOOST_TEST(order == epoch_order(same), boost::test_tools::per_element());
    BOOST_TEST(order != epoch_order(other));
    epochs.push_back(order);
  }
  BOOST_TEST(epochs[0] != epochs[1]);
  BOOST_TEST(epochs[1] != epochs[2]);
  std::vector<std::int64_t> identity(53);
  for (int i = 0; i < 53; ++i) identity[i] = i;
  BOOST_TEST(epochs[0] != identity);
  BOOST_TEST(epoch_order(plain) == identity, boost::test_tools::per_element());
  BOOST_TEST(epoch_order(plain) == identity, boost::test_tools::per_element());
  // jumping to an epoch gives that epoch's order
  DataLoader jump(d, {.batch_size = 8, .seed = 7});
  jump.set_epoch(2);
  BOOST_TEST(epoch_order(jump) == epochs[2], boost::test_tools::per_element());
}

// DistributedSampler semantics: R replicas with batch B see, at step s, exactly what one loader
// with batch R*B sees at step s; shards are disjoint up to the wrap-around padding.
BOOST_AUTO_TEST_CASE(replica_shards_partition_the_global_batches) {
  const Dataset d = indexed_dataset(53);
  for (std::int64_t R : {2, 3, 4}) {
    DataLoader whole(d, {.batch_size = 4 * R, .seed = 9});
    std::vector<DataLoader> shards;
    for (std::int64_t r = 0; r < R; ++r)
      shards.emplace_back(d, DataLoader::Options{.batch_size = 4, .seed = 9, .num_replicas = R, .rank = r});
    const std::int64_t per_replica = (53 + R - 1) / R;
    BOOST_TEST(shards[0].shard_size() == per_replica);
    for (int epoch = 0; epoch < 2; ++epoch) {
      std::vector<std::vector<std::int64_t>> orders;
      for (DataLoader& s : shards) {
        orders.push_back(epoch_order(s));
        BOOST_TEST(static_cast<std::int64_t>(orders.back().size()) == per_replica);
        BOOST_TEST(s.size() == shards[0].size());
      }
      const auto global = epoch_order(whole);
      // position i*R + r of the (padded) global order is replica r's sample i
      for (std::int64_t i = 0; i < per_replica; ++i)
        for (std::int64_t r = 0; r < R; ++r)
          if (i * R + r < 53) BOOST_TEST(orders[r][i] == global[i * R + r]);
      std::set<std::int64_t> seen;
      for (const auto& o : orders) seen.insert(o.begin(), o.end());
      BOOST_TEST(seen.size() == 53u);  // every sample, padding repeats only
    }
  }
  BOOST_CHECK_EXCEPTION(DataLoader(d, {.num_replicas = 2, .rank = 2}), Error, [](const Error& e) {
    return std::string(e.what()) == "DataLoader: rank must be in [0, 2), got 2";
  });
  BOOST_CHECK_THROW(DataLoader(d, {.num_replicas = 0}), Error);
}

BOOST_AUTO_TEST_CASE(state_restore_resumes_the_identical_sequence) {
  const Dataset d = indexed_dataset(30);
  DataLoader a(d, {.batch_size = 4, .seed = 3});
  Batch b;
  for (int i = 0; i < 8 + 3; ++i) BOOST_TEST((a.next(b) || i == 8));  // one epoch (8 batches) and 2 more
  const DataLoader::State saved = a.state();
  BOOST_TEST((saved == DataLoader::State{3, 1, 2}));
  const auto rest_a = epoch_order(a);
  const auto next_a = epoch_order(a);

  DataLoader resumed(d, {.batch_size = 4, .seed = 99});  // the state carries the seed
  resumed.set_state(saved);
  BOOST_TEST(epoch_order(resumed) == rest_a, boost::test_tools::per_element());
  BOOST_TEST(epoch_order(resumed) == next_a, boost::test_tools::per_element());
  BOOST_TEST(rest_a.size() == 30u - 8u);

  // a loop left early resumes where it stopped
  DataLoader c(d, {.batch_size = 4, .seed = 3});
  c.set_epoch(1);
  int taken = 0;
  for (const Batch& batch : c) {
    (void)batch;
    if (++taken == 2) break;
  }
  BOOST_TEST((c.state() == saved));
  BOOST_TEST(epoch_order(c) == rest_a, boost::test_tools::per_element());

  BOOST_TEST(error_of([&] {
               a.set_state({3, -1, 0});
             }) == "DataLoader::set_state: epoch must be >= 0, got -1");
  BOOST_TEST(error_of([&] {
               a.set_state({3, 0, 9});
             }) == "DataLoader::set_state: batch must be in [0, 8], got 9");
}

BOOST_AUTO_TEST_CASE(steady_state_allocates_nothing_new) {
  const Dataset d = indexed_dataset(100);
  DataLoader loader(d, {.batch_size = 16, .seed = 1});
  epoch_order(loader);  // warm the pool, the last partial batch included
  const auto before = CachingAllocator::cpu().stats();
  for (int e = 0; e < 3; ++e) epoch_order(loader);
  BOOST_TEST(CachingAllocator::cpu().stats().fresh_allocations == before.fresh_allocations);
}

BOOST_AUTO_TEST_CASE(bad_arguments_are_named) {
  const Dataset d = indexed_dataset(5);
  BOOST_TEST(error_of([&] { DataLoader(d, {.batch_size = 0}); }) ==
             "DataLoader: batch_size must be >= 1, got 0");
  Dataset floats{Tensor::zeros(Shape{5, 2, 2}), d.labels, 10};
  BOOST_TEST(error_of([&] { DataLoader(floats, {}); }) ==
             "DataLoader: argument 'dataset.images' must be uint8, got float32 of shape [5, 2, 2]");
  Dataset short_labels{d.images, d.labels.rows(0, 4), 10};
  BOOST_TEST(error_of([&] { DataLoader(short_labels, {}); }) ==
             "DataLoader: dataset.labels of shape [4] does not match 5 images");
  Dataset few_classes{d.images, d.labels, 3};
  BOOST_TEST(error_of([&] { DataLoader(few_classes, {}); }) ==
             "DataLoader: label 3 at index 3 is out of range [0, 3)");
  Dataset vector_images{Tensor::zeros(Shape{5}, DType::UInt8), d.labels, 10};
  BOOST_TEST(error_of([&] { DataLoader(vector_images, {}); }) ==
             "DataLoader: dataset.images must be (N, ...) with rank >= 2, got shape [5]");
}

BOOST_AUTO_TEST_SUITE_END()
