#pragma once
// Writing ONNX protobuf for the exporter (export.cpp): element-type codes, raw tensor data, and a
// GraphWriter that adds nodes, attributes and initializers under unique names.
#include <onnx/onnx_pb.h>

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "framework/tensor/tensor.h"
#include "modules/quant/spec.h"

namespace qat::quant::onnx_writer {

/// TensorProto.DataType codes. The FP8 and 4-bit ones are newer than libonnx-dev 1.12's schema
// (ONNX 1.14 and 1.16); the field is a plain int32, so they are written as numbers.
inline constexpr int kFloat = onnx::TensorProto_DataType_FLOAT;
inline constexpr int kUInt8 = onnx::TensorProto_DataType_UINT8;
inline constexpr int kInt8 = onnx::TensorProto_DataType_INT8;
inline constexpr int kUInt16 = onnx::TensorProto_DataType_UINT16;
inline constexpr int kInt16 = onnx::TensorProto_DataType_INT16;
inline constexpr int kInt64 = onnx::TensorProto_DataType_INT64;
inline constexpr int kFloat8E4M3FN = 17;
inline constexpr int kFloat8E5M2 = 19;
inline constexpr int kUInt4 = 21;
inline constexpr int kInt4 = 22;

/// The IR version that goes with an opset (onnx/helper.py VERSION_TABLE).
inline int ir_version(int opset) { return opset >= 21 ? 10 : opset >= 19 ? 9 : 7; }

/// FP8 code of a value that is exactly representable (on the FP8 grid after fake quantization).
std::uint8_t fp8_code(float v, Format format);
/// Elements of `type` as ONNX raw_data (little endian; 4-bit types packed two per byte, the
/// first element in the low nibble).
std::string raw_codes(const std::vector<std::int32_t>& codes, int type);

/// A model's graph being written: every value, node and initializer name is unique.
class GraphWriter {
 public:
  GraphWriter() : graph_(model_proto_.mutable_graph()) {}

 protected:
  std::string unique(const std::string& name) {
    std::string out = name;
    for (int k = 1; !names_.insert(out).second; ++k) out = name + "_" + std::to_string(k);
    return out;
  }

  void add_io(onnx::ValueInfoProto& v, const std::string& name, const Shape& shape, bool dynamic_batch) {
    v.set_name(name);
    auto* t = v.mutable_type()->mutable_tensor_type();
    t->set_elem_type(kFloat);
    auto* s = t->mutable_shape();
    for (int d = 0; d < shape.rank(); ++d) {
      auto* dim = s->add_dim();
      if (d == 0 && dynamic_batch)
        dim->set_dim_param("N");
      else
        dim->set_dim_value(shape[d]);
    }
  }
  onnx::NodeProto& node(const std::string& op, const std::vector<std::string>& in,
                        const std::vector<std::string>& out, const std::string& name) {
    onnx::NodeProto& n = *graph_->add_node();
    n.set_op_type(op);
    n.set_name(unique(name + "/" + op));
    for (const auto& i : in) n.add_input(i);
    for (const auto& o : out) n.add_output(o);
    ops_ += (ops_.empty() ? "" : " ") + op;
    return n;
  }
  static void attr(onnx::NodeProto& n, const std::string& name, std::int64_t v) {
    auto* a = n.add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto_AttributeType_INT);
    a->set_i(v);
  }
  static void attr(onnx::NodeProto& n, const std::string& name, float v) {
    auto* a = n.add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto_AttributeType_FLOAT);
    a->set_f(v);
  }
  static void attr(onnx::NodeProto& n, const std::string& name, const std::vector<std::int64_t>& v) {
    auto* a = n.add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto_AttributeType_INTS);
    for (auto x : v) a->add_ints(x);
  }
  std::string initializer(const std::string& name, int type, const std::vector<std::int64_t>& dims,
                          std::string raw) {
    onnx::TensorProto& t = *graph_->add_initializer();
    t.set_name(name);
    t.set_data_type(type);
    for (auto d : dims) t.add_dims(d);
    t.set_raw_data(std::move(raw));
    return name;
  }
  // A float32 (or int64) tensor as an initializer; `scalar` writes a rank-0 tensor.
  std::string initializer(const std::string& name, const Tensor& t, bool scalar = false) {
    const int type = t.dtype() == DType::Int64 ? kInt64 : kFloat;
    QAT_CHECK(t.dtype() == DType::Float32 || t.dtype() == DType::Int64, "initializer ", name);
    const char* p = t.dtype() == DType::Int64 ? reinterpret_cast<const char*>(t.data<std::int64_t>())
                                              : reinterpret_cast<const char*>(t.data<float>());
    return initializer(name, type, scalar ? std::vector<std::int64_t>{} : t.shape().vec(),
                       std::string(p, p + t.numel() * 4 * (type == kInt64 ? 2 : 1)));
  }
  std::string int64s(const std::string& name, const std::vector<std::int64_t>& v) {
    return initializer(unique(name), Tensor::from_vector(v, Shape{static_cast<std::int64_t>(v.size())}));
  }

  onnx::ModelProto model_proto_;
  onnx::GraphProto* graph_;
  std::set<std::string> names_;
  std::string ops_;  ///< the op types written since it was last cleared (for the report)
};

}  // namespace qat::quant::onnx_writer
