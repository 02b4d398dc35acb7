#include "framework/io/checkpoint.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <istream>
#include <ostream>
#include <set>

#include "framework/io/archive.h"
#include "framework/io/atomic_file.h"
#include "framework/io/crc32.h"

namespace qat::io {
namespace {

void require_writable(const NamedTensors& list, const char* fn, const char* what) {
  std::set<std::string_view> seen;
  for (const auto& [name, t] : list) {
    QAT_REQUIRE(t.defined(), fn, what, " '", name, "' is an undefined tensor");
    QAT_REQUIRE(t.device() == Device::CPU, fn, what, " '", name, "' is on ", device_name(t.device()),
                "; checkpoints take CPU tensors");
    QAT_REQUIRE(seen.insert(name).second, fn, what, " name '", name, "' appears twice");
  }
}

std::string encode(const Checkpoint& ckpt, const SaveOptions& options, const char* fn) {
  QAT_REQUIRE(options.archive == ArchiveKind::Binary || options.archive == ArchiveKind::Xml, fn,
              "unknown archive kind ", static_cast<int>(options.archive));
  require_writable(ckpt.tensors, fn, "tensor");
  if (ckpt.optimizer) require_writable(ckpt.optimizer->state, fn, "optimizer state entry");

  const std::string payload = detail::encode_payload(ckpt, options.archive);
  FileHeader h;
  h.archive = options.archive;
  h.archive_version = detail::archive_version();
  h.payload_bytes = payload.size();
  h.payload_crc32 = crc32(payload.data(), payload.size());
  const auto header = encode_header(h);
  std::string out;
  out.reserve(header.size() + payload.size());
  out.append(header.data(), header.size());
  out += payload;
  return out;
}

// The checks after the header: length, CRC, then the archive itself.
Checkpoint decode(const FileHeader& h, std::string_view payload, const std::string& source) {
  check_payload(h, payload, source);
  Checkpoint ckpt = detail::decode_payload(payload, h.archive, h.archive_version, source);
  ckpt.info = {source, h.format_version, h.written_by, h.archive, h.payload_bytes};
  return ckpt;
}

// Reads up to `n` bytes, growing the buffer as data arrives (never by what a header claims).
std::string read_up_to(std::istream& is, std::uint64_t n) {
  constexpr std::uint64_t kChunk = 1 << 20;
  std::string out;
  while (out.size() < n && is) {
    const std::size_t old = out.size();
    const std::size_t want = static_cast<std::size_t>(std::min<std::uint64_t>(kChunk, n - old));
    out.resize(old + want);
    is.read(out.data() + old, static_cast<std::streamsize>(want));
    out.resize(old + static_cast<std::size_t>(is.gcount()));
  }
  return out;
}

}  // namespace

std::string to_bytes(const Checkpoint& ckpt, const SaveOptions& options) {
  return encode(ckpt, options, "io::to_bytes");
}

std::string to_xml(const Checkpoint& ckpt) {
  require_writable(ckpt.tensors, "io::to_xml", "tensor");
  if (ckpt.optimizer) require_writable(ckpt.optimizer->state, "io::to_xml", "optimizer state entry");
  return detail::encode_payload(ckpt, ArchiveKind::Xml);
}

void write(const Checkpoint& ckpt, std::ostream& os, const SaveOptions& options) {
  const std::string bytes = encode(ckpt, options, "io::write");
  os.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!os) throw CheckpointError("<stream>", "cannot write: the output stream failed");
}

void save(const Checkpoint& ckpt, const std::string& path, const SaveOptions& options) {
  write_file_atomic(path, encode(ckpt, options, "io::save"));
}

Checkpoint from_bytes(std::string_view bytes, const std::string& source) {
  const FileHeader h = decode_header(bytes, source);
  return decode(h, bytes.substr(FileHeader::kSize), source);
}

Checkpoint read(std::istream& is, const std::string& source) {
  const std::string header = read_up_to(is, FileHeader::kSize);
  const FileHeader h = decode_header(header, source);
  return decode(h, read_up_to(is, h.payload_bytes), source);
}

Checkpoint load(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const auto status = fs::status(path, ec);
  if (ec) throw CheckpointError(path, "cannot open for reading: " + ec.message());
  if (!fs::is_regular_file(status))
    throw CheckpointError(path, "cannot open for reading: not a regular file");
  const std::uint64_t size = fs::file_size(path, ec);
  if (ec) throw CheckpointError(path, "cannot open for reading: " + ec.message());
  std::ifstream f(path, std::ios::binary);
  if (!f) throw CheckpointError(path, std::string("cannot open for reading: ") + std::strerror(errno));

  const std::string header = read_up_to(f, FileHeader::kSize);
  const FileHeader h = decode_header(header, path);
  // Compare with the file size before reading (or allocating) the payload.
  check_payload_size(h, size - FileHeader::kSize, path);
  const std::string payload = read_up_to(f, h.payload_bytes);
  if (payload.size() != h.payload_bytes)
    throw CheckpointError(path, "read failed (the file changed while it was read?)");
  return decode(h, payload, path);
}

}  // namespace qat::io
