#include "onnx/ort_runner.h"

#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

namespace qat::test {
namespace {

namespace fs = std::filesystem;

std::string node_modules() {
  const char* env = std::getenv("QAT_ORT_NODE_MODULES");
  return env != nullptr && *env != '\0' ? env : QAT_ORT_NODE_MODULES;
}

// 'text' for sh, with embedded single quotes escaped.
std::string quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

// Runs `cmd` with stdout and stderr into a temp file; returns the exit status and that text.
std::pair<int, std::string> shell(const std::string& cmd, const std::string& log) {
  const int rc = std::system((cmd + " >" + quote(log) + " 2>&1").c_str());
  std::string text = slurp(log);
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
  return {rc, text};
}

// Unique temp paths for one call, removed on destruction.
struct TempFiles {
  std::string input, output, log;
  TempFiles() {
    static std::atomic<int> n{0};
    const std::string stem = (fs::temp_directory_path() /
                              ("qat_ort_" + std::to_string(::getpid()) + "_" + std::to_string(n++)))
                                 .string();
    input = stem + "_in.bin";
    output = stem + "_out.bin";
    log = stem + ".log";
  }
  ~TempFiles() {
    std::error_code ec;
    for (const auto* p : {&input, &output, &log}) fs::remove(*p, ec);
  }
};

// Raw format: int64 rank, int64 dims[rank], float32 data (little-endian, row-major).
void write_raw(const std::string& path, const Tensor& t) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  const std::int64_t rank = t.dim();
  f.write(reinterpret_cast<const char*>(&rank), sizeof rank);
  for (std::int64_t d : t.shape()) f.write(reinterpret_cast<const char*>(&d), sizeof d);
  f.write(static_cast<const char*>(t.raw_data()), static_cast<std::streamsize>(t.nbytes()));
  QAT_REQUIRE(f.good(), "ort_run", "cannot write the input to ", path);
}

Tensor read_raw(const std::string& path) {
  const std::string bytes = slurp(path);
  const auto fail = [&](const std::string& why) {
    throw Error("ort_run: output " + path + " (" + std::to_string(bytes.size()) + " bytes): " + why);
  };
  std::int64_t rank = 0;
  if (bytes.size() < sizeof rank) fail("no header");
  std::memcpy(&rank, bytes.data(), sizeof rank);
  if (rank < 0 || rank > Shape::kMaxDims) fail("bad rank " + std::to_string(rank));
  const std::size_t header = sizeof(std::int64_t) * static_cast<std::size_t>(1 + rank);
  if (bytes.size() < header) fail("truncated header");
  std::vector<std::int64_t> dims(static_cast<std::size_t>(rank));
  std::memcpy(dims.data(), bytes.data() + sizeof rank, dims.size() * sizeof(std::int64_t));
  for (std::int64_t d : dims)
    if (d < 0) fail("negative dim " + std::to_string(d));
  Tensor out = Tensor::empty(Shape(dims));
  if (bytes.size() != header + out.nbytes())
    fail("shape " + out.shape().str() + " does not match the size");
  std::memcpy(out.data<float>(), bytes.data() + header, out.nbytes());
  return out;
}

}  // namespace

std::string ort_unavailable() {
  static const std::string reason = []() -> std::string {
    if (std::system("command -v node >/dev/null 2>&1") != 0) return "node is not on PATH";
    const std::string dir = node_modules();
    const std::string package = dir + "/onnxruntime-node";
    if (!fs::exists(package + "/package.json"))
      return package + " is absent (run scripts/install-deps.sh or set QAT_ORT_NODE_MODULES)";
    TempFiles tmp;
    const auto [rc, text] =
        shell("node -e " +
                  quote("try { require(process.argv[1]) } catch (e) {"
                        " console.error(e.message.split('\\n')[0]); process.exit(1) }") +
                  " " + quote(fs::absolute(package).string()),
              tmp.log);
    if (rc != 0) return "node cannot load " + package + ": " + text;
    return "";
  }();
  return reason;
}

Tensor ort_run(const std::string& model_path, const Tensor& input, const std::string& optimization,
               std::int64_t batch) {
  require_dtype(input, DType::Float32, "ort_run", "input");
  QAT_REQUIRE(input.device() == Device::CPU, "ort_run", "input must be on the CPU");
  QAT_REQUIRE(optimization == "all" || optimization == "disabled", "ort_run",
              "optimization must be \"all\" or \"disabled\", got \"", optimization, "\"");
  QAT_REQUIRE(batch >= 0, "ort_run", "batch must be >= 0, got ", batch);
  QAT_REQUIRE(batch == 0 || input.dim() >= 1, "ort_run", "batch ", batch,
              " needs an input of rank >= 1, got ", input.shape());
  const std::string why = ort_unavailable();
  QAT_REQUIRE(why.empty(), "ort_run", "ONNX Runtime is unavailable: ", why);

  TempFiles tmp;
  write_raw(tmp.input, input);
  const std::string cmd = "node " + quote(QAT_ORT_SCRIPT) + " " + quote(model_path) + " " +
                          quote(tmp.input) + " " + quote(tmp.output) + " " + optimization + " " +
                          std::to_string(batch) + " " + quote(node_modules());
  const auto [rc, text] = shell(cmd, tmp.log);
  if (rc != 0) throw Error("ort_run: " + model_path + ": " + (text.empty() ? "node failed" : text));
  return read_raw(tmp.output);
}

}  // namespace qat::test
