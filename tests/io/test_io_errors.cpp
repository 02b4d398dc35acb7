// framework/io: every way a checkpoint file can be bad gives one exact, named error.
#include <sys/wait.h>
#include <unistd.h>

#include <boost/test/unit_test.hpp>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <random>

#include "io/io_test_util.h"

using namespace qat;
using namespace qat::test;
using io::ArchiveKind;

namespace {

std::string hex32(std::uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", v);
  return buf;
}

/// A saved SmallNet with optimizer and training state; returns its path.
std::string saved_net(const TempDir& dir, ArchiveKind kind = ArchiveKind::Binary) {
  SmallNet net;
  io::Checkpoint c = io::capture(net);
  c.metadata["note"] = "test";
  c.optimizer =
      io::OptimizerState{"sgd", {{"lr", 0.1}}, {{"fc.bias.momentum_buffer", Tensor::ones(Shape{3})}}};
  c.training = io::TrainingState{3, 120, {{"default", Generator(5).state()}}, {{"k", 9}}};
  const std::string path = dir.file(kind == ArchiveKind::Binary ? "net.qat" : "net.xml.qat");
  io::save(c, path, {.archive = kind});
  return path;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(corrupt_files)

BOOST_AUTO_TEST_CASE(one_flipped_payload_byte_fails_the_crc) {
  TempDir dir;
  const std::string path = saved_net(dir);
  std::string bytes = read_file(path);
  const io::FileHeader h = io::decode_header(bytes, path);
  bytes[io::FileHeader::kSize + bytes.size() / 2] ^= 0x10;
  write_file(path, bytes);
  const std::uint32_t actual = io::crc32(bytes.data() + io::FileHeader::kSize, h.payload_bytes);
  BOOST_TEST(error_of<io::CheckpointError>([&] { io::load(path); }) ==
             "checkpoint '" + path + "': payload is corrupt: its CRC32 is " + hex32(actual) +
                 ", the header says " + hex32(h.payload_crc32));
}

BOOST_AUTO_TEST_CASE(truncated_files) {
  TempDir dir;
  const std::string path = saved_net(dir);
  const std::string bytes = read_file(path);
  const std::size_t payload = bytes.size() - io::FileHeader::kSize;
  write_file(path, bytes.substr(0, bytes.size() - 10));
  BOOST_TEST(error_of([&] { io::load(path); }) ==
             "checkpoint '" + path + "': truncated: the header announces a " + std::to_string(payload) +
                 "-byte payload but only " + std::to_string(payload - 10) + " bytes follow");
  write_file(path, bytes.substr(0, 20));
  BOOST_TEST(error_of([&] { io::load(path); }) ==
             "checkpoint '" + path + "': truncated: 20 bytes, shorter than the 40-byte header");
  write_file(path, "");
  BOOST_TEST(error_of([&] { io::load(path); }) ==
             "checkpoint '" + path + "': truncated: 0 bytes, shorter than the 40-byte header");
  // The same through a stream and through memory.
  std::istringstream is(bytes.substr(0, bytes.size() - 1));
  BOOST_TEST(error_of([&] {
               io::read(is, "s");
             }).find("checkpoint 's': truncated: the header announces") == 0u);
  BOOST_TEST(error_of([&] { io::from_bytes(bytes + "xyz"); }) ==
             "checkpoint '<memory>': 3 unexpected bytes after the " + std::to_string(payload) +
                 "-byte payload");
}

BOOST_AUTO_TEST_CASE(newer_format_version_names_both_versions) {
  TempDir dir;
  const std::string path = saved_net(dir);
  std::string bytes = read_file(path);
  bytes[8] = 2;  // format version 1 -> 2, header CRC left stale on purpose
  write_file(path, bytes);
  BOOST_TEST(error_of<io::CheckpointError>([&] { io::load(path); }) ==
             "checkpoint '" + path +
                 "': format version 2 is newer than this build of qat reads "
                 "(format version 1); the file was written by qat 0.1.0, "
                 "upgrade qat to read it");
  bytes[8] = 0;
  BOOST_TEST(error_of([&] { io::from_bytes(bytes, path); }) ==
             "checkpoint '" + path + "': invalid format version 0 (the header is corrupt)");
}

BOOST_AUTO_TEST_CASE(wrong_magic_and_corrupt_header) {
  TempDir dir;
  const std::string path = saved_net(dir);
  const std::string bytes = read_file(path);
  write_file(path, "\x89PNG\r\n\x1a\n" + bytes.substr(8));
  BOOST_TEST(error_of([&] { io::load(path); }) ==
             "checkpoint '" + path +
                 "': not a qat checkpoint (magic bytes 89 50 4e 47 0d 0a 1a 0a, "
                 "expected 51 41 54 43 4b 50 54 00 = \"QATCKPT\\0\")");
  std::string flipped = bytes;
  flipped[26] ^= 1;  // payload length: caught by the header CRC, not read as a length
  const std::string msg = error_of([&] { io::from_bytes(flipped); });
  BOOST_TEST(msg.find("checkpoint '<memory>': header is corrupt: its CRC32 is 0x") == 0u, msg);
  const std::string kind7 = with_header(bytes, [](io::FileHeader& h) { h.archive = ArchiveKind(7); });
  BOOST_TEST(error_of([&] { io::from_bytes(kind7); }) ==
             "checkpoint '<memory>': unknown archive kind 7 (known: 0 = binary, 1 = xml)");
  const std::string future = with_header(bytes, [](io::FileHeader& h) { h.archive_version = 99; });
  const std::string v = std::to_string(io::detail::archive_version());
  BOOST_TEST(error_of([&] { io::from_bytes(future); }) ==
             "checkpoint '<memory>': the payload was written with Boost.Serialization archive "
             "version 99; this build reads versions 18 to " +
                 v);
  // A binary payload labelled as XML passes the CRC and fails in the decoder.
  const std::string as_xml = with_header(bytes, [](io::FileHeader& h) { h.archive = ArchiveKind::Xml; });
  BOOST_TEST(error_of([&] {
               io::from_bytes(as_xml);
             }).find("checkpoint '<memory>': truncated or corrupt payload at byte ") == 0u);
}

BOOST_AUTO_TEST_CASE(unreadable_paths) {
  TempDir dir;
  const std::string nope = dir.file("nope");
  BOOST_TEST(error_of([&] { io::load(nope); }) ==
             "checkpoint '" + nope + "': cannot open for reading: No such file or directory");
  BOOST_TEST(error_of([&] { io::load(dir.path.string()); }) ==
             "checkpoint '" + dir.path.string() + "': cannot open for reading: not a regular file");
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(hostile_payloads)

BOOST_AUTO_TEST_CASE(absurd_sizes_are_refused_before_allocating) {
  // A zero-size tensor whose first dimension is huge; make the second dimension 1 in the file.
  io::Checkpoint c;
  const std::int64_t huge = 0x1122334455;
  c.tensors = {{"t", Tensor::zeros(Shape{huge, 0})}};
  std::string payload = io::to_bytes(c).substr(io::FileHeader::kSize);
  const std::string dims("\x55\x44\x33\x22\x11\0\0\0\0\0\0\0\0\0\0\0", 16);
  const std::size_t at = payload.find(dims);
  BOOST_REQUIRE(at != std::string::npos);
  payload[at + 8] = 1;
  BOOST_TEST(error_of([&] { io::from_bytes(wrap_payload(payload, ArchiveKind::Binary)); }) ==
             "checkpoint '<memory>': corrupt payload at byte 53: tensor element count " +
                 std::to_string(huge) +
                 " (4 bytes each) exceeds the 15 bytes left");  // metadata and two flags follow

  // XML: a count far beyond the text that follows.
  c.tensors = {{"w", Tensor::ones(Shape{2, 4})}};
  std::string xml = io::to_bytes(c, {.archive = ArchiveKind::Xml}).substr(io::FileHeader::kSize);
  const std::size_t count = xml.find("<count>1</count>");
  BOOST_REQUIRE(count != std::string::npos);
  std::string more = xml;
  more.replace(count, 16, "<count>99999999999999</count>");
  const std::string msg = error_of([&] { io::from_bytes(wrap_payload(more, ArchiveKind::Xml)); });
  BOOST_TEST(
      msg.find(
          "checkpoint '<memory>': corrupt payload at byte 143: tensor count 99999999999999 (1 bytes "
          "each) exceeds the ") == 0u,
      msg);
  std::string shape = xml;
  shape.replace(shape.find("<shape>2 4</shape>"), 18, "<shape>4000000000 4000000000 4000000000</shape>");
  BOOST_TEST(error_of([&] { io::from_bytes(wrap_payload(shape, ArchiveKind::Xml)); }) ==
             "checkpoint '<memory>': corrupt payload at byte 280: tensor dimensions overflow int64");
  std::string values = xml;
  values.replace(values.find("<data>"), 7, "<data>x ");
  BOOST_TEST(
      error_of([&] { io::from_bytes(wrap_payload(values, ArchiveKind::Xml)); }) ==
      "checkpoint '<memory>': corrupt payload at byte 284: tensor 'w': 'x' is not a float32 value");
  // A double in XML must be exactly one number.
  io::Checkpoint o;
  o.optimizer = io::OptimizerState{"sgd", {{"lr", 0.1}}, {}};
  std::string hyper = io::to_bytes(o, {.archive = ArchiveKind::Xml}).substr(io::FileHeader::kSize);
  hyper.replace(hyper.find("<value>0.1</value>"), 18, "<value>x 0.1</value>");
  BOOST_TEST(error_of([&] { io::from_bytes(wrap_payload(hyper, ArchiveKind::Xml)); }) ==
             "checkpoint '<memory>': corrupt payload at byte 465: value 'x 0.1' is not a number");

  // A record class version from a future build (Boost 1.74 itself would accept it). The binary
  // payload starts with the checkpoint record's tracking byte and u32 class version.
  std::string future = io::to_bytes(io::Checkpoint{}).substr(io::FileHeader::kSize);
  BOOST_REQUIRE(future[1] == 1);
  future[1] = 2;
  BOOST_TEST(error_of([&] { io::from_bytes(wrap_payload(future, ArchiveKind::Binary)); }) ==
             "checkpoint '<memory>': checkpoint record version 2 is newer than this build of qat "
             "reads (1); upgrade qat to read it, unless the file is corrupt");
  // A byte far beyond any version qat wrote (the tracking byte, or a flipped version byte) is
  // corruption, not a newer file.
  future[1] = 48;
  BOOST_TEST(error_of([&] { io::from_bytes(wrap_payload(future, ArchiveKind::Binary)); }) ==
             "checkpoint '<memory>': corrupt payload at byte 5: checkpoint record version 48 was never "
             "written by qat (this build writes 1)");
  future[1] = 0;
  BOOST_TEST(error_of([&] { io::from_bytes(wrap_payload(future, ArchiveKind::Binary)); }) ==
             "checkpoint '<memory>': corrupt payload at byte 5: checkpoint record version 0 was never "
             "written by qat");

  // Boost 1.74 reads past the expected tag name for a longer end tag: refused before parsing.
  std::string tag = xml;
  tag.replace(tag.find("</name>"), 7, "</" + std::string(100, 'n') + ">");
  BOOST_TEST(error_of([&] { io::from_bytes(wrap_payload(tag, ArchiveKind::Xml)); }) ==
             "checkpoint '<memory>': corrupt payload: an XML end tag is 100 characters long");
  tag = xml;
  tag.replace(tag.find("</name>"), 7, "</nome>");
  BOOST_TEST(error_of([&] {
               io::from_bytes(wrap_payload(tag, ArchiveKind::Xml));
             }).find("checkpoint '<memory>': truncated or corrupt payload at byte ") == 0u);
  BOOST_TEST(
      error_of([&] { io::from_bytes(wrap_payload("", ArchiveKind::Binary)); }) ==
      "checkpoint '<memory>': truncated or corrupt payload at byte 0 of 0 (binary archive: the data "
      "ends early or a value is malformed)");
  // A payload cut short: the byte where decoding stopped, never "input stream error-Success".
  std::string cut = io::to_bytes(c, {.archive = ArchiveKind::Xml}).substr(io::FileHeader::kSize);
  cut.resize(cut.size() / 2);
  const std::string short_xml = error_of([&] { io::from_bytes(wrap_payload(cut, ArchiveKind::Xml)); });
  BOOST_TEST(short_xml.find("truncated or corrupt payload at byte ") != std::string::npos, short_xml);
  BOOST_TEST(short_xml.find("Success") == std::string::npos, short_xml);
  std::string cut_bin = io::to_bytes(c).substr(io::FileHeader::kSize);
  cut_bin.resize(cut_bin.size() - 3);
  const std::string short_bin =
      error_of([&] { io::from_bytes(wrap_payload(cut_bin, ArchiveKind::Binary)); });
  BOOST_TEST(short_bin.find("truncated or corrupt payload at byte ") != std::string::npos, short_bin);
}

BOOST_AUTO_TEST_CASE(random_mutations_never_escape_as_other_errors) {
  // A small in-process fuzzer: every mutant, wrapped in a valid header, must decode or throw
  // CheckpointError; a decoded one must load into the model or throw CheckpointError.
  TempDir dir;
  std::mt19937_64 rng(2024);
  int decoded = 0, rejected = 0;
  for (ArchiveKind kind : {ArchiveKind::Binary, ArchiveKind::Xml}) {
    const std::string good = read_file(saved_net(dir, kind)).substr(io::FileHeader::kSize);
    for (int i = 0; i < 400; ++i) {
      std::string p = good;
      const int edits = 1 + static_cast<int>(rng() % 4);
      for (int e = 0; e < edits; ++e) {
        const std::size_t at = rng() % p.size();
        switch (rng() % 4) {
          case 0:
            p[at] = static_cast<char>(rng());
            break;
          case 1:
            p[at] = static_cast<char>(0xFF);
            break;
          case 2:
            p.erase(at, 1 + rng() % 8);
            break;
          default:
            p.insert(at, 1 + rng() % 8, static_cast<char>(rng()));
            break;
        }
        if (p.empty()) p.push_back('x');
      }
      try {
        const io::Checkpoint c = io::from_bytes(wrap_payload(p, kind));
        ++decoded;
        SmallNet net;
        try {
          io::load_into(net, c, {.strict = false});
        } catch (const io::CheckpointError&) {
        }
      } catch (const io::CheckpointError&) {
        ++rejected;
      }
    }
  }
  BOOST_TEST(rejected > 0);
  BOOST_TEST_MESSAGE("mutants decoded: " << decoded << ", rejected: " << rejected);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(temporary_files)

// A writer killed mid-save (kill -9, SIGXFSZ) leaves `.NAME.tmp-<pid>-...`; the next save of the
// same target removes those whose writer is gone, and nothing else.
BOOST_AUTO_TEST_CASE(stale_temporary_files_of_the_target_are_removed_on_the_next_save) {
  namespace fs = std::filesystem;
  TempDir dir;
  const fs::path target = dir.path / "m.ckpt";
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  ::waitpid(child, nullptr, 0);  // a pid that no longer runs
  auto touch = [&](const std::string& name, bool old) {
    const fs::path p = dir.path / name;
    std::ofstream(p) << "partial";
    if (old) fs::last_write_time(p, fs::last_write_time(p) - std::chrono::hours(24 * 365 * 30));
    return p;
  };
  const fs::path dead = touch(".m.ckpt.tmp-" + std::to_string(child) + "-0-123", false);
  const fs::path reused = touch(".m.ckpt.tmp-1-0-5", true);  // pid 1 started after the file was written
  const fs::path live = touch(".m.ckpt.tmp-1-0-6", false);   // pid 1 could still be writing it
  const fs::path own = touch(".m.ckpt.tmp-" + std::to_string(::getpid()) + "-9-9", false);
  const fs::path other = touch(".n.ckpt.tmp-" + std::to_string(child) + "-0-1", false);
  const fs::path odd = touch(".m.ckpt.tmp-x1-0-1", false);
  io::save(io::Checkpoint{}, target.string());
  BOOST_TEST(!fs::exists(dead));
  BOOST_TEST(!fs::exists(reused));
  BOOST_TEST(fs::exists(live));
  BOOST_TEST(fs::exists(own));
  BOOST_TEST(fs::exists(other));
  BOOST_TEST(fs::exists(odd));
  BOOST_TEST(fs::exists(target));
}

BOOST_AUTO_TEST_CASE(check_writable_refuses_before_any_work) {
  TempDir dir;
  BOOST_CHECK_NO_THROW(io::check_writable((dir.path / "ok.ckpt").string()));
  BOOST_TEST(std::distance(std::filesystem::directory_iterator(dir.path), {}) == 0);  // probe removed
  BOOST_TEST(error_of([&] { io::check_writable((dir.path / "no" / "m.ckpt").string()); }) ==
             "checkpoint '" + (dir.path / "no" / "m.ckpt").string() + "': cannot save: directory '" +
                 (dir.path / "no").string() + "' does not exist");
  BOOST_TEST(error_of([&] { io::check_writable(dir.path.string()); }) ==
             "checkpoint '" + dir.path.string() + "': cannot save: it is a directory");
  if (::geteuid() != 0) {  // root writes anywhere
    std::filesystem::permissions(
        dir.path, std::filesystem::perms::owner_read | std::filesystem::perms::owner_exec);
    BOOST_TEST(error_of([&] {
                 io::check_writable((dir.path / "m.ckpt").string());
               }).find("cannot create a file") != std::string::npos);
    std::filesystem::permissions(dir.path, std::filesystem::perms::owner_all);
  }
}

BOOST_AUTO_TEST_SUITE_END()
