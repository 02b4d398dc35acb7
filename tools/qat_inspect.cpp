// qat-inspect FILE [--xml] [--json]: what a checkpoint holds, without the model that wrote it.
// Header, CRC status, every tensor with its range, metadata with the per-layer quantization
// table, optimizer and training state. Exit status: 0 ok, 1 unreadable or corrupt file (the
// CheckpointError on stderr), 2 usage error.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "framework/io/checkpoint.h"
#include "framework/io/format.h"

namespace {

using namespace qat;

constexpr const char* kUsage =
    "usage: qat-inspect FILE [--xml | --json]\n"
    "  Prints a qat checkpoint: header, CRC status, tensors (dtype, shape, range), metadata and\n"
    "  the per-layer quantization table, optimizer and training state.\n"
    "  --xml   print the payload as a Boost XML archive instead\n"
    "  --json  print the same report as JSON\n"
    "exit status: 0 ok, 1 unreadable or corrupt checkpoint, 2 usage error\n";

// ---- what the file holds --------------------------------------------------------------------

struct TensorStats {
  std::int64_t numel = 0;
  double min = 0, max = 0;  // over the finite values; meaningless when finite == 0
  std::int64_t finite = 0, nan = 0, inf = 0;
  bool integer = false;
};

TensorStats stats_of(const Tensor& t) {
  TensorStats s;
  s.numel = t.numel();
  s.integer = t.dtype() != DType::Float32 && t.dtype() != DType::Float64;
  if (s.numel == 0) return s;
  // int64 goes through int64, not double, so that large values print exactly.
  std::vector<double> v;
  if (s.integer) {
    const auto ints = t.to(DType::Int64).to_vector<std::int64_t>();
    const auto [lo, hi] = std::minmax_element(ints.begin(), ints.end());
    s.min = static_cast<double>(*lo), s.max = static_cast<double>(*hi), s.finite = s.numel;
    return s;
  }
  v = t.to(DType::Float64).to_vector<double>();
  for (const double x : v) {
    if (std::isnan(x)) {
      ++s.nan;
    } else if (std::isinf(x)) {
      ++s.inf;
    } else {
      s.min = s.finite ? std::min(s.min, x) : x;
      s.max = s.finite ? std::max(s.max, x) : x;
      ++s.finite;
    }
  }
  return s;
}

// One quantized layer: "qconfig.<layer>" and the "quant.<layer>.<quantizer>" entries under it.
struct Layer {
  std::string name, config, rule;                          // config "" when no qconfig entry
  std::vector<std::pair<std::string, std::string>> quant;  // local quantizer name -> spec
};

bool starts_with(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }

// Dotted names in model order as far as the names tell: numeric parts compare as numbers
// ("net.2" < "net.10").
bool natural_less(const std::string& a, const std::string& b) {
  std::size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    if (std::isdigit(static_cast<unsigned char>(a[i])) &&
        std::isdigit(static_cast<unsigned char>(b[j]))) {
      std::size_t ie = i, je = j;
      while (ie < a.size() && std::isdigit(static_cast<unsigned char>(a[ie]))) ++ie;
      while (je < b.size() && std::isdigit(static_cast<unsigned char>(b[je]))) ++je;
      const std::string x = a.substr(i, ie - i), y = b.substr(j, je - j);
      if (x.size() != y.size()) return x.size() < y.size();
      if (x != y) return x < y;
      i = ie, j = je;
    } else {
      if (a[i] != b[j]) return a[i] < b[j];
      ++i, ++j;
    }
  }
  return a.size() - i < b.size() - j;
}

// In model order as far as the file tells: by the position of each layer's last tensor (a model's
// buffers, which every quantizer has, are saved in module order after all parameters); layers
// without tensors last, by name.
std::vector<Layer> layers_of(const io::Checkpoint& ckpt) {
  const std::map<std::string, std::string>& metadata = ckpt.metadata;
  std::map<std::string, Layer> layers;
  for (const auto& [key, value] : metadata) {
    if (!starts_with(key, "qconfig.")) continue;
    Layer& l = layers[key.substr(8)];
    l.name = key.substr(8);
    const auto paren = value.find(" (");  // "<config> (<rule>)"
    l.config = value.substr(0, paren);
    if (paren != std::string::npos && value.back() == ')')
      l.rule = value.substr(paren + 2, value.size() - paren - 3);
  }
  for (const auto& [key, value] : metadata) {
    if (!starts_with(key, "quant.")) continue;
    const std::string q = key.substr(6);
    // The longest layer holding it, else its parent module.
    std::string owner;
    bool found = false;
    for (const auto& [name, l] : layers)
      if (starts_with(q, name + ".") && (!found || name.size() > owner.size()))
        owner = name, found = true;
    if (!found) {
      const auto dot = q.rfind('.');
      owner = dot == std::string::npos ? "" : q.substr(0, dot);
      layers[owner].name = owner;
    }
    layers[owner].quant.emplace_back(owner.empty() ? q : q.substr(owner.size() + 1), value);
  }
  std::vector<Layer> out;
  for (auto& [name, l] : layers) out.push_back(std::move(l));
  std::map<std::string, std::size_t> last;
  for (const Layer& l : out)
    for (std::size_t i = 0; i < ckpt.tensors.size(); ++i)
      if (starts_with(ckpt.tensors[i].first, l.name + ".")) last[l.name] = i;
  auto rank = [&](const Layer& l) {
    const auto it = last.find(l.name);
    return it == last.end() ? ckpt.tensors.size() : it->second;
  };
  std::sort(out.begin(), out.end(), [&](const Layer& a, const Layer& b) {
    return rank(a) != rank(b) ? rank(a) < rank(b) : natural_less(a.name, b.name);
  });
  for (auto& l : out)
    std::sort(l.quant.begin(), l.quant.end(),
              [](const auto& a, const auto& b) { return natural_less(a.first, b.first); });
  return out;
}

// "exp_avg" -> how many "<param>.exp_avg" entries.
std::map<std::string, std::size_t> slot_kinds(const NamedTensors& state) {
  std::map<std::string, std::size_t> out;
  for (const auto& [name, t] : state) {
    const auto dot = name.rfind('.');
    ++out[dot == std::string::npos ? name : name.substr(dot + 1)];
  }
  return out;
}

struct Inspection {
  std::string path;
  io::FileHeader header;
  std::string crc_error;  // empty: length and CRC check out
  std::optional<io::Checkpoint> ckpt;
};

std::string read_bytes(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const auto status = fs::status(path, ec);
  if (ec) throw io::CheckpointError(path, "cannot open for reading: " + ec.message());
  if (!fs::is_regular_file(status))
    throw io::CheckpointError(path, "cannot open for reading: not a regular file");
  std::ifstream f(path, std::ios::binary);
  if (!f)
    throw io::CheckpointError(path, std::string("cannot open for reading: ") + std::strerror(errno));
  std::string bytes{std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
  if (f.bad()) throw io::CheckpointError(path, "read failed");
  return bytes;
}

// ---- text output ----------------------------------------------------------------------------

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

std::string hex32(std::uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", v);
  return buf;
}

std::string shape_str(const Shape& s) {
  std::ostringstream os;
  os << s;
  return os.str();
}

// Rows of cells, columns padded to their widest cell, each line indented by `indent`. Cells hold
// names and values from the file: control characters and invalid UTF-8 print escaped, so an
// ESC / OSC sequence or a carriage return in a tensor name never reaches the terminal.
std::string table(std::vector<std::vector<std::string>> rows, const std::string& indent = "  ") {
  for (auto& r : rows)
    for (auto& cell : r) cell = qat::detail::printable(cell);
  std::vector<std::size_t> width;
  for (const auto& r : rows)
    for (std::size_t c = 0; c < r.size(); ++c) {
      if (width.size() <= c) width.push_back(0);
      width[c] = std::max(width[c], r[c].size());
    }
  std::string out;
  for (const auto& r : rows) {
    std::string line = indent;
    for (std::size_t c = 0; c < r.size(); ++c) {
      line += r[c];
      if (c + 1 < r.size()) line += std::string(width[c] - r[c].size() + 2, ' ');
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line + "\n";
  }
  return out;
}

void print_header(std::ostream& os, const Inspection& in) {
  const io::FileHeader& h = in.header;
  os << "checkpoint " << in.path << "\n"
     << table({{"format version", std::to_string(h.format_version)},
               {"written by", "qat " + h.written_by.str()},
               {"archive", std::string(io::archive_kind_name(h.archive)) + " (Boost archive version " +
                               std::to_string(h.archive_version) + ")"},
               {"payload", std::to_string(h.payload_bytes) + " bytes, CRC32 " + hex32(h.payload_crc32)},
               {"CRC", in.crc_error.empty() ? "valid" : "INVALID: " + in.crc_error}});
}

void print_text(std::ostream& os, const Inspection& in) {
  print_header(os, in);
  const io::Checkpoint& c = *in.ckpt;

  std::int64_t elements = 0;
  std::vector<std::vector<std::string>> rows{{"name", "dtype", "shape", "min", "max", ""}};
  for (const auto& [name, t] : c.tensors) {
    const TensorStats s = stats_of(t);
    elements += s.numel;
    std::string flags;
    if (s.nan) flags += "NaN: " + std::to_string(s.nan);
    if (s.inf) flags += std::string(flags.empty() ? "" : ", ") + "Inf: " + std::to_string(s.inf);
    const bool any = s.finite > 0;
    rows.push_back({name, std::string(dtype_name(t.dtype())), shape_str(t.shape()),
                    any ? num(s.min) : "-", any ? num(s.max) : "-", flags});
  }
  os << "\ntensors (" << c.tensors.size() << ", " << elements << " elements)\n" << table(rows);

  std::vector<std::vector<std::string>> meta;
  for (const auto& [key, value] : c.metadata)
    if (!starts_with(key, "qconfig.") && !starts_with(key, "quant.")) meta.push_back({key, value});
  const std::vector<Layer> layers = layers_of(c);
  os << "\nmetadata (" << c.metadata.size() << " entries"
     << (layers.empty() ? "" : "; qconfig.* and quant.* in the layer table") << ")\n"
     << table(meta);

  if (!layers.empty()) {
    std::vector<std::vector<std::string>> lrows{{"layer", "config", "rule", "quantizer", "spec"}};
    for (const auto& l : layers) {
      const std::string config = l.config.empty() ? "-" : l.config, rule = l.rule.empty() ? "-" : l.rule;
      if (l.quant.empty()) lrows.push_back({l.name, config, rule, "-", ""});
      for (std::size_t i = 0; i < l.quant.size(); ++i)
        lrows.push_back(
            {i ? "" : l.name, i ? "" : config, i ? "" : rule, l.quant[i].first, l.quant[i].second});
    }
    os << "\nquantized layers (" << layers.size() << ")\n" << table(lrows);
  }

  os << "\noptimizer";
  if (!c.optimizer) {
    os << ": none\n";
  } else {
    const io::OptimizerState& o = *c.optimizer;
    std::string hyper, slots;
    for (const auto& [k, v] : o.hyperparameters) hyper += (hyper.empty() ? "" : ", ") + k + "=" + num(v);
    for (const auto& [k, n] : slot_kinds(o.state))
      slots += (slots.empty() ? "" : ", ") + k + " x" + std::to_string(n);
    os << "\n"
       << table({{"kind", o.kind},
                 {"hyperparameters", hyper.empty() ? "-" : hyper},
                 {"state", std::to_string(o.state.size()) + " slots" +
                               (slots.empty() ? "" : " (" + slots + ")")}});
  }

  os << "\ntraining state";
  if (!c.training) {
    os << ": none\n";
  } else {
    const io::TrainingState& t = *c.training;
    std::string gens, counters;
    for (const auto& [k, g] : t.generators) gens += (gens.empty() ? "" : ", ") + k;
    for (const auto& [k, v] : t.counters)
      counters += (counters.empty() ? "" : ", ") + k + "=" + std::to_string(v);
    os << "\n"
       << table({{"epoch", std::to_string(t.epoch)},
                 {"global step", std::to_string(t.global_step)},
                 {"generators", gens.empty() ? "-" : gens},
                 {"counters", counters.empty() ? "-" : counters}});
  }
}

// ---- JSON output ----------------------------------------------------------------------------

std::string jstr(const std::string& s) {
  std::string out = "\"";
  for (const unsigned char ch : s) {
    switch (ch) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (ch < 0x20 || ch == 0x7f) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", ch);
          out += buf;
        } else {
          out += static_cast<char>(ch);
        }
    }
  }
  return out + "\"";
}

// The shortest text that reads back as `v`; null for NaN and infinities (JSON has none).
std::string jnum(double v, bool as_float = false) {
  if (!std::isfinite(v)) return "null";
  char buf[32];
  const auto r = as_float ? std::to_chars(buf, buf + sizeof buf, static_cast<float>(v))
                          : std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

template <class Map, class F>
std::string jobject(const Map& m, F value) {
  std::string out = "{";
  for (const auto& [k, v] : m) out += (out.size() > 1 ? ", " : "") + jstr(k) + ": " + value(v);
  return out + "}";
}

void print_json(std::ostream& os, const Inspection& in) {
  const io::FileHeader& h = in.header;
  os << "{\"file\": " << jstr(in.path) << ",\n \"header\": {\"format_version\": " << h.format_version
     << ", \"written_by\": " << jstr(h.written_by.str())
     << ", \"archive\": " << jstr(std::string(io::archive_kind_name(h.archive)))
     << ", \"archive_version\": " << h.archive_version << ", \"payload_bytes\": " << h.payload_bytes
     << ", \"payload_crc32\": " << jstr(hex32(h.payload_crc32))
     << "},\n \"crc\": {\"valid\": " << (in.crc_error.empty() ? "true" : "false");
  if (!in.crc_error.empty()) os << ", \"error\": " << jstr(in.crc_error);
  os << "}";
  if (!in.ckpt) {
    os << "}\n";
    return;
  }
  const io::Checkpoint& c = *in.ckpt;
  os << ",\n \"tensors\": [";
  for (std::size_t i = 0; i < c.tensors.size(); ++i) {
    const auto& [name, t] = c.tensors[i];
    const TensorStats s = stats_of(t);
    const bool f32 = t.dtype() == DType::Float32;  // shortest text that reads back as the float
    std::string shape = "[";
    for (int d = 0; d < t.dim(); ++d) shape += (d ? ", " : "") + std::to_string(t.size(d));
    os << (i ? ",\n   " : "\n   ") << "{\"name\": " << jstr(name)
       << ", \"dtype\": " << jstr(std::string(dtype_name(t.dtype()))) << ", \"shape\": " << shape
       << "], \"numel\": " << s.numel << ", \"min\": " << (s.finite ? jnum(s.min, f32) : "null")
       << ", \"max\": " << (s.finite ? jnum(s.max, f32) : "null") << ", \"nan\": " << s.nan
       << ", \"inf\": " << s.inf << "}";
  }
  os << "],\n \"metadata\": " << jobject(c.metadata, jstr) << ",\n \"layers\": [";
  const std::vector<Layer> layers = layers_of(c);
  for (std::size_t i = 0; i < layers.size(); ++i) {
    const Layer& l = layers[i];
    std::string quant = "{";
    for (const auto& [k, v] : l.quant)
      quant += (quant.size() > 1 ? ", " : "") + jstr(k) + ": " + jstr(v);
    os << (i ? ",\n   " : "\n   ") << "{\"name\": " << jstr(l.name) << ", \"config\": " << jstr(l.config)
       << ", \"rule\": " << jstr(l.rule) << ", \"quantizers\": " << quant << "}}";
  }
  os << "],\n \"optimizer\": ";
  if (c.optimizer) {
    const io::OptimizerState& o = *c.optimizer;
    os << "{\"kind\": " << jstr(o.kind)
       << ", \"hyperparameters\": " << jobject(o.hyperparameters, [](double v) { return jnum(v); })
       << ", \"slots\": " << o.state.size() << ", \"slot_kinds\": "
       << jobject(slot_kinds(o.state), [](std::size_t n) { return std::to_string(n); }) << "}";
  } else {
    os << "null";
  }
  os << ",\n \"training\": ";
  if (c.training) {
    const io::TrainingState& t = *c.training;
    std::string gens = "[";
    for (const auto& [k, g] : t.generators) gens += (gens.size() > 1 ? ", " : "") + jstr(k);
    os << "{\"epoch\": " << t.epoch << ", \"global_step\": " << t.global_step
       << ", \"generators\": " << gens
       << "], \"counters\": " << jobject(t.counters, [](std::int64_t v) { return std::to_string(v); })
       << "}";
  } else {
    os << "null";
  }
  os << "}\n";
}

}  // namespace

int main(int argc, char** argv) {
  std::string path;
  bool xml = false, json = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "-h" || arg == "--help") {
      std::cout << kUsage;
      return 0;
    }
    if (arg == "--xml") {
      xml = true;
    } else if (arg == "--json") {
      json = true;
    } else if (arg.size() > 1 && arg[0] == '-') {
      std::cerr << "qat-inspect: unknown option '" << arg << "'\n" << kUsage;
      return 2;
    } else if (!path.empty()) {
      std::cerr << "qat-inspect: one FILE only (got '" << path << "' and '" << arg << "')\n" << kUsage;
      return 2;
    } else {
      path = arg;
    }
  }
  if (path.empty() || (xml && json)) {
    std::cerr << (path.empty() ? "qat-inspect: no FILE given\n"
                               : "qat-inspect: --xml and --json exclude each other\n")
              << kUsage;
    return 2;
  }

  Inspection in;
  in.path = path;
  std::string bytes;
  try {
    bytes = read_bytes(path);
    in.header = io::decode_header(bytes, path);
  } catch (const std::exception& e) {
    std::cerr << "qat-inspect: " << e.what() << "\n";
    return 1;
  }
  // Length and CRC: on failure the header is still shown, with the error.
  std::string error;
  try {
    io::check_payload(in.header, std::string_view(bytes).substr(io::FileHeader::kSize), path);
  } catch (const io::CheckpointError& e) {
    error = e.what();
    in.crc_error = error.substr(("checkpoint '" + path + "': ").size());  // the problem alone
  }
  if (error.empty()) {
    try {
      in.ckpt = io::from_bytes(bytes, path);
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  if (error.empty() && xml) {
    std::cout << io::to_xml(*in.ckpt);
    return 0;
  }
  if (!xml) {
    if (json)
      print_json(std::cout, in);
    else if (in.ckpt)
      print_text(std::cout, in);
    else
      print_header(std::cout, in);
  }
  if (!error.empty()) {
    std::cout.flush();
    std::cerr << "qat-inspect: " << error << "\n";
    return 1;
  }
  return 0;
}
