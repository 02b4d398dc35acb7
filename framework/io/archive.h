#pragma once
// Internal to framework/io: the payload codec. Boost archive headers stay in archive.cpp.
#include <cstdint>
#include <string>
#include <string_view>

#include "framework/io/checkpoint.h"

namespace qat::io::detail {

/// The Boost.Serialization archive version this build writes; it reads versions
/// kMinArchiveVersion..archive_version().
std::uint32_t archive_version();
inline constexpr std::uint32_t kMinArchiveVersion = 18;  // Boost 1.74, the oldest we build with

/// The payload of `ckpt` (tensors, metadata, optional optimizer and training state).
std::string encode_payload(const Checkpoint& ckpt, ArchiveKind kind);

/// Decodes a payload whose length and CRC were already checked. Every count and size read is
/// checked against the bytes left before anything is allocated; any failure (Boost archive
/// exceptions included) becomes a CheckpointError naming `source`. `info` is left empty.
Checkpoint decode_payload(std::string_view payload, ArchiveKind kind,
                          std::uint32_t payload_archive_version, const std::string& source);

}  // namespace qat::io::detail
