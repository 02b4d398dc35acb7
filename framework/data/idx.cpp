#include "framework/data/idx.h"

#include <zlib.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>

namespace qat::data {
namespace {

constexpr std::uint32_t kImagesMagic = 0x00000803;           // ubyte, 3 dimensions
constexpr std::uint32_t kLabelsMagic = 0x00000801;           // ubyte, 1 dimension
constexpr std::uint64_t kMaxBytes = std::uint64_t{1} << 31;  // larger is a corrupt header

std::string hex32(std::uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08X", v);
  return buf;
}

/// A gzip (or plain) file opened for reading; every error names `fn` and the path.
class IdxFile {
 public:
  IdxFile(const std::string& path, const char* fn) : path_(path), fn_(fn) {
    errno = 0;
    file_ = gzopen(path.c_str(), "rb");
    QAT_REQUIRE(file_ != nullptr, fn_, path_,
                ": cannot open: ", errno ? std::strerror(errno) : "out of memory");
    gzbuffer(file_, 1 << 18);
  }
  ~IdxFile() { gzclose(file_); }
  IdxFile(const IdxFile&) = delete;
  IdxFile& operator=(const IdxFile&) = delete;

  /// Reads up to `n` bytes, fewer only at the end of the data.
  std::uint64_t read(void* dst, std::uint64_t n) {
    std::uint64_t got = 0;
    while (got < n) {
      const auto chunk = static_cast<unsigned>(std::min<std::uint64_t>(n - got, 1u << 30));
      const int r = gzread(file_, static_cast<char*>(dst) + got, chunk);
      if (r < 0) {
        int code = 0;
        const int saved_errno = errno;
        std::string msg = gzerror(file_, &code);
        if (code == Z_ERRNO) msg = std::strerror(saved_errno);
        if (msg.starts_with(path_ + ": ")) msg.erase(0, path_.size() + 2);  // zlib prefixes the path
        throw Error(detail::concat(fn_, ": ", path_, ": read error: ", msg));
      }
      if (r == 0) break;
      got += static_cast<std::uint64_t>(r);
    }
    return got;
  }

  /// The header's big-endian 32-bit words, the magic number checked first.
  template <int N>
  std::array<std::uint32_t, N> header(std::uint32_t magic, const char* what) {
    unsigned char bytes[4 * N];
    std::uint64_t got = read(bytes, 4);
    auto word = [&](int i) {
      return std::uint32_t{bytes[4 * i]} << 24 | std::uint32_t{bytes[4 * i + 1]} << 16 |
             std::uint32_t{bytes[4 * i + 2]} << 8 | std::uint32_t{bytes[4 * i + 3]};
    };
    if (got == 4)
      QAT_REQUIRE(word(0) == magic, fn_, path_, ": bad magic number ", hex32(word(0)), ", expected ",
                  hex32(magic), " (IDX ubyte ", what, ")");
    if (got == 4) got += read(bytes + 4, sizeof bytes - 4);
    QAT_REQUIRE(got == sizeof bytes, fn_, path_, ": truncated: expected a ", sizeof bytes,
                "-byte header, got ", got, " bytes");
    std::array<std::uint32_t, N> words;
    for (int i = 0; i < N; ++i) words[i] = word(i);
    return words;
  }

  /// Fills `t` with the payload; throws naming `what` if the data ends early.
  void payload(Tensor& t, const char* what) {
    const std::uint64_t want = t.nbytes();
    const std::uint64_t got = read(t.raw_data(), want);
    QAT_REQUIRE(got == want, fn_, path_, ": truncated: expected ", want, " bytes of ", what, ", got ",
                got);
  }

 private:
  gzFile file_ = nullptr;
  std::string path_;
  const char* fn_;
};

}  // namespace

Tensor read_idx_images(const std::string& path) {
  static constexpr const char* fn = "read_idx_images";
  IdxFile file(path, fn);
  const auto [magic, n, rows, cols] = file.header<4>(kImagesMagic, "images");
  QAT_REQUIRE(rows > 0 && cols > 0, fn, path, ": bad image size ", rows, "x", cols);
  const std::uint64_t per_image = std::uint64_t{rows} * cols;  // < 2^64
  QAT_REQUIRE(per_image <= kMaxBytes && n * per_image <= kMaxBytes, fn, path, ": header claims ", n,
              " images of ", rows, "x", cols, " pixels, more than the 2 GiB this reader accepts");
  Tensor images =
      Tensor::empty(Shape{std::int64_t{n}, std::int64_t{rows}, std::int64_t{cols}}, DType::UInt8);
  file.payload(images, "pixels");
  return images;
}

Tensor read_idx_labels(const std::string& path, int num_classes) {
  static constexpr const char* fn = "read_idx_labels";
  QAT_REQUIRE(num_classes >= 1 && num_classes <= 256, fn, "num_classes must be in [1, 256], got ",
              num_classes);
  IdxFile file(path, fn);
  const auto [magic, n] = file.header<2>(kLabelsMagic, "labels");
  QAT_REQUIRE(n <= kMaxBytes, fn, path, ": header claims ", n,
              " labels, more than the 2 GiB this reader accepts");
  Tensor labels = Tensor::empty(Shape{std::int64_t{n}}, DType::UInt8);
  file.payload(labels, "labels");
  const std::uint8_t* y = labels.data<std::uint8_t>();
  for (std::uint32_t i = 0; i < n; ++i)
    QAT_REQUIRE(y[i] < num_classes, fn, path, ": label ", int{y[i]}, " at index ", i,
                " is out of range [0, ", num_classes, ")");
  return labels;
}

Dataset load_idx(const std::string& images_path, const std::string& labels_path, int num_classes) {
  Dataset d{read_idx_images(images_path), read_idx_labels(labels_path, num_classes), num_classes};
  QAT_REQUIRE(d.images.size(0) == d.labels.size(0), "load_idx", images_path, " holds ", d.images.size(0),
              " images but ", labels_path, " holds ", d.labels.size(0), " labels");
  return d;
}

Dataset load_fashion_mnist(const std::string& dir, bool train) {
  const std::string prefix = dir + "/" + (train ? "train" : "t10k");
  return load_idx(prefix + "-images-idx3-ubyte.gz", prefix + "-labels-idx1-ubyte.gz", 10);
}

}  // namespace qat::data
