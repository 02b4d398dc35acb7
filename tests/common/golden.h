#pragma once
// Reader for golden-vector files written by tests/golden/golden_format.py (PyTorch 1.13).
// Format, one record per line:
//   case NAME
//   scalar KEY VALUE
//   tensor KEY DTYPE RANK D0 .. Dn-1 : V0 V1 ...     (DTYPE: f32 f64 i64 i32 i8 u8)
//   end
// Floats are written with enough digits to round-trip exactly ("%.9g" / "%.17g").
#include <boost/test/unit_test.hpp>
#include <cstdint>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "framework/tensor/tensor.h"

namespace qat::test {

struct GoldenCase {
  std::string name;
  std::map<std::string, Tensor> tensors;
  std::map<std::string, double> scalars;

  const Tensor& tensor(const std::string& key) const {
    auto it = tensors.find(key);
    if (it == tensors.end())
      throw std::runtime_error("golden case " + name + ": no tensor '" + key + "'");
    return it->second;
  }
  double scalar(const std::string& key) const {
    auto it = scalars.find(key);
    if (it == scalars.end())
      throw std::runtime_error("golden case " + name + ": no scalar '" + key + "'");
    return it->second;
  }
  bool has(const std::string& key) const { return tensors.count(key) || scalars.count(key); }
};

/// Loads tests/<relative_path>. Throws std::runtime_error naming the file and line on bad input.
inline std::vector<GoldenCase> load_golden(const std::string& relative_path) {
  const std::string path = std::string(QAT_TEST_DATA_DIR) + "/" + relative_path;
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot open golden file " + path);
  std::vector<GoldenCase> cases;
  std::string line;
  int lineno = 0;
  auto fail = [&](const std::string& why) {
    throw std::runtime_error(path + ":" + std::to_string(lineno) + ": " + why);
  };
  while (std::getline(in, line)) {
    ++lineno;
    if (line.empty() || line[0] == '#') continue;
    std::istringstream ls(line);
    std::string kind;
    ls >> kind;
    if (kind == "case") {
      cases.emplace_back();
      ls >> cases.back().name;
    } else if (kind == "end") {
      continue;
    } else if (cases.empty()) {
      fail("record before the first 'case'");
    } else if (kind == "scalar") {
      std::string key, value;
      ls >> key >> value;
      cases.back().scalars[key] = std::strtod(value.c_str(), nullptr);
    } else if (kind == "tensor") {
      std::string key, dt, colon;
      int rank = 0;
      ls >> key >> dt >> rank;
      std::vector<std::int64_t> dims(rank);
      for (auto& d : dims) ls >> d;
      ls >> colon;
      if (colon != ":") fail("expected ':' after the shape");
      const Shape shape(dims);
      DType dtype = DType::Float32;  // (each branch sets it, or fails)
      if (dt == "f32")
        dtype = DType::Float32;
      else if (dt == "f64")
        dtype = DType::Float64;
      else if (dt == "i64")
        dtype = DType::Int64;
      else if (dt == "i32")
        dtype = DType::Int32;
      else if (dt == "i8")
        dtype = DType::Int8;
      else if (dt == "u8")
        dtype = DType::UInt8;
      else
        fail("unknown dtype " + dt);
      Tensor t = Tensor::empty(shape, dtype);
      std::string tok;
      for (std::int64_t i = 0; i < shape.numel(); ++i) {
        if (!(ls >> tok)) fail("tensor " + key + " has fewer values than its shape says");
        const double v = std::strtod(tok.c_str(), nullptr);
        switch (dtype) {
          case DType::Float32:
            t.data<float>()[i] = std::strtof(tok.c_str(), nullptr);
            break;
          case DType::Float64:
            t.data<double>()[i] = v;
            break;
          case DType::Int64:
            t.data<std::int64_t>()[i] = std::stoll(tok);
            break;
          case DType::Int32:
            t.data<std::int32_t>()[i] = static_cast<std::int32_t>(std::stol(tok));
            break;
          case DType::Int8:
            t.data<std::int8_t>()[i] = static_cast<std::int8_t>(std::stoi(tok));
            break;
          case DType::UInt8:
            t.data<std::uint8_t>()[i] = static_cast<std::uint8_t>(std::stoi(tok));
            break;
          default:
            break;
        }
      }
      cases.back().tensors[key] = t;
    } else {
      fail("unknown record '" + kind + "'");
    }
  }
  if (cases.empty()) throw std::runtime_error("golden file " + path + " holds no cases");
  return cases;
}

}  // namespace qat::test
