#include "framework/io/format.h"

#include <cstdio>
#include <cstring>

#include "framework/io/checkpoint_error.h"
#include "framework/io/crc32.h"
#include "framework/tensor/error.h"

namespace qat::io {
namespace {

// Explicit little-endian encoding, whatever the host.
template <class T>
void put_le(char* p, T v) {
  for (std::size_t i = 0; i < sizeof(T); ++i) p[i] = static_cast<char>((v >> (8 * i)) & 0xFFu);
}

template <class T>
T get_le(const char* p) {
  T v = 0;
  for (std::size_t i = 0; i < sizeof(T); ++i) v |= T(static_cast<unsigned char>(p[i])) << (8 * i);
  return v;
}

std::string hex32(std::uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", v);
  return buf;
}

std::string hex_bytes(const char* p, std::size_t n) {
  std::string out;
  for (std::size_t i = 0; i < n; ++i) {
    char buf[4];
    std::snprintf(buf, sizeof buf, "%s%02x", i ? " " : "", static_cast<unsigned char>(p[i]));
    out += buf;
  }
  return out;
}

}  // namespace

std::string_view archive_kind_name(ArchiveKind kind) {
  switch (kind) {
    case ArchiveKind::Binary:
      return "binary";
    case ArchiveKind::Xml:
      return "xml";
  }
  return "?";
}

std::string Version::str() const { return detail::concat(major, ".", minor, ".", patch); }

std::array<char, FileHeader::kSize> encode_header(const FileHeader& h) {
  std::array<char, FileHeader::kSize> b{};
  std::memcpy(b.data(), kMagic.data(), kMagic.size());
  put_le<std::uint32_t>(b.data() + 8, h.format_version);
  put_le<std::uint16_t>(b.data() + 12, h.written_by.major);
  put_le<std::uint16_t>(b.data() + 14, h.written_by.minor);
  put_le<std::uint16_t>(b.data() + 16, h.written_by.patch);
  put_le<std::uint16_t>(b.data() + 18, static_cast<std::uint16_t>(h.archive));
  put_le<std::uint32_t>(b.data() + 20, h.archive_version);
  put_le<std::uint64_t>(b.data() + 24, h.payload_bytes);
  put_le<std::uint32_t>(b.data() + 32, h.payload_crc32);
  put_le<std::uint32_t>(b.data() + 36, crc32(b.data(), 36));
  return b;
}

FileHeader decode_header(std::string_view bytes, const std::string& source) {
  const char* p = bytes.data();
  if (bytes.size() < FileHeader::kSize)
    throw CheckpointError(source,
                          detail::concat("truncated: ", bytes.size(), " bytes, shorter than the ",
                                         FileHeader::kSize, "-byte header"));
  if (std::memcmp(p, kMagic.data(), kMagic.size()) != 0)
    throw CheckpointError(source, "not a qat checkpoint (magic bytes " + hex_bytes(p, 8) +
                                      ", expected " + hex_bytes(kMagic.data(), 8) +
                                      " = \"QATCKPT\\0\")");
  FileHeader h;
  h.format_version = get_le<std::uint32_t>(p + 8);
  h.written_by = {get_le<std::uint16_t>(p + 12), get_le<std::uint16_t>(p + 14),
                  get_le<std::uint16_t>(p + 16)};
  // The version comes before the header CRC: a future format may lay its header out otherwise.
  if (h.format_version > kFormatVersion)
    throw CheckpointError(
        source, detail::concat("format version ", h.format_version,
                               " is newer than this build of qat reads (format version ", kFormatVersion,
                               "); the file was written by qat ", h.written_by.str(),
                               ", upgrade qat to read it"));
  if (h.format_version == 0)
    throw CheckpointError(source, "invalid format version 0 (the header is corrupt)");
  const std::uint32_t stored_crc = get_le<std::uint32_t>(p + 36);
  const std::uint32_t actual_crc = crc32(p, 36);
  if (stored_crc != actual_crc)
    throw CheckpointError(source, "header is corrupt: its CRC32 is " + hex32(actual_crc) +
                                      ", the header says " + hex32(stored_crc));
  const std::uint16_t kind = get_le<std::uint16_t>(p + 18);
  if (kind > static_cast<std::uint16_t>(ArchiveKind::Xml))
    throw CheckpointError(
        source, detail::concat("unknown archive kind ", kind, " (known: 0 = binary, 1 = xml)"));
  h.archive = static_cast<ArchiveKind>(kind);
  h.archive_version = get_le<std::uint32_t>(p + 20);
  h.payload_bytes = get_le<std::uint64_t>(p + 24);
  h.payload_crc32 = get_le<std::uint32_t>(p + 32);
  return h;
}

void check_payload_size(const FileHeader& h, std::uint64_t size, const std::string& source) {
  if (size < h.payload_bytes)
    throw CheckpointError(source, detail::concat("truncated: the header announces a ", h.payload_bytes,
                                                 "-byte payload but only ", size, " bytes follow"));
  if (size > h.payload_bytes)
    throw CheckpointError(source, detail::concat(size - h.payload_bytes, " unexpected bytes after the ",
                                                 h.payload_bytes, "-byte payload"));
}

void check_payload(const FileHeader& h, std::string_view payload, const std::string& source) {
  check_payload_size(h, payload.size(), source);
  const std::uint32_t actual = crc32(payload.data(), payload.size());
  if (actual != h.payload_crc32)
    throw CheckpointError(source, "payload is corrupt: its CRC32 is " + hex32(actual) +
                                      ", the header says " + hex32(h.payload_crc32));
}

}  // namespace qat::io
