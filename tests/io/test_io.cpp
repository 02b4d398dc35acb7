// framework/io: CRC, header, payload round trips, and every way a file can be bad.
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <limits>
#include <random>
#include <sstream>

#include "io/io_test_util.h"

using namespace qat;
using namespace qat::test;
using io::ArchiveKind;

namespace {

// Bitwise CRC-32/IEEE, the definition the table-driven one must match.
std::uint32_t crc32_reference(const std::string& s) {
  std::uint32_t c = 0xFFFFFFFFu;
  for (unsigned char b : s) {
    c ^= b;
    for (int k = 0; k < 8; ++k) c = (c & 1u) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
  }
  return ~c;
}

template <class T>
Tensor tensor_of(std::vector<T> v, const Shape& shape) {
  return Tensor::from_vector(v, shape);
}

/// One tensor of every dtype, with edge values, plus a scalar and an empty tensor.
io::Checkpoint every_dtype() {
  constexpr float finf = std::numeric_limits<float>::infinity();
  constexpr double dinf = std::numeric_limits<double>::infinity();
  io::Checkpoint c;
  c.tensors = {
      {"f32", tensor_of<float>({1.5f, -0.0f, finf, -finf, std::numeric_limits<float>::denorm_min(),
                                std::numeric_limits<float>::max(), 0.1f, -3.25e-20f},
                               Shape{2, 4})},
      {"f64", tensor_of<double>({0.1, -1e300, dinf, std::numeric_limits<double>::denorm_min(),
                                 std::numeric_limits<double>::lowest(), 1.0 / 3.0},
                                Shape{3, 1, 2})},
      {"i8", tensor_of<std::int8_t>({-128, -1, 0, 1, 127}, Shape{5})},
      {"u8", tensor_of<std::uint8_t>({0, 1, 128, 255}, Shape{2, 2})},
      {"i16", tensor_of<std::int16_t>({-32768, 0, 32767}, Shape{3})},
      {"i32", tensor_of<std::int32_t>({std::numeric_limits<std::int32_t>::min(), 7,
                                       std::numeric_limits<std::int32_t>::max()},
                                      Shape{1, 3})},
      {"i64", tensor_of<std::int64_t>({std::numeric_limits<std::int64_t>::min(), -5,
                                       std::numeric_limits<std::int64_t>::max()},
                                      Shape{3})},
      {"features.0.weight", Tensor::scalar(2.5)},
      {"empty", Tensor::zeros(Shape{0, 3})},
      {"big", Tensor::full(Shape{3, 7, 5}, 0.3)},
  };
  return c;
}

const ArchiveKind kKinds[] = {ArchiveKind::Binary, ArchiveKind::Xml};

}  // namespace

BOOST_AUTO_TEST_SUITE(format)

BOOST_AUTO_TEST_CASE(crc32_matches_the_standard) {
  BOOST_TEST(io::crc32("123456789", 9) == 0xCBF43926u);
  BOOST_TEST(io::crc32("", 0) == 0u);
  std::mt19937 rng(1);
  std::string s;
  for (int n = 0; n < 70; ++n) {
    BOOST_TEST(io::crc32(s.data(), s.size()) == crc32_reference(s));
    for (std::size_t cut = 0; cut <= s.size(); cut += 5)  // incremental == whole
      BOOST_TEST(io::crc32(s.data() + cut, s.size() - cut, io::crc32(s.data(), cut)) ==
                 crc32_reference(s));
    s += static_cast<char>(rng());
  }
}

BOOST_AUTO_TEST_CASE(header_is_little_endian_at_fixed_offsets) {
  io::FileHeader h;
  h.archive = ArchiveKind::Xml;
  h.archive_version = 0x11223344u;
  h.payload_bytes = 0x0102030405060708ull;
  h.payload_crc32 = 0xA1B2C3D4u;
  const auto b = io::encode_header(h);
  const auto u8 = [&](int i) { return static_cast<unsigned char>(b[i]); };
  BOOST_TEST(std::string(b.data(), 8) == std::string("QATCKPT\0", 8));
  BOOST_TEST(u8(8) == 1);  // format version 1
  BOOST_TEST(u8(9) == 0);
  BOOST_TEST(u8(18) == 1);  // xml
  BOOST_TEST(u8(20) == 0x44);
  BOOST_TEST(u8(23) == 0x11);
  BOOST_TEST(u8(24) == 0x08);
  BOOST_TEST(u8(31) == 0x01);
  BOOST_TEST(u8(32) == 0xD4);
  const io::FileHeader d = io::decode_header(std::string_view(b.data(), b.size()), "x");
  BOOST_TEST(d.format_version == io::kFormatVersion);
  BOOST_TEST((d.written_by == io::kLibraryVersion));
  BOOST_TEST((d.archive == ArchiveKind::Xml));
  BOOST_TEST(d.archive_version == h.archive_version);
  BOOST_TEST(d.payload_bytes == h.payload_bytes);
  BOOST_TEST(d.payload_crc32 == h.payload_crc32);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(round_trip)

BOOST_AUTO_TEST_CASE(every_dtype_through_memory_streams) {
  const io::Checkpoint src = every_dtype();
  for (ArchiveKind kind : kKinds) {
    std::stringstream ss;
    io::write(src, ss, {.archive = kind});
    const io::Checkpoint back = io::read(ss);
    BOOST_TEST(bit_equal(back.tensors, src.tensors), "archive " << io::archive_kind_name(kind));
    BOOST_TEST(back.info.source == "<stream>");
    BOOST_TEST((back.info.archive == kind));
    BOOST_TEST(back.info.format_version == io::kFormatVersion);
    BOOST_TEST((back.info.written_by == io::kLibraryVersion));
    BOOST_TEST(!back.optimizer.has_value());
    BOOST_TEST(!back.training.has_value());
  }
}

BOOST_AUTO_TEST_CASE(nan_survives_both_archives) {
  io::Checkpoint c;
  c.tensors = {{"n", tensor_of<float>({std::nanf(""), -std::nanf(""), 1.f}, Shape{3})}};
  for (ArchiveKind kind : kKinds) {
    const auto v =
        io::from_bytes(io::to_bytes(c, {.archive = kind})).tensors[0].second.to_vector<float>();
    BOOST_TEST(std::isnan(v[0]));
    BOOST_TEST(std::isnan(v[1]));
    BOOST_TEST(std::signbit(v[1]));
    BOOST_TEST(v[2] == 1.f);
  }
}

BOOST_AUTO_TEST_CASE(xml_is_readable) {
  io::Checkpoint c;
  c.tensors = {{"fc.bias", tensor_of<float>({0.5f, -2.f, 0.1f}, Shape{3})}};
  c.metadata["qconfig"] = "int8 <per-channel> & symmetric";
  const std::string xml = io::to_bytes(c, {.archive = ArchiveKind::Xml}).substr(io::FileHeader::kSize);
  BOOST_TEST(xml.find("<name>fc.bias</name>") != std::string::npos, xml);
  BOOST_TEST(xml.find("<dtype>float32</dtype>") != std::string::npos);
  BOOST_TEST(xml.find("<shape>3</shape>") != std::string::npos);
  BOOST_TEST(xml.find("<data>0.5 -2 0.1</data>") != std::string::npos);
  BOOST_TEST(xml.find("int8 &lt;per-channel&gt; &amp; symmetric") != std::string::npos);
  BOOST_TEST(xml.find("version=\"1\"") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(metadata_optimizer_and_training_state) {
  io::Checkpoint c;
  c.tensors = {{"w", Tensor::ones(Shape{2})}};
  c.metadata = {{"", "empty key"},
                {"fc1.qspec", "bits=8 signed symmetric per_channel axis=0"},
                {"multi", "line one\nline two\n\ttabbed  double  spaced "},
                {"markup", "<a href=\"x\">&amp;</a> 'q'"},
                {"utf8", "\xce\xbc-law \xe2\x86\x92 int8"},
                {"empty value", ""}};
  io::OptimizerState opt{"sgd",
                         {{"lr", 0.1}, {"momentum", 0.9}, {"weird", -1.0 / 3.0}},
                         {{"w.momentum_buffer", tensor_of<float>({1.f, 2.f}, Shape{2})},
                          {"w.step", Tensor::scalar(3, DType::Int64)}}};
  c.optimizer = opt;
  Generator g(42);
  g.normal();  // leaves a spare normal cached
  io::TrainingState ts;
  ts.epoch = 7;
  ts.global_step = -1;
  ts.generators = {{"default", g.state()}, {"loader", Generator(7).state()}};
  ts.counters = {{"samples_seen", 1ll << 40}, {"min", std::numeric_limits<std::int64_t>::min()}};
  c.training = ts;
  for (ArchiveKind kind : kKinds) {
    const io::Checkpoint b = io::from_bytes(io::to_bytes(c, {.archive = kind}));
    BOOST_TEST((b.metadata == c.metadata), "archive " << io::archive_kind_name(kind));
    BOOST_REQUIRE(b.optimizer.has_value());
    BOOST_TEST(b.optimizer->kind == "sgd");
    BOOST_TEST((b.optimizer->hyperparameters == opt.hyperparameters));
    BOOST_TEST(bit_equal(b.optimizer->state, opt.state));
    BOOST_REQUIRE(b.training.has_value());
    BOOST_TEST(b.training->epoch == 7);
    BOOST_TEST(b.training->global_step == -1);
    BOOST_TEST((b.training->counters == ts.counters));
    BOOST_TEST(b.training->generators.size() == 2u);
    Generator r;
    r.set_state(b.training->generators.at("default"));
    Generator expect = g;
    for (int i = 0; i < 5; ++i) BOOST_TEST(r.normal() == expect.normal());
  }
}

BOOST_AUTO_TEST_CASE(files_and_consecutive_stream_reads) {
  TempDir dir;
  const io::Checkpoint src = every_dtype();
  for (ArchiveKind kind : kKinds) {
    const std::string path = dir.file(std::string("ck.") + std::string(io::archive_kind_name(kind)));
    io::save(src, path, {.archive = kind});
    const io::Checkpoint back = io::load(path);
    BOOST_TEST(bit_equal(back.tensors, src.tensors));
    BOOST_TEST(back.info.source == path);
    BOOST_TEST(read_file(path) == io::to_bytes(src, {.archive = kind}));
  }
  BOOST_TEST(dir.entries() == (std::vector<std::string>{"ck.binary", "ck.xml"}));
  // read() stops right after one checkpoint.
  io::Checkpoint a, b;
  a.metadata["n"] = "1";
  b.metadata["n"] = "2";
  std::stringstream ss;
  io::write(a, ss);
  io::write(b, ss, {.archive = ArchiveKind::Xml});
  BOOST_TEST(io::read(ss).metadata.at("n") == "1");
  BOOST_TEST(io::read(ss).metadata.at("n") == "2");
}

BOOST_AUTO_TEST_CASE(writers_reject_bad_input) {
  io::Checkpoint c;
  c.tensors = {{"w", Tensor::ones(Shape{2})}, {"w", Tensor::ones(Shape{2})}};
  BOOST_TEST(error_of([&] { io::to_bytes(c); }) == "io::to_bytes: tensor name 'w' appears twice");
  c.tensors = {{"u", Tensor()}};
  TempDir dir;
  BOOST_TEST(error_of([&] { io::save(c, dir.file("x")); }) ==
             "io::save: tensor 'u' is an undefined tensor");
  BOOST_TEST(dir.entries().empty());
}

BOOST_AUTO_TEST_SUITE_END()
