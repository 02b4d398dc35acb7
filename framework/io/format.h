#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "framework/version.h"

namespace qat::io {

/// How a checkpoint's payload is encoded.
enum class ArchiveKind : std::uint16_t {
  Binary = 0,  ///< Boost binary archive: compact, bit-exact (the default)
  Xml = 1,     ///< Boost XML archive: readable, for inspection and diffs
};

std::string_view archive_kind_name(ArchiveKind kind);  // "binary", "xml"

/// A qat release, as major.minor.patch.
struct Version {
  std::uint16_t major = 0, minor = 0, patch = 0;
  std::string str() const;  // "0.1.0"
  bool operator==(const Version&) const = default;
};

/// The version of qat that writes checkpoints (from project(VERSION) in CMake).
inline constexpr Version kLibraryVersion{kVersionMajor, kVersionMinor, kVersionPatch};

/// The checkpoint format this build writes, and the newest it reads.
inline constexpr std::uint32_t kFormatVersion = 1;

/// Every checkpoint starts with these 8 bytes.
inline constexpr std::array<char, 8> kMagic{'Q', 'A', 'T', 'C', 'K', 'P', 'T', '\0'};

/// The fixed header in front of the payload, all integers little-endian:
///
///   offset size field
///        0    8 magic "QATCKPT\0"
///        8    4 format_version (u32)
///       12    6 written_by: major, minor, patch (u16 each)
///       18    2 archive kind (u16: 0 binary, 1 xml)
///       20    4 archive_version: Boost.Serialization archive version of the payload (u32)
///       24    8 payload_bytes (u64)
///       32    4 payload_crc32 (u32, CRC-32/IEEE of the payload)
///       36    4 header_crc32 (u32, CRC-32/IEEE of bytes 0..35)
///       40      payload
struct FileHeader {
  static constexpr std::size_t kSize = 40;

  std::uint32_t format_version = kFormatVersion;
  Version written_by = kLibraryVersion;
  ArchiveKind archive = ArchiveKind::Binary;
  std::uint32_t archive_version = 0;
  std::uint64_t payload_bytes = 0;
  std::uint32_t payload_crc32 = 0;
};

/// The 40 header bytes of `h`, header CRC included.
std::array<char, FileHeader::kSize> encode_header(const FileHeader& h);

/// Parses and checks the first FileHeader::kSize bytes of `bytes`, in this order: length,
/// magic, format version (a newer one names both versions), header CRC, archive kind.
/// Throws CheckpointError naming `source`. The payload itself is not checked here.
FileHeader decode_header(std::string_view bytes, const std::string& source);

/// Throws CheckpointError naming `source` unless `size` bytes follow the header, as `h`
/// announces ("truncated: ..." or "... unexpected bytes after ...").
void check_payload_size(const FileHeader& h, std::uint64_t size, const std::string& source);

/// Throws CheckpointError naming `source` unless `payload` has the length and CRC that `h`
/// announces.
void check_payload(const FileHeader& h, std::string_view payload, const std::string& source);

}  // namespace qat::io
