// libFuzzer target for the checkpoint reader. Each input is tried as a whole file image and as
// a payload wrapped in a valid header (binary and XML), so that mutations get past the CRC into
// the archive decoder. Every input must decode or be rejected with io::CheckpointError; any
// other exception escapes and aborts (a finding), as do crashes, leaks and sanitizer reports.
// A decoded checkpoint is loaded into a fixed model, optimizer and generator, and must survive
// an encode/decode round trip unchanged.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "framework/io/archive.h"
#include "framework/io/io.h"
#include "framework/optim/sgd.h"
#include "framework/tensor/storage.h"
#include "fuzz_model.h"

namespace {

using namespace qat;

std::string wrap(std::string_view payload, io::ArchiveKind kind) {
  io::FileHeader h;
  h.archive = kind;
  h.archive_version = io::detail::archive_version();
  h.payload_bytes = payload.size();
  h.payload_crc32 = io::crc32(payload.data(), payload.size());
  const auto header = io::encode_header(h);
  return std::string(header.data(), header.size()) + std::string(payload);
}

void apply(const io::Checkpoint& ckpt) {
  static const auto model = fuzz::make_model();
  static optim::SGD opt(model->named_parameters(), {.lr = 0.1, .momentum = 0.9});
  static Generator gen;
  try {
    io::load_into(*model, ckpt);
  } catch (const io::CheckpointError&) {
  }
  try {  // non-strict loads refuse wrong values too
    io::load_into(*model, ckpt, {.strict = false});
  } catch (const io::CheckpointError&) {
  }
  try {
    io::restore_optimizer(opt, ckpt);
  } catch (const io::CheckpointError&) {
  }
  try {
    io::restore_generators(ckpt, {{"default", &gen}});
  } catch (const io::CheckpointError&) {
  }
}

void check(std::string_view image) {
  io::Checkpoint ckpt;
  try {
    ckpt = io::from_bytes(image, "<fuzz>");
  } catch (const io::CheckpointError&) {
    return;
  }
  apply(ckpt);
  // Whatever decodes re-encodes, and decoding that gives the same bytes again.
  const std::string once = io::to_bytes(ckpt);
  if (io::to_bytes(io::from_bytes(once)) != once) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  check(input);
  check(wrap(input, io::ArchiveKind::Binary));
  check(wrap(input, io::ArchiveKind::Xml));
  // Hand pooled tensor buffers back to malloc: ASan then sees every free (the pool would hide
  // a use after free), and RSS does not grow with the variety of sizes the fuzzer tries.
  CachingAllocator::cpu().empty_cache();
  return 0;
}
