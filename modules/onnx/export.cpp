// QDQ ONNX export over a captured graph (export.h). Each atomic node of nn::trace's graph
// becomes a few ONNX nodes; every value that lies on an integer or FP8 grid in the QAT model is
// the output of a DequantizeLinear in the file, so a runtime sees the Q/DQ pattern around each
// op it can run in integers.
#include "modules/onnx/export.h"

#include "modules/onnx/detail/onnx_writer.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <iomanip>
#include <map>
#include <set>
#include <sstream>
#include <unordered_map>

#include "framework/autograd/grad_mode.h"
#include "framework/io/atomic_file.h"
#include "framework/nn/basic.h"
#include "framework/nn/batchnorm.h"
#include "framework/nn/conv.h"
#include "framework/nn/graph.h"
#include "framework/nn/linear.h"
#include "framework/version.h"
#include "modules/quant/detail/convert.h"
#include "modules/quant/fake_quant.h"
#include "modules/quant/functional.h"
#include "modules/quant/qat_layers.h"
#include "modules/quant/quantized_layers.h"
#include "modules/quant/stubs.h"

namespace qat::quant {

namespace {

using qat::detail::concat;
using namespace onnx_writer;

// How a quantizer's grid is written: its ONNX element type, scale and zero point initializers
// and the Q/DQ attributes.
struct Grid {
  const Quantizer* quantizer = nullptr;
  QuantSpec spec;
  int type = kUInt8;
  int opset = 13;
  Tensor scale, zero_point;  // float32 / int32, param_shape(spec, shape)
  std::string scale_name, zero_point_name;
  int axis = 0;  // per-channel / per-block axis (non-negative)
  // an activation grid narrower than its 8-bit type (e.g. uint7, fbgemm's reduce_range): Clip
  // to [(qmin - z) s, (qmax - z) s] before QuantizeLinear, whose saturation is the type's
  std::string clip_lo, clip_hi;
};

// Index of the scale / zero point that element `i` of a tensor of `shape` uses.
std::int64_t param_index(const Grid& g, const Shape& shape, std::int64_t i) {
  if (g.spec.granularity == Granularity::PerTensor) return 0;
  std::int64_t inner = 1;
  for (int d = g.axis + 1; d < shape.rank(); ++d) inner *= shape[d];
  const std::int64_t len = shape[g.axis], outer = i / (inner * len), l = (i / inner) % len, in = i % inner;
  if (g.spec.granularity == Granularity::PerChannel) return l;
  const std::int64_t blocks = len / g.spec.block_size;
  return (outer * blocks + l / g.spec.block_size) * inner + in;
}

class Exporter : private onnx_writer::GraphWriter {
 public:
  Exporter(nn::Module& model, const nn::Graph& g, const OnnxExportOptions& options)
      : model_(model), g_(g), options_(options), value_(g.nodes.size()), grid_(g.nodes.size(), nullptr) {}

  std::string run() {
    require_quantized();
    onnx::GraphProto& graph = *graph_;
    graph.set_name(model_.type_name());
    names_.insert(options_.input_name);  // no value or initializer takes the graph's names
    names_.insert(options_.output_name);
    for (std::size_t i = 0; i < g_.nodes.size(); ++i) {
      const nn::GraphNode& n = g_.nodes[i];
      if (!n.atomic_level || n.container) continue;
      const int id = static_cast<int>(i);
      if (n.kind == nn::GraphNode::Kind::Input) {
        value_[i] = options_.input_name;
        add_io(*graph.add_input(), options_.input_name, n.shape, options_.dynamic_batch);
        continue;
      }
      ops_.clear();
      if (n.kind == nn::GraphNode::Kind::Op)
        op(id);
      else
        module(id);
      if (!ops_.empty() || n.type != "Identity")  // not the modules fusion absorbed
        report_.layers.push_back({n.kind == nn::GraphNode::Kind::Op ? label(id) : n.name, n.type, ops_});
    }
    QAT_REQUIRE(g_.output >= 0, "export_onnx", "the model's output is not computed from its input");
    node("Identity", {value_[static_cast<std::size_t>(g_.output)]}, {options_.output_name}, "output");
    add_io(*graph.add_output(), options_.output_name, g_.nodes[static_cast<std::size_t>(g_.output)].shape,
           options_.dynamic_batch);

    int opset = 13;
    const Grid* needs = nullptr;
    for (const auto& [q, grid] : grids_)
      if (grid.opset > opset) opset = grid.opset, needs = &grid;
    if (options_.opset != 0) {
      QAT_REQUIRE(options_.opset >= 13, "export_onnx", "options.opset must be 0 (automatic) or >= 13, got ",
                  options_.opset);
      QAT_REQUIRE(options_.opset >= opset, "export_onnx", "options.opset ", options_.opset, " cannot express ",
                  needs ? "'" + needs->quantizer->label() + "' (" + needs->spec.str() + ")" : std::string(),
                  ": it needs opset ", opset);
      opset = options_.opset;
    }
    model_proto_.set_ir_version(ir_version(opset));
    model_proto_.set_producer_name("qat");
    model_proto_.set_producer_version(qat::kVersionString);
    auto* imp = model_proto_.add_opset_import();
    imp->set_domain("");
    imp->set_version(opset);
    report_.opset = opset;
    std::string bytes;
    QAT_CHECK(model_proto_.SerializeToString(&bytes), "export_onnx: protobuf serialization failed");
    report_.bytes = static_cast<std::int64_t>(bytes.size());
    return bytes;
  }

  OnnxExportReport report_;

 private:
  const nn::GraphNode& node_at(int id) const { return g_.nodes[static_cast<std::size_t>(id)]; }
  std::string label(int id) const {
    const nn::GraphNode& n = node_at(id);
    if (n.kind == nn::GraphNode::Kind::Op)
      return "op '" + n.type + "'" + (n.scope >= 0 ? " in " + g_.scope_of(id) : std::string());
    return "'" + n.name + "' (" + n.type + ")";
  }
  // The ONNX value of input k of node `id` (a constant becomes an initializer).
  std::string input(int id, std::size_t k) {
    const nn::GraphNode& n = node_at(id);
    QAT_CHECK(k < n.inputs.size(), "export_onnx: ", label(id), " has no input ", k);
    const int in = n.inputs[k];
    if (in >= 0) return value_[static_cast<std::size_t>(in)];
    const Tensor& c = n.constants[k];
    QAT_REQUIRE(c.defined(), "export_onnx", label(id), " reads a value made outside the traced forward");
    return initializer(unique(base(id) + ".const" + std::to_string(k)), c.to(DType::Float32));
  }
  const Grid* input_grid(int id, std::size_t k = 0) const {
    const int in = node_at(id).inputs.at(k);
    return in < 0 ? nullptr : grid_[static_cast<std::size_t>(in)];
  }
  const Shape& input_shape(int id, std::size_t k = 0) const {
    const int in = node_at(id).inputs.at(k);
    return in < 0 ? node_at(id).constants.at(k).shape() : node_at(in).shape;
  }
  std::string base(int id) const {
    const nn::GraphNode& n = node_at(id);
    return n.kind == nn::GraphNode::Kind::Op ? n.type : n.name.empty() ? std::string("model") : n.name;
  }
  // ---- grids -------------------------------------------------------------------------------
  void require_quantized() {
    bool any = false;
    for (auto& [name, m] : model_.named_modules()) {
      QAT_REQUIRE(!dynamic_cast<const QuantizedWeightLayer*>(m) && !dynamic_cast<const Quantize*>(m) &&
                      !dynamic_cast<const QuantizedFunctional*>(m),
                  "export_onnx", "the model is converted already ('", name, "' is a ", m->type_name(),
                  "): export the QAT model before convert()");
      if (dynamic_cast<const Quantizer*>(m)) any = true;
    }
    QAT_REQUIRE(any, "export_onnx",
                "the model has no quantizers: prepare_qat it (then train or calibrate) before exporting");
  }

  // The grid of quantizer `q` for a tensor of `shape` (made once per quantizer), or null when
  // its fake quantization is off (the value stays float, as in the QAT model).
  const Grid* grid(const std::shared_ptr<Quantizer>& q, const Shape& shape, bool weight, const std::string& who) {
    if (!q || !q->fake_quant_enabled()) return nullptr;
    if (auto it = grids_.find(q.get()); it != grids_.end()) return &it->second;
    const QuantSpec& spec = q->spec();
    const std::string qname = q->label().empty() ? who : q->label();
    QAT_REQUIRE(q->calibrated(), "export_onnx", "quantizer '", qname,
                "' never observed data: train or calibrate (quant::calibrate) the model before exporting");
    Grid g;
    g.quantizer = q.get();
    g.spec = spec;
    QAT_REQUIRE(!spec.is_microscaled(), "export_onnx", "'", qname, "' (", spec.str(),
                ") has no exact ONNX form: QuantizeLinear has no E8M0 / E4M3 block scales computed "
                "from the data (MX, NVFP4)");
    QAT_REQUIRE(!spec.dynamic, "export_onnx", "'", qname, "' (", spec.str(),
                ") is dynamic: its qparams come from each batch (DynamicQuantizeLinear is per-tensor "
                "uint8 only), so the file would not compute the QAT model");
    if (spec.granularity != Granularity::PerTensor) g.axis = shape.axis(spec.axis, "export_onnx");
    if (spec.is_float()) {
      g.type = spec.format == Format::FP8_E4M3 ? kFloat8E4M3FN : kFloat8E5M2;
      g.opset = 19;
    } else if (spec.bits == 8) {
      g.type = spec.is_signed ? kInt8 : kUInt8;
    } else if (spec.bits == 4) {
      g.type = spec.is_signed ? kInt4 : kUInt4;
      g.opset = 21;
    } else if (spec.bits == 16) {
      g.type = spec.is_signed ? kInt16 : kUInt16;
      g.opset = 21;
    } else if (weight && spec.bits < 8) {
      // The fake-quantized weights lie on the narrower grid already: int8 codes hold them exactly.
      g.type = spec.is_signed ? kInt8 : kUInt8;
      report_.notes.push_back(concat("'", qname, "' (", spec.str(), ") is written with int8 codes (ONNX has no ",
                                     spec.bits, "-bit type); the values are the QAT model's"));
    } else if (spec.bits < 8 && spec.granularity == Granularity::PerTensor) {
      g.type = spec.is_signed ? kInt8 : kUInt8;  // clip_lo / clip_hi below
      report_.notes.push_back(concat("'", qname, "' (", spec.str(), ") is written as 8-bit codes behind a Clip to its ",
                                     spec.bits, "-bit range (ONNX has no ", spec.bits, "-bit type)"));
    } else {
      throw Error(concat("export_onnx: '", qname, "' (", spec.str(),
                         ") has no ONNX form: QuantizeLinear has 4-, 8- and 16-bit integer and FP8 types"));
    }
    if (spec.granularity == Granularity::PerBlock) g.opset = std::max(g.opset, 21);
    if (!weight && spec.narrow_range)
      report_.notes.push_back(concat("'", qname, "' (", spec.str(),
                                     ") is narrow-range: ONNX's QuantizeLinear clamps at the type's full range, "
                                     "one step lower for values below the range"));
    const QParams p = q->qparams();
    g.scale = p.scale.to(DType::Float32);
    g.zero_point = p.zero_point.to(DType::Int32);
    const bool per_tensor = spec.granularity == Granularity::PerTensor;
    QAT_REQUIRE(!per_tensor || g.scale.numel() == 1, "export_onnx", "quantizer '", qname, "' is per tensor but has ",
                g.scale.numel(), " scales");
    g.scale_name = initializer(unique(qname + ".scale"), g.scale, per_tensor);
    std::vector<std::int32_t> zp(static_cast<std::size_t>(g.zero_point.numel()));
    for (std::size_t i = 0; i < zp.size(); ++i)
      zp[i] = spec.is_float() ? 0 : g.zero_point.data<std::int32_t>()[i];
    g.zero_point_name = initializer(unique(qname + ".zero_point"), g.type,
                                    per_tensor ? std::vector<std::int64_t>{} : g.zero_point.shape().vec(),
                                    raw_codes(zp, g.type));
    if (!weight && !spec.is_float() && spec.bits < 8) {
      const float s = g.scale.data<float>()[0];
      const auto z = static_cast<float>(zp[0]);
      auto bound = [&](std::int64_t q, const char* which) {
        const Tensor v = Tensor::full(Shape{1}, (static_cast<float>(q) - z) * s);
        return initializer(unique(qname + which), v, true);
      };
      g.clip_lo = bound(spec.quant_min(), ".clip_min");
      g.clip_hi = bound(spec.quant_max(), ".clip_max");
    }
    return &grids_.emplace(q.get(), std::move(g)).first->second;
  }

  void qdq_attrs(onnx::NodeProto& n, const Grid& g) {
    if (g.spec.granularity == Granularity::PerTensor) return;
    attr(n, "axis", static_cast<std::int64_t>(g.axis));
    if (g.spec.granularity == Granularity::PerBlock) attr(n, "block_size", g.spec.block_size);
  }
  // x -> QuantizeLinear -> DequantizeLinear; returns the dequantized value.
  std::string qdq(const std::string& x, const Grid& g, const std::string& name) {
    const std::string q = unique(name + "_quantized"), dq = unique(name + "_dequantized");
    std::string in = x;
    if (!g.clip_lo.empty()) {
      in = unique(name + "_clipped");
      node("Clip", {x, g.clip_lo, g.clip_hi}, {in}, name + "_clip");
    }
    qdq_attrs(node("QuantizeLinear", {in, g.scale_name, g.zero_point_name}, {q}, name), g);
    qdq_attrs(node("DequantizeLinear", {q, g.scale_name, g.zero_point_name}, {dq}, name), g);
    return dq;
  }

  // A weight, fake-quantized as the QAT layer sees it: float values on `g`'s grid through Q/DQ,
  // or (int8_weights) the codes through DequantizeLinear.
  std::string weight(const Tensor& w, const std::shared_ptr<Quantizer>& q, const std::string& name) {
    const Grid* g = grid(q, w.shape(), true, name + ".weight_fake_quant");
    if (!g) return initializer(unique(name + ".weight"), w);
    Tensor wq;
    {
      NoGradGuard no_grad;
      wq = q->forward(w);  // eval mode: fake quantization only, nothing observed
    }
    if (!options_.int8_weights) return qdq(initializer(unique(name + ".weight"), wq), *g, name + ".weight");
    std::vector<std::int32_t> codes(static_cast<std::size_t>(wq.numel()));
    const float* v = wq.data<float>();
    for (std::int64_t i = 0; i < wq.numel(); ++i) {
      const std::int64_t p = param_index(*g, wq.shape(), i);
      const float s = g->scale.data<float>()[p];
      if (g->spec.is_float())
        codes[static_cast<std::size_t>(i)] = fp8_code(round_to_fp8(v[i] / s, g->spec.format), g->spec.format);
      else
        codes[static_cast<std::size_t>(i)] = static_cast<std::int32_t>(std::nearbyint(v[i] / s)) +
                                             g->zero_point.data<std::int32_t>()[p];
    }
    const std::string init =
        initializer(unique(name + ".weight_quantized"), g->type, wq.shape().vec(), raw_codes(codes, g->type));
    const std::string dq = unique(name + ".weight_dequantized");
    qdq_attrs(node("DequantizeLinear", {init, g->scale_name, g->zero_point_name}, {dq}, name + ".weight"), *g);
    return dq;
  }

  // ---- module calls and ops ------------------------------------------------------------------
  void set(int id, std::string value, const Grid* grid) {
    value_[static_cast<std::size_t>(id)] = std::move(value);
    grid_[static_cast<std::size_t>(id)] = grid;
  }
  // Output of a quantizer `q` applied to `x` (or x itself when q is off).
  void quantized_output(int id, const std::string& x, const std::shared_ptr<Quantizer>& q, const std::string& who) {
    const Grid* g = grid(q, node_at(id).shape, false, who);
    set(id, g ? qdq(x, *g, base(id)) : x, g);
  }
  // An op whose output lies on its input's grid (ReLU, max pool, reshape): quantized again with
  // the same scale and zero point, so the next integer op reads a DequantizeLinear (exact).
  void keep_grid(int id, const std::string& y) {
    const Grid* g = input_grid(id);
    set(id, g ? qdq(y, *g, base(id)) : y, g);
  }

  void module(int id) {
    const nn::GraphNode& n = node_at(id);
    nn::Module* m = n.module;
    QAT_REQUIRE(n.name != "<not in model>", "export_onnx", "the forward (in ", g_.scope_of(id), ") calls a ", n.type,
                " that is not part of the model (a pointer kept before prepare_qat?): hold children as nn::Child");
    const std::string name = base(id);
    if (auto* stub = dynamic_cast<QuantStub*>(m)) return quantized_output(id, input(id, 0), stub->quantizer(), name);
    if (auto* q = dynamic_cast<Quantizer*>(m)) {
      const auto owner = find_shared(q);
      return quantized_output(id, input(id, 0), owner, name);
    }
    if (n.type == "DeQuantStub" || n.type == "Identity" || n.type == "Dropout")
      return set(id, input(id, 0), input_grid(id));
    if (auto* layer = dynamic_cast<QatLayer*>(m)) return qat_layer(id, *layer);
    if (auto* fn = dynamic_cast<FloatFunctional*>(m)) return functional(id, *fn);
    if (auto* qp = dynamic_cast<QuantPool*>(m)) {
      const std::string y = pool(id, *qp->pool());
      return quantized_output(id, y, qp->input_quantizer(), name);
    }
    if (n.type == "ReLU") return keep_grid(id, unary("Relu", id));
    if (dynamic_cast<nn::MaxPool2d*>(m)) return keep_grid(id, pool(id, *m));
    if (dynamic_cast<nn::AvgPool2d*>(m) || dynamic_cast<nn::AdaptiveAvgPool2d*>(m))
      return set(id, pool(id, *m), nullptr);  // float in the QAT model too (no QuantPool)
    if (n.type == "Flatten") return keep_grid(id, reshape(id));
    if (auto* fc = dynamic_cast<nn::Linear*>(m)) {
      const auto [w, b] = params(*fc, [&] {
        return Params{initializer(unique(name + ".weight"), fc->weight()), bias(fc->bias(), name)};
      });
      return set(id, gemm(id, input(id, 0), w, b, name), nullptr);
    }
    if (auto* conv = dynamic_cast<nn::Conv2d*>(m)) {
      const auto [w, b] = params(*conv, [&] {
        return Params{initializer(unique(name + ".weight"), conv->weight()), bias(conv->bias(), name)};
      });
      return set(id, conv2d(input(id, 0), w, b, conv->params(), conv->weight().shape(), name), nullptr);
    }
    if (auto* bn = dynamic_cast<nn::BatchNorm*>(m)) return set(id, batch_norm(id, *bn), nullptr);
    throw Error(concat(
        "export_onnx: ", label(id),
        " has no ONNX form; supported: QAT layers, "
        "quantizers and stubs, quant::Add/AddReLU/Mul/Cat, ReLU, MaxPool2d, AvgPool2d, "
        "AdaptiveAvgPool2d, Flatten, Dropout, Identity, Linear, Conv2d, BatchNorm1d, BatchNorm2d"));
  }

  // The shared_ptr owning quantizer `q` (a quantizer called directly as a module).
  std::shared_ptr<Quantizer> find_shared(Quantizer* q) {
    for (auto& [prefix, parent] : model_.named_modules())
      for (const auto& [name, child] : parent->named_children())
        if (child.get() == q) return std::dynamic_pointer_cast<Quantizer>(child);
    throw Error(concat("export_onnx: quantizer '", q->label(), "' is not part of the model"));
  }

  void qat_layer(int id, QatLayer& layer) {
    const std::string name = base(id);
    const auto* cb = dynamic_cast<const ConvBn2d*>(&layer);
    const auto* bnl = dynamic_cast<const BnFoldedLayer*>(&layer);
    const auto [w, b] = params(layer, [&] {
      const detail::Folded f = bnl ? detail::fold(*bnl) : detail::Folded{layer.weight(), layer.bias()};
      return Params{weight(f.weight, layer.weight_fake_quant(), name), bias(f.bias, name)};
    });
    std::string y;
    if (dynamic_cast<const QuantLinear*>(&layer) || dynamic_cast<const LinearBn1d*>(&layer)) {
      y = gemm(id, input(id, 0), w, b, name);
    } else {
      const Conv2dParams& p = cb ? cb->params() : static_cast<const QuantConv2d&>(layer).params();
      y = conv2d(input(id, 0), w, b, p, layer.weight().shape(), name);
    }
    if (layer.fused_relu()) {
      const std::string r = unique(name + "_relu");
      node("Relu", {y}, {r}, name);
      y = r;
    }
    quantized_output(id, y, layer.activation_fake_quant(), name + ".activation_post_process");
  }

  // A layer's weight and bias initializers, written at its first call (a layer called twice
  // reads the same ones).
  struct Params {
    std::string weight, bias;  // bias "" when there is none
  };
  template <class Make>
  Params params(const nn::Module& layer, Make make) {
    auto it = params_.find(&layer);
    if (it == params_.end()) it = params_.emplace(&layer, make()).first;
    return it->second;
  }
  std::string bias(const Tensor& b, const std::string& name) {
    return b.defined() ? initializer(unique(name + ".bias"), b) : std::string();
  }

  std::string gemm(int id, const std::string& x, const std::string& w, const std::string& b, const std::string& name) {
    QAT_REQUIRE(input_shape(id).rank() == 2, "export_onnx", label(id), " reads a rank-", input_shape(id).rank(),
                " input ", input_shape(id), "; Linear layers are written as Gemm on [N, in] inputs");
    std::vector<std::string> in{x, w};
    if (!b.empty()) in.push_back(b);
    const std::string y = unique(name);
    attr(node("Gemm", in, {y}, name), "transB", std::int64_t{1});
    return y;
  }

  std::string conv2d(const std::string& x, const std::string& w, const std::string& b, const Conv2dParams& p,
                     const Shape& wshape, const std::string& name) {
    std::vector<std::string> in{x, w};
    if (!b.empty()) in.push_back(b);
    const std::string y = unique(name);
    onnx::NodeProto& c = node("Conv", in, {y}, name);
    attr(c, "kernel_shape", std::vector<std::int64_t>{wshape[2], wshape[3]});
    attr(c, "strides", std::vector<std::int64_t>{p.stride[0], p.stride[1]});
    attr(c, "pads", std::vector<std::int64_t>{p.padding[0], p.padding[1], p.padding[0], p.padding[1]});
    attr(c, "dilations", std::vector<std::int64_t>{p.dilation[0], p.dilation[1]});
    attr(c, "group", p.groups);
    return y;
  }

  std::string batch_norm(int id, const nn::BatchNorm& bn) {
    const std::string name = base(id);
    const std::int64_t c = bn.num_features();
    const Tensor gamma = bn.weight().defined() ? bn.weight() : Tensor::ones(Shape{c});
    const Tensor beta = bn.bias().defined() ? bn.bias() : Tensor::zeros(Shape{c});
    const std::string y = unique(name);
    attr(node("BatchNormalization",
              {input(id, 0), initializer(unique(name + ".weight"), gamma),
               initializer(unique(name + ".bias"), beta),
               initializer(unique(name + ".running_mean"), bn.running_mean()),
               initializer(unique(name + ".running_var"), bn.running_var())},
              {y}, name),
         "epsilon", static_cast<float>(bn.eps()));
    return y;
  }

  std::string pool(int id, nn::Module& m) {
    const std::string name = base(id), y = unique(name);
    const Shape& in = input_shape(id);
    if (auto* mp = dynamic_cast<nn::MaxPool2d*>(&m)) {
      pool_attrs(node("MaxPool", {input(id, 0)}, {y}, name), mp->params());
    } else if (auto* ap = dynamic_cast<nn::AvgPool2d*>(&m)) {
      onnx::NodeProto& p = node("AveragePool", {input(id, 0)}, {y}, name);
      pool_attrs(p, ap->params());
      attr(p, "count_include_pad", std::int64_t{ap->params().count_include_pad ? 1 : 0});
    } else if (auto* aap = dynamic_cast<nn::AdaptiveAvgPool2d*>(&m)) {
      const Pair o = aap->output_size();
      if (o[0] == 1 && o[1] == 1) {
        node("GlobalAveragePool", {input(id, 0)}, {y}, name);
      } else {
        QAT_REQUIRE(in.rank() == 4 && in[2] % o[0] == 0 && in[3] % o[1] == 0, "export_onnx", label(id),
                    " pools ", in, " to ", o[0], "x", o[1],
                    ": ONNX has no adaptive pool; only output sizes dividing the input are exported");
        Pool2dParams pp;
        pp.kernel = {in[2] / o[0], in[3] / o[1]};
        pp.stride = pp.kernel;
        pool_attrs(node("AveragePool", {input(id, 0)}, {y}, name), pp);
      }
    } else {
      throw Error(concat("export_onnx: ", label(id), " is not a pool"));
    }
    return y;
  }
  static void pool_attrs(onnx::NodeProto& n, const Pool2dParams& p) {
    const Pair s = p.stride[0] == 0 && p.stride[1] == 0 ? p.kernel : p.stride;
    attr(n, "kernel_shape", std::vector<std::int64_t>{p.kernel[0], p.kernel[1]});
    attr(n, "strides", std::vector<std::int64_t>{s[0], s[1]});
    attr(n, "pads", std::vector<std::int64_t>{p.padding[0], p.padding[1], p.padding[0], p.padding[1]});
  }

  // Reshape to the traced output shape, the batch dimension copied from the input (0).
  std::string reshape(int id) {
    const Shape& in = input_shape(id);
    std::vector<std::int64_t> shape = node_at(id).shape.vec();
    if (!shape.empty() && in.rank() > 0 && shape[0] == in[0]) shape[0] = 0;
    const std::string name = base(id), y = unique(name);
    node("Reshape", {input(id, 0), int64s(name + ".shape", shape)}, {y}, name);
    return y;
  }

  std::string unary(const std::string& op, int id) {
    const std::string name = base(id), y = unique(name);
    node(op, {input(id, 0)}, {y}, name);
    return y;
  }

  void functional(int id, FloatFunctional& fn) {
    const nn::GraphNode& n = node_at(id);
    const std::string name = base(id);
    std::vector<std::string> in;
    for (std::size_t k = 0; k < n.inputs.size(); ++k) in.push_back(input(id, k));
    std::string y = unique(name);
    if (n.type == "Add" || n.type == "AddReLU") {
      node("Add", in, {y}, name);
      if (n.type == "AddReLU") {
        const std::string r = unique(name + "_relu");
        node("Relu", {y}, {r}, name);
        y = r;
      }
    } else if (n.type == "Mul") {
      node("Mul", in, {y}, name);
    } else if (auto* cat = dynamic_cast<Cat*>(&fn)) {
      const int rank = n.shape.rank();
      attr(node("Concat", in, {y}, name), "axis", static_cast<std::int64_t>(cat->dim() < 0 ? cat->dim() + rank : cat->dim()));
    } else {
      throw Error(concat("export_onnx: ", label(id), " has no ONNX form"));
    }
    quantized_output(id, y, fn.quantizer(), name + ".activation_post_process");
  }

  void op(int id) {
    const nn::GraphNode& n = node_at(id);
    static const std::map<std::string, std::string> binary{{"add", "Add"}, {"sub", "Sub"}, {"mul", "Mul"},
                                                           {"div", "Div"}, {"matmul", "MatMul"}};
    static const std::map<std::string, std::string> unaries{{"neg", "Neg"},         {"sigmoid", "Sigmoid"},
                                                            {"tanh", "Tanh"},       {"exp", "Exp"},
                                                            {"log", "Log"}};
    const std::string name = base(id);
    if (auto it = binary.find(n.type); it != binary.end()) {
      const std::string y = unique(name);
      node(it->second, {input(id, 0), input(id, 1)}, {y}, name);
      return set(id, y, nullptr);
    }
    if (auto it = unaries.find(n.type); it != unaries.end()) return set(id, unary(it->second, id), nullptr);
    if (n.type == "relu") return keep_grid(id, unary("Relu", id));
    if (n.type == "reshape") return keep_grid(id, reshape(id));
    if (n.type == "dropout") return set(id, input(id, 0), input_grid(id));
    if (n.type == "linear") {
      const std::string y = unique(name);
      std::vector<std::string> in{input(id, 0), input(id, 1)};
      if (n.inputs.size() > 2) in.push_back(input(id, 2));
      attr(node("Gemm", in, {y}, name), "transB", std::int64_t{1});
      return set(id, y, nullptr);
    }
    if (n.type == "cat") {
      // the axis is the one dimension where the output is the inputs' sum
      int axis = -1, found = 0;
      for (int d = 0; d < n.shape.rank(); ++d) {
        std::int64_t sum = 0;
        bool same = true;
        for (std::size_t k = 0; k < n.inputs.size(); ++k) sum += input_shape(id, k)[d];
        for (std::size_t k = 0; k < n.inputs.size(); ++k)
          for (int e = 0; e < n.shape.rank(); ++e)
            if (e != d && input_shape(id, k)[e] != n.shape[e]) same = false;
        if (same && sum == n.shape[d]) axis = d, ++found;
      }
      QAT_REQUIRE(found == 1, "export_onnx", label(id), ": the concatenation axis is ambiguous for ", n.shape,
                  "; use quant::Cat (it knows its dim)");
      std::vector<std::string> in;
      for (std::size_t k = 0; k < n.inputs.size(); ++k) in.push_back(input(id, k));
      const std::string y = unique(name);
      attr(node("Concat", in, {y}, name), "axis", static_cast<std::int64_t>(axis));
      return set(id, y, nullptr);
    }
    throw Error(concat("export_onnx: ", label(id),
                       " has no ONNX form (an op with attributes the trace does not record, or none in ONNX): "
                       "compute it in a module (nn::ReLU, quant::Add, ...) or outside the exported model"));
  }

  nn::Module& model_;
  const nn::Graph& g_;
  const OnnxExportOptions& options_;
  std::vector<std::string> value_;
  std::vector<const Grid*> grid_;
  std::unordered_map<const Quantizer*, Grid> grids_;
  std::unordered_map<const nn::Module*, Params> params_;
};

// Puts every module in eval mode (quantizers then only fake-quantize) and restores the flags.
class EvalMode {
 public:
  explicit EvalMode(nn::Module& model) {
    for (auto& [name, m] : model.named_modules()) flags_.emplace_back(m, m->is_training());
    model.eval();
  }
  ~EvalMode() {
    for (auto& [m, on] : flags_) m->train(on);
  }
  EvalMode(const EvalMode&) = delete;
  EvalMode& operator=(const EvalMode&) = delete;

 private:
  std::vector<std::pair<nn::Module*, bool>> flags_;
};

}  // namespace

std::string to_onnx(nn::Module& model, const Tensor& example_input, const OnnxExportOptions& options,
                    OnnxExportReport* report) {
  QAT_REQUIRE(!options.input_name.empty() && !options.output_name.empty() && options.input_name != options.output_name,
              "export_onnx", "options.input_name and options.output_name must be distinct and non-empty, got '",
              options.input_name, "' and '", options.output_name, "'");
  EvalMode eval(model);
  const nn::Graph g = nn::trace(model, example_input);
  Exporter e(model, g, options);
  std::string bytes = e.run();
  if (report) *report = std::move(e.report_);
  return bytes;
}

OnnxExportReport export_onnx(nn::Module& model, const Tensor& example_input, const std::string& path,
                             const OnnxExportOptions& options) {
  QAT_REQUIRE(!path.empty(), "export_onnx", "path is empty");
  OnnxExportReport report;
  const std::string bytes = to_onnx(model, example_input, options, &report);
  try {
    io::write_file_atomic(path, bytes);
  } catch (const std::exception& e) {
    throw Error(concat("export_onnx: cannot write '", path, "': ", e.what()));
  }
  return report;
}

std::string OnnxExportReport::table() const {
  std::size_t wn = 4, wt = 4;
  for (const auto& l : layers) wn = std::max(wn, l.name.size()), wt = std::max(wt, l.type.size());
  std::ostringstream os;
  os << std::left << std::setw(static_cast<int>(wn)) << "name" << "  " << std::setw(static_cast<int>(wt)) << "type"
     << "  onnx\n";
  for (const auto& l : layers)
    os << std::setw(static_cast<int>(wn)) << l.name << "  " << std::setw(static_cast<int>(wt)) << l.type << "  "
       << (l.onnx.empty() ? "(none)" : l.onnx) << "\n";
  for (const auto& n : notes) os << "note: " << n << "\n";
  return os.str();
}

}  // namespace qat::quant
