#pragma once
#include "common/errors.h"
// Shared helpers for the framework/io tests.
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <memory>
#include <string>

#include "framework/autograd/ops.h"
#include "framework/io/archive.h"
#include "framework/io/io.h"
#include "framework/nn/nn.h"

namespace qat::test {

/// A fresh directory under the system temp dir, removed with its contents on destruction.
struct TempDir {
  std::filesystem::path path;
  TempDir() {
    static std::atomic<int> n{0};
    path = std::filesystem::temp_directory_path() /
           ("qat_io_test_" + std::to_string(::getpid()) + "_" + std::to_string(n++));
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  std::string file(const std::string& name) const { return (path / name).string(); }
  /// Every file name in the directory, sorted.
  std::vector<std::string> entries() const {
    std::vector<std::string> out;
    for (const auto& e : std::filesystem::directory_iterator(path))
      out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
  }
};

inline std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

inline void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

/// Same name, dtype, shape and bytes.
inline bool bit_equal(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() &&
         std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0;
}

inline bool bit_equal(const NamedTensors& a, const NamedTensors& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (a[i].first != b[i].first || !bit_equal(a[i].second, b[i].second)) return false;
  return true;
}

/// conv(1->4, 3x3, pad 1) -> BatchNorm2d(4) -> ReLU -> flatten -> Linear(64 -> out), on 4x4 inputs.
struct SmallNet : nn::Module {
  std::shared_ptr<nn::Conv2d> conv;
  std::shared_ptr<nn::BatchNorm2d> bn;
  std::shared_ptr<nn::Linear> fc;

  explicit SmallNet(std::int64_t out = 3, std::int64_t in_features = 64) : Module("SmallNet") {
    conv =
        register_module("conv", std::make_shared<nn::Conv2d>(1, 4, 3, Conv2dParams{.padding = {1, 1}}));
    bn = register_module("bn", std::make_shared<nn::BatchNorm2d>(4));
    fc = register_module("fc", std::make_shared<nn::Linear>(in_features, out));
  }
  Tensor forward(const Tensor& x) override { return (*fc)(flatten(relu((*bn)((*conv)(x))))); }
};

/// Copies of every parameter and buffer, to compare a model before and after.
inline NamedTensors state_copy(const nn::Module& m) {
  NamedTensors out;
  for (const auto& [n, t] : m.named_state()) out.emplace_back(n, t.clone());
  return out;
}

/// Rewrites the header of file image `bytes` through `edit`, with a valid header CRC.
inline std::string with_header(std::string bytes, const std::function<void(io::FileHeader&)>& edit) {
  io::FileHeader h = io::decode_header(bytes, "test");
  edit(h);
  const auto enc = io::encode_header(h);
  bytes.replace(0, enc.size(), enc.data(), enc.size());
  return bytes;
}

/// A file image around an arbitrary payload, with a valid header and CRCs.
inline std::string wrap_payload(const std::string& payload, io::ArchiveKind kind) {
  io::FileHeader h;
  h.archive = kind;
  h.archive_version = io::detail::archive_version();
  h.payload_bytes = payload.size();
  h.payload_crc32 = io::crc32(payload.data(), payload.size());
  const auto enc = io::encode_header(h);
  return std::string(enc.data(), enc.size()) + payload;
}

}  // namespace qat::test
