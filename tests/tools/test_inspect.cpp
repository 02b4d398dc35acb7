// qat-inspect on checkpoints of a small prepared model (every section, --xml, --json, corrupt
// files, usage), and the strict-load errors that use checkpoint metadata (load.hint).
#include <sys/wait.h>

#include <boost/test/unit_test.hpp>
#include <cmath>
#include <cstdio>
#include <limits>
#include <sstream>

#include "framework/autograd/ops.h"
#include "framework/optim/adam.h"
#include "io/io_test_util.h"
#include "modules/quant/checkpoint_meta.h"
#include "modules/quant/prepare.h"
#include "modules/quant/stubs.h"

using namespace qat;
using test::error_of;
using test::TempDir;

namespace {

struct Result {
  int status;
  std::string out, err;
};

// Runs qat-inspect with `args`, capturing stdout, stderr and the exit status.
Result inspect(const TempDir& dir, const std::string& args) {
  static int n = 0;
  const std::string out = dir.file("out" + std::to_string(n)),
                    err = dir.file("err" + std::to_string(n++));
  const int rc = std::system((std::string(QAT_INSPECT) + " " + args + " >" + out + " 2>" + err).c_str());
  return {WIFEXITED(rc) ? WEXITSTATUS(rc) : -1, test::read_file(out), test::read_file(err)};
}

std::vector<std::string> lines_of(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream is(s);
  for (std::string line; std::getline(is, line);) out.push_back(line);
  return out;
}

// The line of `text` that starts with `prefix` (after indentation), or "".
std::string line_starting(const std::string& text, const std::string& prefix) {
  for (const auto& l : lines_of(text)) {
    const auto start = l.find_first_not_of(' ');
    if (start != std::string::npos && l.compare(start, prefix.size(), prefix) == 0) return l;
  }
  return "";
}

// The cells of a table line: the text between runs of two or more spaces.
std::vector<std::string> cells(const std::string& line) {
  std::vector<std::string> out;
  std::size_t i = line.find_first_not_of(' ');
  while (i != std::string::npos && i < line.size()) {
    std::size_t end = line.find("  ", i);
    out.push_back(line.substr(i, end == std::string::npos ? std::string::npos : end - i));
    i = end == std::string::npos ? end : line.find_first_not_of(' ', end);
  }
  return out;
}
using Cells = std::vector<std::string>;

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

std::string g6(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

nn::ModulePtr mlp() {
  return std::make_shared<nn::Sequential>(
      nn::NamedModules{{"quant", std::make_shared<quant::QuantStub>()},
                       {"fc1", std::make_shared<nn::Linear>(6, 8)},
                       {"relu1", std::make_shared<nn::ReLU>()},
                       {"fc2", std::make_shared<nn::Linear>(8, 3)},
                       {"dequant", std::make_shared<quant::DeQuantStub>()}});
}

quant::QConfigRegistry registry() {
  quant::QConfigRegistry reg;  // global int8_default
  reg.set_module_name("fc2", "int8_lsq");
  return reg;
}

// A prepared mlp after two Adam steps, and its full training checkpoint.
struct Trained {
  nn::ModulePtr model = mlp();
  quant::PrepareReport report;
  io::Checkpoint ckpt;

  Trained() {
    manual_seed(7);
    model = mlp();
    report = quant::prepare_qat(*model, registry());
    optim::Adam opt(model->named_parameters(), {.lr = 0.01});
    Generator gen(3);
    for (int step = 0; step < 2; ++step) {
      opt.zero_grad();
      const Tensor x = Tensor::normal(Shape{4, 6}, 0, 1, gen);
      sum((*model)(x) * (*model)(x)).backward();
      opt.step();
    }
    ckpt = io::capture(*model);
    ckpt.metadata = {{"model", "mlp"}, {"mode", "qat"}};
    ckpt.metadata.merge(quant::checkpoint_metadata(*model, report));
    ckpt.optimizer = io::capture(opt);
    ckpt.training =
        io::TrainingState{.epoch = 3,
                          .global_step = 17,
                          .generators = {{"default", Generator(1).state()}, {"loader", gen.state()}},
                          .counters = {{"loader_batch", 5}}};
  }
};

const Tensor& tensor_of(const io::Checkpoint& c, const std::string& name) {
  for (const auto& [n, t] : c.tensors)
    if (n == name) return t;
  throw std::runtime_error("no tensor " + name);
}

// Brackets and braces balance outside strings, and strings are closed: enough to catch a
// broken writer without a JSON library.
bool json_balanced(const std::string& s) {
  std::string stack;
  bool in_string = false;
  for (std::size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (in_string) {
      if (c == '\\')
        ++i;
      else if (c == '"')
        in_string = false;
      continue;
    }
    if (c == '"')
      in_string = true;
    else if (c == '{' || c == '[')
      stack.push_back(c);
    else if (c == '}' || c == ']') {
      if (stack.empty() || stack.back() != (c == '}' ? '{' : '[')) return false;
      stack.pop_back();
    }
  }
  return stack.empty() && !in_string;
}

constexpr const char* kQatHint =
    "the checkpoint holds a QAT model (int8_default on 2 layers, int8_lsq on 1): call prepare_qat "
    "with the same registry before loading";
constexpr const char* kFloatHint =
    "the model is prepared for QAT but the checkpoint holds a float model: load it before "
    "prepare_qat, or load with strict=false to keep fresh quantizer state";

}  // namespace

BOOST_AUTO_TEST_SUITE(inspector)

BOOST_AUTO_TEST_CASE(text_report_has_every_section) {
  TempDir dir;
  Trained t;
  io::Checkpoint c = t.ckpt;
  const float nan = std::numeric_limits<float>::quiet_NaN(),
              inf = std::numeric_limits<float>::infinity();
  c.tensors.emplace_back("probe", Tensor::from_vector<float>({1.5f, nan, -inf, -2.25f, nan}, Shape{5}));
  const std::string path = dir.file("mlp.qat");
  io::save(c, path);
  const std::string bytes = test::read_file(path);
  const io::FileHeader h = io::decode_header(bytes, path);

  const Result r = inspect(dir, path);
  BOOST_TEST(r.status == 0);
  BOOST_TEST(r.err == "");
  const std::string& o = r.out;
  // Header and CRC.
  BOOST_TEST(contains(o, "checkpoint " + path + "\n"));
  BOOST_TEST(line_starting(o, "format version") == "  format version  1");
  BOOST_TEST(line_starting(o, "written by") == "  written by      qat " + io::kLibraryVersion.str());
  BOOST_TEST(contains(line_starting(o, "archive"), "binary (Boost archive version "));
  char crc[16];
  std::snprintf(crc, sizeof crc, "0x%08x", h.payload_crc32);
  BOOST_TEST(line_starting(o, "payload") ==
             "  payload         " + std::to_string(bytes.size() - 40) + " bytes, CRC32 " + crc);
  BOOST_TEST(line_starting(o, "CRC") == "  CRC             valid");
  // Every tensor with dtype, shape and range; NaN / Inf counted and left out of the range.
  BOOST_TEST(contains(o, "tensors (" + std::to_string(c.tensors.size()) + ", "));
  for (const auto& [name, tensor] : c.tensors) BOOST_TEST(line_starting(o, name + " ") != "", name);
  const Tensor& w = tensor_of(c, "fc1.weight");
  const auto wv = w.to_vector<float>();
  BOOST_TEST(cells(line_starting(o, "fc1.weight ")) ==
             (Cells{"fc1.weight", "float32", "[8, 6]", g6(*std::min_element(wv.begin(), wv.end())),
                    g6(*std::max_element(wv.begin(), wv.end()))}));
  BOOST_TEST(cells(line_starting(o, "probe ")) ==
             (Cells{"probe", "float32", "[5]", "-2.25", "1.5", "NaN: 2, Inf: 1"}));
  BOOST_TEST(cells(line_starting(o, "fc2.weight_fake_quant.warmup_seen ")) ==
             (Cells{"fc2.weight_fake_quant.warmup_seen", "int64", "[]", "1", "1"}));
  // Metadata outside the layer table, the layer table with each layer's quantizers.
  BOOST_TEST(contains(o, "metadata (" + std::to_string(c.metadata.size()) +
                             " entries; qconfig.* and quant.* in the layer table)"));
  BOOST_TEST(line_starting(o, "model ") == "  model      mlp");
  BOOST_TEST(line_starting(o, "load.hint") == std::string("  load.hint  ") + kQatHint);
  BOOST_TEST(line_starting(o, "qconfig.") == "");  // grouped, not listed
  BOOST_TEST(contains(o, "quantized layers (3)\n"));
  BOOST_TEST(contains(line_starting(o, "layer "), "config"));
  BOOST_TEST(cells(line_starting(o, "quant ")) ==
             (Cells{"quant", "int8_default", "global", "activation_post_process",
                    "FakeQuantize uint8 affine per-tensor"}));
  BOOST_TEST(cells(line_starting(o, "fc2 ")) ==
             (Cells{"fc2", "int8_lsq", "name fc2", "activation_post_process",
                    "LearnableFakeQuantize uint8 affine per-tensor"}));
  // In model order, a layer's further quantizers on the lines below it.
  const std::vector<std::string> table = lines_of(o.substr(o.find("quantized layers")));
  BOOST_REQUIRE(table.size() >= 7u);
  BOOST_TEST(cells(table[2])[0] == "quant");
  BOOST_TEST(cells(table[3])[0] == "fc1");
  BOOST_TEST(cells(table[4]) ==
             (Cells{"weight_fake_quant", "FakeQuantize int8 symmetric per-channel(axis 0)"}));
  BOOST_TEST(cells(table[5])[0] == "fc2");
  // Optimizer and training state.
  BOOST_TEST(line_starting(o, "kind") == "  kind             adam");
  BOOST_TEST(contains(line_starting(o, "hyperparameters"), "lr=0.01"));
  BOOST_TEST(contains(line_starting(o, "state"),
                      std::to_string(c.optimizer->state.size()) + " slots (exp_avg x"));
  BOOST_TEST(line_starting(o, "epoch") == "  epoch        3");
  BOOST_TEST(line_starting(o, "global step") == "  global step  17");
  BOOST_TEST(line_starting(o, "generators") == "  generators   default, loader");
  BOOST_TEST(line_starting(o, "counters") == "  counters     loader_batch=5");
}

BOOST_AUTO_TEST_CASE(without_optimizer_or_training_state) {
  TempDir dir;
  test::SmallNet net;  // a float model, no quantization metadata
  const std::string path = dir.file("net.qat");
  io::save(io::capture(net), path);
  const Result r = inspect(dir, path);
  BOOST_TEST(r.status == 0);
  BOOST_TEST(contains(r.out, "\noptimizer: none\n"));
  BOOST_TEST(contains(r.out, "\ntraining state: none\n"));
  BOOST_TEST(!contains(r.out, "quantized layers"));
  BOOST_TEST(contains(r.out, "metadata (0 entries)"));
}

// Names and values from a file reach the terminal escaped: an OSC title sequence, a bell, a
// carriage return (which would overwrite the line) and a NUL print as \x.. text.
BOOST_AUTO_TEST_CASE(names_from_the_file_print_escaped) {
  TempDir dir;
  io::Checkpoint c;
  const std::string evil("w\x1b]0;owned\x07\rfake\0end", 20);
  c.tensors = {{evil, Tensor::ones(Shape{2})}};
  c.metadata = {{"note\x1b[2J",
                 "value\r\x9b"
                 "31m"}};
  const std::string path = dir.file("evil.qat");
  io::save(c, path);
  for (const char* mode : {"", "--json "}) {
    const Result r = inspect(dir, mode + path);
    BOOST_TEST(r.status == 0, r.err);
    BOOST_TEST(r.out.find('\x1b') == std::string::npos, mode);
    BOOST_TEST(r.out.find('\r') == std::string::npos, mode);
    BOOST_TEST(r.out.find('\x07') == std::string::npos, mode);
    BOOST_TEST(r.out.find(std::string(1, '\0')) == std::string::npos, mode);
  }
  const Result text = inspect(dir, path);
  BOOST_TEST(contains(text.out, "w\\x1b]0;owned\\x07\\rfake\\x00end"), text.out);
  BOOST_TEST(contains(text.out, "value\\r\\x9b31m"), text.out);
}

BOOST_AUTO_TEST_CASE(xml_dump_is_the_xml_payload) {
  TempDir dir;
  Trained t;
  const std::string bin = dir.file("mlp.bin"), xml = dir.file("mlp.xml");
  io::save(t.ckpt, bin);
  io::save(t.ckpt, xml, {.archive = io::ArchiveKind::Xml});
  const std::string xml_payload = test::read_file(xml).substr(io::FileHeader::kSize);
  BOOST_TEST(io::to_xml(io::load(bin)) == xml_payload);

  const Result r = inspect(dir, bin + " --xml");
  BOOST_TEST(r.status == 0);
  BOOST_TEST(r.out == xml_payload);  // the same text from a binary file
  BOOST_TEST(contains(r.out, "fc1.weight"));
  BOOST_TEST(contains(r.out, "<hyperparameters"));
  BOOST_TEST(contains(inspect(dir, xml).out, "xml (Boost archive version"));
}

BOOST_AUTO_TEST_CASE(json_report) {
  TempDir dir;
  Trained t;
  io::Checkpoint c = t.ckpt;
  c.tensors.emplace_back("probe", Tensor::from_vector<double>({std::nan(""), 0.1}, Shape{2}));
  c.metadata["note"] = "a \"quoted\"\nline\\";
  const std::string path = dir.file("mlp.qat");
  io::save(c, path);
  const Result r = inspect(dir, "--json " + path);
  BOOST_TEST(r.status == 0);
  const std::string& j = r.out;
  BOOST_TEST(j.rfind("{\"file\": ", 0) == 0);
  BOOST_TEST(json_balanced(j));
  for (const char* key :
       {"\"header\": {\"format_version\": 1", "\"crc\": {\"valid\": true}", "\"tensors\": [",
        "\"metadata\": {", "\"layers\": [", "\"optimizer\": {\"kind\": \"adam\"",
        "\"training\": {\"epoch\": 3, \"global_step\": 17"})
    BOOST_TEST(contains(j, key), key);
  BOOST_TEST(contains(
      j, "{\"name\": \"fc1.weight\", \"dtype\": \"float32\", \"shape\": [8, 6], \"numel\": 48"));
  BOOST_TEST(contains(j,
                      "{\"name\": \"probe\", \"dtype\": \"float64\", \"shape\": [2], \"numel\": 2, "
                      "\"min\": 0.1, \"max\": 0.1, \"nan\": 1, \"inf\": 0}"));
  BOOST_TEST(contains(j, "\"note\": \"a \\\"quoted\\\"\\nline\\\\\""));
  BOOST_TEST(contains(
      j, "{\"name\": \"fc2\", \"config\": \"int8_lsq\", \"rule\": \"name fc2\", \"quantizers\": {"));
  BOOST_TEST(contains(j, "\"lr\": 0.01"));
  // A float32 range as the shortest text that reads back as the same float.
  const auto wv = tensor_of(c, "fc1.weight").to_vector<float>();
  const std::size_t at = j.find("\"min\": ", j.find("\"name\": \"fc1.weight\"")) + 7;
  const std::string min_text = j.substr(at, j.find(',', at) - at);
  BOOST_TEST(std::strtof(min_text.c_str(), nullptr) == *std::min_element(wv.begin(), wv.end()));
  BOOST_TEST(min_text.size() <= 15u);
  BOOST_TEST(contains(j, "\"generators\": [\"default\", \"loader\"]"));
}

BOOST_AUTO_TEST_CASE(corrupt_files_exit_1_with_the_error) {
  TempDir dir;
  Trained t;
  const std::string path = dir.file("mlp.qat");
  io::save(t.ckpt, path);
  std::string bytes = test::read_file(path);

  // Payload CRC: the header is still shown, with the error; the same error on stderr.
  bytes[bytes.size() / 2] ^= 0x10;
  test::write_file(path, bytes);
  const std::string expected = error_of<io::CheckpointError>([&] { io::load(path); });
  BOOST_TEST(contains(expected, "payload is corrupt: its CRC32 is"));
  Result r = inspect(dir, path);
  BOOST_TEST(r.status == 1);
  BOOST_TEST(r.err == "qat-inspect: " + expected + "\n");
  BOOST_TEST(contains(r.out, "written by      qat " + io::kLibraryVersion.str()));
  BOOST_TEST(contains(line_starting(r.out, "CRC"), "INVALID: payload is corrupt: its CRC32 is"));
  BOOST_TEST(!contains(r.out, "tensors ("));
  r = inspect(dir, "--json " + path);
  BOOST_TEST(r.status == 1);
  BOOST_TEST(json_balanced(r.out));
  BOOST_TEST(
      contains(r.out, "\"crc\": {\"valid\": false, \"error\": \"payload is corrupt: its CRC32 is"));
  BOOST_TEST(inspect(dir, "--xml " + path).status == 1);

  // Truncated payload, not a checkpoint, no such file: the CheckpointError text, nothing on stdout.
  test::write_file(path, bytes.substr(0, bytes.size() - 3));
  r = inspect(dir, path);
  BOOST_TEST(r.status == 1);
  BOOST_TEST(contains(r.err, "checkpoint '" + path + "': truncated: the header announces a"));
  test::write_file(path, "hello, world: not a checkpoint at all, but long enough");
  r = inspect(dir, path);
  BOOST_TEST(r.status == 1);
  BOOST_TEST(r.out == "");
  BOOST_TEST(contains(r.err, "checkpoint '" + path + "': not a qat checkpoint (magic bytes"));
  r = inspect(dir, dir.file("absent.qat"));
  BOOST_TEST(r.status == 1);
  BOOST_TEST(contains(r.err, "absent.qat': cannot open for reading"));
}

BOOST_AUTO_TEST_CASE(usage_errors_exit_2) {
  TempDir dir;
  test::SmallNet net;
  const std::string path = dir.file("net.qat");
  io::save(io::capture(net), path);
  for (const std::string& args :
       {std::string(""), "--bogus " + path, path + " " + path, "--xml --json " + path}) {
    const Result r = inspect(dir, args);
    BOOST_TEST(r.status == 2, args);
    BOOST_TEST(contains(r.err, "usage: qat-inspect FILE"), args);
    BOOST_TEST(r.out == "", args);
  }
  const Result help = inspect(dir, "--help");
  BOOST_TEST(help.status == 0);
  BOOST_TEST(contains(help.out, "usage: qat-inspect FILE"));
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(load_hints)

BOOST_AUTO_TEST_CASE(checkpoint_metadata_records_specs_configs_and_hint) {
  Trained t;
  const auto meta = quant::checkpoint_metadata(*t.model, t.report);
  BOOST_TEST(meta.at("qconfig.fc2") == "int8_lsq (name fc2)");
  BOOST_TEST(meta.at("qconfig.fc1") == "int8_default (global)");
  BOOST_TEST(meta.count("quant.fc1.weight_fake_quant") == 1u);
  BOOST_TEST(meta.at("load.hint") == kQatHint);
  BOOST_TEST(quant::checkpoint_metadata(*t.model, t.report, true).at("load.hint") ==
             "the checkpoint holds an int8 model converted from QAT (int8_default on 2 layers, int8_lsq "
             "on 1): call prepare_qat with the same registry, then convert, before loading");
  nn::ModulePtr plain = mlp();
  BOOST_TEST(quant::checkpoint_metadata(*plain, {}).empty());
  BOOST_TEST(quant::config_counts({"b", "a", "skip", "a", "c", "a", "c"}) ==
             "a on 3 layers, c on 2, b on 1");
  BOOST_TEST(quant::config_counts({"x"}) == "x on 1 layer");
  BOOST_TEST(quant::config_counts({"skip"}) == "");
}

BOOST_AUTO_TEST_CASE(qat_checkpoint_into_unprepared_model_is_short_and_says_why) {
  Trained t;
  t.ckpt.info.source = "mlp.qat";
  nn::ModulePtr plain = mlp();
  NamedTensors before;
  io::LoadReport full;
  BOOST_REQUIRE_NO_THROW(full = io::load_into(*plain, t.ckpt, {.strict = false}));
  BOOST_REQUIRE(full.unexpected.size() > 10u);
  plain = mlp();
  before = test::state_copy(*plain);
  const std::string e = error_of<io::CheckpointError>([&] { io::load_into(*plain, t.ckpt); });
  BOOST_TEST(e.rfind("checkpoint 'mlp.qat': does not match the model (" +
                         std::to_string(full.unexpected.size()) + " problems; nothing was loaded):\n",
                     0) == 0);
  BOOST_TEST(contains(e, "  unexpected in checkpoint: " + full.unexpected[4] + "\n  ... and " +
                             std::to_string(full.unexpected.size() - 5) +
                             " more unexpected in checkpoint\n"));
  BOOST_TEST(!contains(e, full.unexpected[5]));
  BOOST_TEST(contains(e, std::string("\nhint: ") + kQatHint + "\n"));
  BOOST_TEST(lines_of(e).size() == 8u);  // title, 5 names, the count, the hint
  BOOST_TEST(test::bit_equal(test::state_copy(*plain), before));

  // A checkpoint written before load.hint: the hint comes from its qconfig.* metadata.
  t.ckpt.metadata.erase("load.hint");
  BOOST_TEST(contains(error_of<io::CheckpointError>([&] { io::load_into(*plain, t.ckpt); }),
                      std::string("\nhint: ") + kQatHint + "\n"));
  // No quantization metadata at all: no hint.
  for (auto it = t.ckpt.metadata.begin(); it != t.ckpt.metadata.end();)
    it = it->first.rfind("q", 0) == 0 ? t.ckpt.metadata.erase(it) : std::next(it);
  BOOST_TEST(!contains(error_of<io::CheckpointError>([&] { io::load_into(*plain, t.ckpt); }), "hint:"));
}

BOOST_AUTO_TEST_CASE(float_checkpoint_into_prepared_model) {
  manual_seed(1);
  nn::ModulePtr float_model = mlp();
  io::Checkpoint c = io::capture(*float_model);
  c.metadata = {{"model", "mlp"}};
  Trained t;
  const std::string e = error_of<io::CheckpointError>([&] { io::load_into(*t.model, c); });
  BOOST_TEST(contains(e, "  missing from checkpoint: "));
  BOOST_TEST(contains(e, std::string("\nhint: ") + kFloatHint + "\n"));
  BOOST_TEST(lines_of(e).size() <= 9u);
  // As the hint says: strict=false keeps the fresh quantizer state and loads the float weights.
  const io::LoadReport r = io::load_into(*t.model, c, {.strict = false});
  BOOST_TEST(r.unexpected.empty());
  BOOST_TEST(r.missing.size() > 0u);
  BOOST_TEST(
      test::bit_equal(t.model->submodule("fc1")->parameter("weight"), tensor_of(c, "fc1.weight")));
}

BOOST_AUTO_TEST_CASE(shape_mismatch_alone_gets_no_hint) {
  Trained t;
  Trained other;
  for (auto& [n, x] : t.ckpt.tensors)
    if (n == "fc2.bias") x = Tensor::zeros(Shape{4});
  const std::string e = error_of<io::CheckpointError>([&] { io::load_into(*other.model, t.ckpt); });
  BOOST_TEST(contains(e, "fc2.bias: checkpoint [4] vs model [3]"));
  BOOST_TEST(!contains(e, "hint:"));
}

BOOST_AUTO_TEST_CASE(summary_counts_what_it_leaves_out) {
  io::LoadReport r;
  for (int i = 0; i < 7; ++i) r.missing.push_back("m" + std::to_string(i));
  r.mismatched.push_back({"w", "checkpoint [2] vs model [3]"});
  r.unexpected = {"u0", "u1", "u2"};
  BOOST_TEST(r.summary(2) ==
             "  missing from checkpoint: m0\n"
             "  missing from checkpoint: m1\n"
             "  ... and 5 more missing from checkpoint\n"
             "  w: checkpoint [2] vs model [3]\n"
             "  unexpected in checkpoint: u0\n"
             "  unexpected in checkpoint: u1\n"
             "  ... and 1 more unexpected in checkpoint\n");
  BOOST_TEST(r.summary(10) == r.str());
}

BOOST_AUTO_TEST_CASE(registered_hints_are_consulted_and_removable) {
  nn::ModulePtr plain = mlp();
  io::Checkpoint c = io::capture(*plain);
  c.tensors.pop_back();
  io::set_load_hint("test", [](nn::Module&, const io::Checkpoint&, const io::LoadReport& r) {
    return "missing " + std::to_string(r.missing.size());
  });
  io::set_load_hint("throws",
                    [](nn::Module&, const io::Checkpoint&, const io::LoadReport&) -> std::string {
                      throw Error("ignored");
                    });
  BOOST_TEST(
      contains(error_of<io::CheckpointError>([&] { io::load_into(*plain, c); }), "\nhint: missing 1\n"));
  io::set_load_hint("test", nullptr);
  io::set_load_hint("throws", nullptr);
  BOOST_TEST(!contains(error_of<io::CheckpointError>([&] { io::load_into(*plain, c); }), "hint:"));
}

BOOST_AUTO_TEST_SUITE_END()
