#include "modules/quant/convert.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <sstream>
#include <tuple>
#include <unordered_map>

#include "framework/nn/basic.h"
#include "framework/nn/graph.h"
#include "modules/quant/functional.h"
#include "framework/nn/sequential.h"
#include "modules/quant/qat_layers.h"
#include "modules/quant/quantized_layers.h"
#include "modules/quant/stubs.h"

namespace qat::quant {

namespace {

using Flow = std::optional<ActivationQuant>;  // quantization of the tensor flowing; nullopt: float

// ConvertOptions::require_calibrated for the convert call running on this thread.
thread_local bool g_require_calibrated = true;
struct RequireCalibrated {
  bool prev = g_require_calibrated;
  explicit RequireCalibrated(bool on) { g_require_calibrated = on; }
  ~RequireCalibrated() { g_require_calibrated = prev; }
};

std::string join(const std::string& prefix, const std::string& name) {
  return prefix.empty() ? name : prefix + "." + name;
}

// An activation quantizer's 8-bit grid as uint8 storage: signed codes shift by 128.
ActivationQuant activation_quant(const std::shared_ptr<Quantizer>& q, const std::string& who) {
  QAT_REQUIRE(q != nullptr, "convert", "layer '", who,
              "' has no output quantizer; the int8 "
              "backend needs quantized outputs (give it an activation config)");
  QAT_REQUIRE(!g_require_calibrated || q->calibrated(), "convert", "layer '", who,
              "': its output quantizer never observed data (train the model, or calibrate it with "
              "quant::calibrate, before convert)");
  const QuantSpec& s = q->spec();
  QAT_REQUIRE(s.format == Format::Int && s.bits <= 8 && s.granularity == Granularity::PerTensor,
              "convert", "layer '", who, "': activation spec ", s.str(),
              " is not supported by the int8 backend (needs a per-tensor integer spec of <= 8 bits)");
  const QParams p = q->qparams();
  const std::int32_t off = s.is_signed ? 128 : 0;
  return {{p.scale.data<float>()[0], p.zero_point.data<std::int32_t>()[0] + off},
          static_cast<std::int32_t>(s.quant_min()) + off,
          static_cast<std::int32_t>(s.quant_max()) + off};
}

// q = clamp(round(w / s_o), qmin, qmax) per output channel, exactly as the fake quantizer.
struct QuantizedWeight {
  Tensor weight, scale;
};

QuantizedWeight quantize_weight(const Tensor& w, const std::shared_ptr<Quantizer>& q,
                                const std::string& who) {
  QAT_REQUIRE(q != nullptr, "convert", "layer '", who,
              "' has a float weight; the int8 backend needs a "
              "weight quantizer");
  QAT_REQUIRE(!g_require_calibrated || q->calibrated(), "convert", "layer '", who,
              "': its weight quantizer never observed the weight (run at least one training or "
              "calibration forward before convert)");
  const QuantSpec& s = q->spec();
  QAT_REQUIRE(s.format == Format::Int && s.bits <= 8 && s.symmetric && s.is_signed &&
                  (s.granularity == Granularity::PerTensor ||
                   (s.granularity == Granularity::PerChannel && w.shape().axis(s.axis, "convert") == 0)),
              "convert", "layer '", who, "': weight spec ", s.str(),
              " is not supported by the int8 "
              "backend (needs signed symmetric per-tensor or per-output-channel, <= 8 bits)");
  const QParams p = q->qparams();
  const std::int64_t O = w.size(0), K = w.numel() / O;
  QuantizedWeight out{Tensor::empty(w.shape(), DType::Int8), Tensor::empty(Shape{O}, DType::Float32)};
  const float* pw = w.data<float>();
  for (std::int64_t o = 0; o < O; ++o) {
    const float scale = p.scale.data<float>()[p.scale.numel() == 1 ? 0 : o];
    QAT_REQUIRE(p.zero_point.data<std::int32_t>()[p.zero_point.numel() == 1 ? 0 : o] == 0, "convert",
                "layer '", who, "': weight zero point must be 0");
    out.scale.data<float>()[o] = scale;
    const float inv = 1.0f / scale, lo = static_cast<float>(s.quant_min()),
                hi = static_cast<float>(s.quant_max());
    for (std::int64_t k = 0; k < K; ++k)
      out.weight.data<std::int8_t>()[o * K + k] =
          static_cast<std::int8_t>(std::clamp(std::nearbyint(pw[o * K + k] * inv), lo, hi));
  }
  return out;
}

// bias_q = round(b / (s_in s_w[o])) in int32 (saturating)
Tensor quantize_bias(const Tensor& b, const Tensor& w_scale, double s_in) {
  if (!b.defined()) return Tensor();
  Tensor q = Tensor::empty(b.shape(), DType::Int32);
  for (std::int64_t o = 0; o < b.numel(); ++o) {
    const double v =
        std::nearbyint(static_cast<double>(b.data<float>()[o]) / (s_in * w_scale.data<float>()[o]));
    q.data<std::int32_t>()[o] = static_cast<std::int32_t>(std::clamp(v, -2147483648.0, 2147483647.0));
  }
  return q;
}

struct Swap {
  nn::Module* parent;
  std::string name;
  nn::ModulePtr module;
};

struct Converter {
  std::vector<Swap> swaps;
  ConvertReport report;

  void record(nn::Module* parent, const std::string& name, const std::string& full,
              const nn::ModulePtr& from, nn::ModulePtr to) {
    report.layers.push_back({full, from->type_name(), to->type_name()});
    swaps.push_back({parent, name, std::move(to)});
  }

  // Converts the children of `parent` in order; returns the flow after them. Quantized
  // layers must sit in Sequential containers: elsewhere their execution order is unknown.
  Flow walk(nn::Module& parent, const std::string& prefix, Flow flow) {
    const bool ordered = dynamic_cast<nn::Sequential*>(&parent) != nullptr;
    for (const auto& [name, child] : parent.named_children()) {
      const std::string full = join(prefix, name), type = child->type_name();
      const auto qat_layer = std::dynamic_pointer_cast<QatLayer>(child);
      const bool quant_layer = std::dynamic_pointer_cast<QuantStub>(child) || type == "DeQuantStub" ||
                               (qat_layer && qat_layer->has_quantizers());
      QAT_REQUIRE(ordered || (!quant_layer && !flow), "convert", "layer '", full, "' is inside ",
                  parent.type_name(),
                  ", which is not a Sequential: its execution order (and so "
                  "its input quantization) is unknown without the graph; call convert(model, "
                  "example_input)");
      if (auto stub = std::dynamic_pointer_cast<QuantStub>(child)) {
        if (!stub->quantizer()) continue;
        const ActivationQuant a = activation_quant(stub->quantizer(), full);
        record(&parent, name, full, child, std::make_shared<Quantize>(a));
        flow = a;
      } else if (type == "DeQuantStub") {
        record(&parent, name, full, child, std::make_shared<Dequantize>());
        flow.reset();
      } else if (auto layer = std::dynamic_pointer_cast<QatLayer>(child); layer && layer->has_quantizers()) {
        require_quantized_input(flow, full);
        auto [q, out] = int8_layer(*layer, *flow, full);
        record(&parent, name, full, child, q);
        flow = out;
      } else if (auto qp = std::dynamic_pointer_cast<QuantPool>(child); qp && flow) {
        nn::ModulePtr inner = qp->pool();
        if (auto avg = std::dynamic_pointer_cast<nn::AvgPool2d>(inner))
          record(&parent, name, full, child, std::make_shared<QuantizedAvgPool2d>(avg->params()));
        else
          record(&parent, name, full, child,
                 std::make_shared<QuantizedAdaptiveAvgPool2d>(
                     std::static_pointer_cast<nn::AdaptiveAvgPool2d>(inner)->output_size()));
      } else if (!child->named_children().empty()) {
        flow = walk(*child, full, flow);  // a container
      } else if (!flow) {
        continue;  // the float region stays as it is
      } else if (type == "ReLU") {
        record(&parent, name, full, child, std::make_shared<QuantizedReLU>());
      } else if (auto pool = std::dynamic_pointer_cast<nn::MaxPool2d>(child)) {
        record(&parent, name, full, child, std::make_shared<QuantizedMaxPool2d>(pool->params()));
      } else if (auto avg = std::dynamic_pointer_cast<nn::AvgPool2d>(child)) {
        record(&parent, name, full, child, std::make_shared<QuantizedAvgPool2d>(avg->params()));
      } else if (auto ada = std::dynamic_pointer_cast<nn::AdaptiveAvgPool2d>(child)) {
        record(&parent, name, full, child, std::make_shared<QuantizedAdaptiveAvgPool2d>(ada->output_size()));
      } else if (type == "Dropout") {
        record(&parent, name, full, child, std::make_shared<nn::Identity>());
      } else if (type != "Flatten" && type != "Identity") {  // shape-only layers pass through
        throw Error(
            detail::concat("convert: layer '", full, "' (", type,
                           ") inside the quantized "
                           "region has no int8 version; end the region with a DeQuantStub before it"));
      }
    }
    return flow;
  }

  // The int8 layer for a QAT layer whose input is quantized as `in`, and its output quantization.
  static std::pair<nn::ModulePtr, ActivationQuant> int8_layer(const QatLayer& layer,
                                                              const ActivationQuant& in,
                                                              const std::string& full) {
    const auto* cb = dynamic_cast<const ConvBn2d*>(&layer);
    const Folded f = cb ? fold(*cb) : Folded{layer.weight(), layer.bias()};
    const QuantizedWeight w = quantize_weight(f.weight, layer.weight_fake_quant(), full);
    const Tensor bias = quantize_bias(f.bias, w.scale, in.quant.scale);
    const ActivationQuant out = activation_quant(layer.activation_fake_quant(), full);
    if (dynamic_cast<const QuantLinear*>(&layer))
      return {std::make_shared<QuantizedLinear>(w.weight, w.scale, bias, in.quant, out, layer.fused_relu()),
              out};
    const Conv2dParams params = cb ? cb->params() : static_cast<const QuantConv2d&>(layer).params();
    return {std::make_shared<QuantizedConv2d>(w.weight, w.scale, bias, in.quant, out, layer.fused_relu(),
                                              params),
            out};
  }

  static void require_quantized_input(const Flow& flow, const std::string& full) {
    QAT_REQUIRE(flow, "convert", "layer '", full, "' receives a float input; put a QuantStub before it");
  }

  // W' = W f, b' = (b - mean) f + beta, f = gamma / sqrt(running_var + eps)
  struct Folded {
    Tensor weight, bias;
  };
  static Folded fold(const ConvBn2d& cb) {
    const nn::BatchNorm2d& bn = *cb.bn();
    const std::int64_t O = cb.weight().size(0), K = cb.weight().numel() / O;
    Folded f{cb.weight().clone(), Tensor::empty(Shape{O}, DType::Float32)};
    for (std::int64_t o = 0; o < O; ++o) {
      const float s = bn.weight().data<float>()[o] /
                      std::sqrt(bn.running_var().data<float>()[o] + static_cast<float>(bn.eps()));
      for (std::int64_t k = 0; k < K; ++k) f.weight.data<float>()[o * K + k] *= s;
      const float b = cb.bias().defined() ? cb.bias().data<float>()[o] : 0.0f;
      f.bias.data<float>()[o] =
          (b - bn.running_mean().data<float>()[o]) * s + bn.bias().data<float>()[o];
    }
    return f;
  }
};

// Whether a Flatten child flattens (N, ...) into (N, rest) (probed on a small tensor).
bool flattens_to_rows(nn::Module& m) {
  const Tensor y = m.forward(Tensor::zeros(Shape{1, 2, 3, 4}));
  return y.shape() == Shape{1, 24};
}

// Channels-last activations inside the quantized region: in each Sequential, a QuantizedConv2d
// followed by only QuantizedReLU / Identity / QuantizedMaxPool2d and then a QuantizedConv2d, or
// a Flatten (to rows) and a QuantizedLinear, hands its output over as (N, H, W, C): the pools
// in between and the consumer read that layout (the linear's weight columns are permuted when
// packed). The outputs are the same values; only the transposes go.
void link_layouts(nn::Module& parent) {
  for (const auto& [name, child] : parent.named_children())
    if (!child->named_children().empty()) link_layouts(*child);
  if (!dynamic_cast<nn::Sequential*>(&parent)) return;
  std::vector<nn::ModulePtr> kids;
  for (const auto& [name, child] : parent.named_children()) kids.push_back(child);
  for (std::size_t i = 0; i < kids.size(); ++i) {
    auto conv = std::dynamic_pointer_cast<QuantizedConv2d>(kids[i]);
    if (!conv) continue;
    std::vector<std::shared_ptr<QuantizedMaxPool2d>> pools;
    std::size_t j = i + 1;
    for (; j < kids.size(); ++j) {
      if (auto pool = std::dynamic_pointer_cast<QuantizedMaxPool2d>(kids[j]))
        pools.push_back(pool);
      else if (kids[j]->type_name() != "QuantizedReLU" && kids[j]->type_name() != "Identity")
        break;
    }
    if (j == kids.size()) continue;
    bool linked = false;
    if (auto next = std::dynamic_pointer_cast<QuantizedConv2d>(kids[j])) {
      next->set_layout(true, next->output_channels_last());
      linked = true;
    } else if (kids[j]->type_name() == "Flatten" && j + 1 < kids.size() && flattens_to_rows(*kids[j])) {
      if (auto fc = std::dynamic_pointer_cast<QuantizedLinear>(kids[j + 1])) {
        fc->set_input_channels_last(conv->weight().size(0));
        linked = true;
      }
    }
    if (!linked) continue;
    conv->set_layout(conv->input_channels_last(), true);
    for (const auto& pool : pools) pool->set_channels_last(true);
  }
}

}  // namespace

namespace {

void require_prepared(nn::Module& model) {
  for (auto& [name, m] : model.named_modules())
    if (dynamic_cast<Quantizer*>(m)) return;
  for (auto& [name, m] : model.named_modules())
    QAT_REQUIRE(!dynamic_cast<QuantizedWeightLayer*>(m) && !dynamic_cast<Quantize*>(m), "convert",
                "the model is converted already ('", name, "' is a ", m->type_name(), ")");
  throw Error(
      "convert: the model has no quantizers: call prepare_qat (then train, or calibrate with "
      "quant::calibrate) before convert");
}

bool same_quant(const ActivationQuant& a, const ActivationQuant& b) {
  return a.quant == b.quant && a.lo == b.lo && a.hi == b.hi;
}

// convert over a captured graph: the flow (int8 quantization or float) of every value follows
// the data, whatever the module tree looks like.
struct GraphConverter {
  nn::Module& model;
  const nn::Graph& g;
  std::vector<Flow> flow;
  // Each module's decision, made at its first call: the replacement and the input flow it was
  // built for (a later call must agree).
  struct Decision {
    nn::ModulePtr replacement;  // null: stays as it is
    Flow input;
    int node;
  };
  std::unordered_map<const nn::Module*, Decision> decided;
  std::unordered_map<const nn::Module*, std::pair<nn::Module*, std::string>> where;
  ConvertReport report;

  GraphConverter(nn::Module& m, const nn::Graph& graph) : model(m), g(graph), flow(graph.nodes.size()) {
    for (auto& [prefix, parent] : model.named_modules())
      for (const auto& [name, child] : parent->named_children()) where[child.get()] = {parent, name};
  }

  const nn::GraphNode& node(int id) const { return g.nodes[static_cast<std::size_t>(id)]; }
  std::string label(int id) const {
    // an absorbed (Identity) module stands for the layer it was fused into
    while (node(id).type == "Identity" && node(id).inputs.size() == 1 && node(id).inputs[0] >= 0)
      id = node(id).inputs[0];
    const nn::GraphNode& n = node(id);
    if (n.kind == nn::GraphNode::Kind::Input) return "the model input";
    if (n.kind == nn::GraphNode::Kind::Op) return "op '" + n.type + "' in " + g.scope_of(id);
    return "'" + n.name + "' (" + n.type + ")";
  }
  Flow input_flow(int in) const { return in < 0 ? Flow() : flow[static_cast<std::size_t>(in)]; }
  int first_quantized_input(const nn::GraphNode& n) const {
    for (int in : n.inputs)
      if (input_flow(in)) return in;
    return -1;
  }

  void run() {
    for (std::size_t i = 0; i < g.nodes.size(); ++i) {
      const nn::GraphNode& n = g.nodes[i];
      if (!n.atomic_level || n.container || n.kind == nn::GraphNode::Kind::Input) continue;
      flow[i] = n.kind == nn::GraphNode::Kind::Op ? op(static_cast<int>(i)) : call(static_cast<int>(i));
    }
  }

  Flow op(int id) {
    const nn::GraphNode& n = node(id);
    const int q = first_quantized_input(n);
    if (q < 0) return Flow();
    if (n.type == "reshape") return input_flow(n.inputs[0]);  // same codes, same quantization
    const bool arith = n.type == "add" || n.type == "mul" || n.type == "sub";
    throw Error(qat::detail::concat(
        "convert: ", label(id), " receives int8 values from ", label(q), " and has no int8 version: ",
        arith ? "use a quantized functional op (quant::Add, quant::Mul through nn::Child<quant::Functional>)"
              : "end the quantized region with a DeQuantStub before it"));
  }

  Flow call(int id) {
    const nn::GraphNode& n = node(id);
    QAT_REQUIRE(n.name != "<not in model>", "convert", "the forward (in ", g.scope_of(id),
                ") calls a ", n.type,
                " that is not part of the model (a pointer kept before prepare_qat or convert?): hold "
                "children as nn::Child");
    nn::Module* m = n.module;
    Flow in = n.inputs.empty() ? Flow() : input_flow(n.inputs[0]);
    const int qin = first_quantized_input(n);
    nn::ModulePtr replacement;
    Flow out;
    bool weighted = false;
    if (auto* stub = dynamic_cast<QuantStub*>(m)) {
      if (stub->quantizer()) {
        out = activation_quant(stub->quantizer(), n.name);
        replacement = std::make_shared<Quantize>(*out);
      } else {
        out = in;
      }
    } else if (n.type == "DeQuantStub") {
      replacement = std::make_shared<Dequantize>();
    } else if (auto* layer = dynamic_cast<QatLayer*>(m); layer && layer->has_quantizers()) {
      QAT_REQUIRE(in, "convert", "layer '", n.name, "' receives a float input (from ",
                  n.inputs.empty() || n.inputs[0] < 0 ? std::string("a constant") : label(n.inputs[0]),
                  "); put a QuantStub before it");
      std::tie(replacement, out) = Converter::int8_layer(*layer, *in, n.name);
      weighted = true;
    } else if (auto* fn = dynamic_cast<FloatFunctional*>(m)) {
      if (fn->quantizer()) {
        for (std::size_t k = 0; k < n.inputs.size(); ++k)
          QAT_REQUIRE(input_flow(n.inputs[k]), "convert", "'", n.name, "' (", n.type, ") input ", k,
                      " is float (from ", n.inputs[k] < 0 ? std::string("a constant") : label(n.inputs[k]),
                      "); all inputs of a quantized op must be quantized");
        out = activation_quant(fn->quantizer(), n.name);
        replacement = fn->quantized(*out);
      } else {
        QAT_REQUIRE(qin < 0, "convert", "'", n.name, "' (", n.type, ") receives int8 values from ",
                    label(qin), " but has no output quantizer (its config is 'skip' or has no activation)");
      }
    } else if (qin >= 0) {
      replacement = pass_through(*m, n, id, qin);
      out = in;
    }
    decide(id, replacement, in, weighted);
    return out;
  }

  // The int8 version of a module the int8 values only pass through.
  nn::ModulePtr pass_through(nn::Module& m, const nn::GraphNode& n, int id, int qin) {
    if (n.type == "ReLU") return std::make_shared<QuantizedReLU>();
    if (auto* pool = dynamic_cast<nn::MaxPool2d*>(&m)) return std::make_shared<QuantizedMaxPool2d>(pool->params());
    if (auto* qp = dynamic_cast<QuantPool*>(&m)) return pass_through(*qp->pool(), n, id, qin);
    if (auto* pool = dynamic_cast<nn::AvgPool2d*>(&m)) return std::make_shared<QuantizedAvgPool2d>(pool->params());
    if (auto* pool = dynamic_cast<nn::AdaptiveAvgPool2d*>(&m))
      return std::make_shared<QuantizedAdaptiveAvgPool2d>(pool->output_size());
    if (n.type == "Dropout") return std::make_shared<nn::Identity>();
    if (n.type == "Flatten" || n.type == "Identity") return nullptr;  // shape only
    QAT_REQUIRE(!dynamic_cast<QuantizedWeightLayer*>(&m) && !dynamic_cast<Quantize*>(&m), "convert",
                "the model is converted already ('", n.name, "' is a ", n.type, ")");
    throw Error(qat::detail::concat("convert: ", label(id), " receives int8 values from ", label(qin),
                                    " and has no int8 version",
                                    n.type == "BatchNorm2d" ? " (fuse it into the conv before it)" : "",
                                    "; end the quantized region with a DeQuantStub before it"));
  }

  void decide(int id, nn::ModulePtr replacement, const Flow& in, bool weighted) {
    const nn::GraphNode& n = node(id);
    auto [it, first] = decided.try_emplace(n.module, Decision{replacement, in, id});
    if (first) return;
    const Decision& d = it->second;
    const bool same_kind = (d.replacement == nullptr) == (replacement == nullptr) && d.input.has_value() == in.has_value();
    const bool same_input = !weighted || !in || same_quant(*d.input, *in);
    QAT_REQUIRE(same_kind && same_input, "convert", "'", n.name, "' (", n.type, ") is called ",
                g.calls(n.module).size(),
                " times with inputs quantized differently (", d.input ? "int8" : "float", " then ",
                in ? "int8" : "float", same_input ? "" : " at another scale or zero point",
                "): its int8 version has one input quantization; use one module per call");
  }

  void apply() {
    // In the order of first calls: the report reads like the forward.
    std::vector<std::pair<int, const nn::Module*>> order;
    for (const auto& [m, d] : decided)
      if (d.replacement) order.emplace_back(d.node, m);
    std::sort(order.begin(), order.end());
    for (const auto& [id, m] : order) {
      const auto& [parent, name] = where.at(m);
      const nn::ModulePtr old = parent->child(name);
      const nn::ModulePtr& q = decided.at(m).replacement;
      report.layers.push_back({node(id).name, old->type_name(), q->type_name()});
      parent->replace_child(name, q);
    }
    if (g.output >= 0 && flow[static_cast<std::size_t>(g.output)])
      report.notes.push_back(
          "the model returns int8 values (uint8 tensors with their quantization): add a DeQuantStub "
          "at the end for float outputs");
  }

  // Channels-last hand-over between int8 convs (see link_layouts): conv -> [ReLU | Identity |
  // MaxPool2d]* -> conv, or -> Flatten/reshape to rows -> Linear, each module called once and
  // each value read once.
  void link_layouts() {
    auto replaced = [&](int id) -> nn::ModulePtr {
      const nn::GraphNode& n = node(id);
      if (n.kind != nn::GraphNode::Kind::Module || g.calls(n.module).size() != 1) return nullptr;
      auto it = decided.find(n.module);
      return it == decided.end() ? nullptr : it->second.replacement;
    };
    auto single_user = [&](int id) {
      const std::vector<int> u = g.users(id);
      return u.size() == 1 && id != g.output ? u[0] : -1;
    };
    for (std::size_t i = 0; i < g.nodes.size(); ++i) {
      auto conv = std::dynamic_pointer_cast<QuantizedConv2d>(replaced(static_cast<int>(i)));
      if (!conv) continue;
      std::vector<std::shared_ptr<QuantizedMaxPool2d>> pools;
      int v = static_cast<int>(i), u = single_user(v);
      for (; u >= 0; v = u, u = single_user(u)) {
        const nn::GraphNode& un = node(u);
        if (un.kind == nn::GraphNode::Kind::Module && g.calls(un.module).size() == 1 &&
            (un.type == "ReLU" || un.type == "Identity")) continue;
        if (auto pool = std::dynamic_pointer_cast<QuantizedMaxPool2d>(replaced(u))) {
          pools.push_back(pool);
          continue;
        }
        break;
      }
      if (u < 0) continue;
      bool linked = false;
      if (auto next = std::dynamic_pointer_cast<QuantizedConv2d>(replaced(u))) {
        next->set_layout(true, next->output_channels_last());
        linked = true;
      } else {
        const nn::GraphNode& un = node(u);
        const Shape& s = node(v).shape;
        const bool to_rows = (un.type == "Flatten" || un.type == "reshape") && s.rank() == 4 &&
                             un.shape == Shape{s[0], s[1] * s[2] * s[3]} &&
                             (un.kind == nn::GraphNode::Kind::Op || g.calls(un.module).size() == 1);
        const int fc_id = to_rows ? single_user(u) : -1;
        if (auto fc = fc_id >= 0 ? std::dynamic_pointer_cast<QuantizedLinear>(replaced(fc_id)) : nullptr) {
          fc->set_input_channels_last(s[1]);
          linked = true;
        }
      }
      if (!linked) continue;
      conv->set_layout(conv->input_channels_last(), true);
      for (const auto& pool : pools) pool->set_channels_last(true);
    }
  }
};

}  // namespace

ConvertReport convert(nn::Module& model, const Tensor& example_input, const ConvertOptions& options) {
  RequireCalibrated guard(options.require_calibrated);
  require_prepared(model);
  const nn::Graph g = nn::trace(model, example_input);
  GraphConverter c(model, g);
  c.run();  // everything is checked and built before the model changes
  c.apply();
  c.link_layouts();
  model.eval();
  return c.report;
}

ConvertReport convert(nn::Module& model, const ConvertOptions& options) {
  RequireCalibrated guard(options.require_calibrated);
  require_prepared(model);
  Converter c;
  c.walk(model, "", std::nullopt);
  for (const Swap& s : c.swaps) s.parent->replace_child(s.name, s.module);
  link_layouts(model);
  model.eval();
  return c.report;
}

std::string ConvertReport::table() const {
  std::size_t w0 = 5, w1 = 4;
  for (const auto& l : layers) w0 = std::max(w0, l.name.size()), w1 = std::max(w1, l.from_type.size());
  std::ostringstream os;
  os << "layer" << std::string(w0 - 3, ' ') << "from" << std::string(w1 - 2, ' ') << "to\n";
  for (const auto& l : layers)
    os << l.name << std::string(w0 - l.name.size() + 2, ' ') << l.from_type
       << std::string(w1 - l.from_type.size() + 2, ' ') << l.to_type << "\n";
  for (const auto& n : notes) os << "note: " << n << "\n";
  return os.str();
}

}  // namespace qat::quant
