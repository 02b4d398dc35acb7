#pragma once
#include <cstddef>
#include <cstdint>

namespace qat::io {

/// CRC-32/IEEE 802.3 (reflected polynomial 0xEDB88320, init and final xor 0xFFFFFFFF), the CRC
/// of zlib, gzip and PNG: crc32("123456789") == 0xCBF43926. Pass the previous result as `crc`
/// to checksum data in pieces: crc32(b, nb, crc32(a, na)) == crc32(a + b).
std::uint32_t crc32(const void* data, std::size_t n, std::uint32_t crc = 0);

}  // namespace qat::io
