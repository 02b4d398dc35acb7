// convert over a captured graph: the quantization of every value follows the data flow,
// whatever the module tree looks like (convert.h). The int8 layers are built by convert.cpp's
// helpers (detail/convert.h), shared with the Sequential walk.
#include <algorithm>
#include <tuple>
#include <unordered_map>

#include "framework/nn/basic.h"
#include "framework/nn/graph.h"
#include "modules/quant/convert.h"
#include "modules/quant/detail/convert.h"
#include "modules/quant/dynamic_quantized_linear.h"
#include "modules/quant/functional.h"
#include "modules/quant/qat_layers.h"
#include "modules/quant/quantized_layers.h"
#include "modules/quant/stubs.h"

namespace qat::quant {

namespace {

using detail::activation_quant;
using detail::Flow;

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
    id = g.skip_identities(id);  // an absorbed module stands for the layer it was fused into
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

  int first_dynamic_input(const nn::GraphNode& n) const {
    for (int in : n.inputs)
      if (input_flow(in).dynamic) return in;
    return -1;
  }

  // Float values a dynamic quantizer produced reach a module or op other than the Linear that
  // quantizes them: only shape changes that keep the first dimension (the rows) let them pass.
  Flow dynamic_pass(int id, int din) {
    const nn::GraphNode& n = node(id);
    const Flow in = input_flow(din);
    const Shape& from = node(din).shape;
    const bool keeps_rows = in.dynamic->granularity == Granularity::PerTensor ||
                            (n.shape.rank() >= 1 && from.rank() >= 1 && n.shape[0] == from[0]);
    const bool shape_only =
        n.type == "reshape" || n.type == "Flatten" || n.type == "Identity" || n.type == "Dropout";
    QAT_REQUIRE(shape_only && keeps_rows && n.inputs.size() == 1, "convert", label(id),
                " reads dynamically quantized values from ", label(din),
                ": after convert the next Linear quantizes them on the fly from the range of its own "
                "input rows, so only reshapes that keep the rows (Flatten, Identity, Dropout) may "
                "come between (fuse a ReLU into the layer before)");
    return in;
  }

  Flow op(int id) {
    const nn::GraphNode& n = node(id);
    if (const int din = first_dynamic_input(n); din >= 0) return dynamic_pass(id, din);
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
    const int din = first_dynamic_input(n);
    if (auto* stub = dynamic_cast<QuantStub*>(m); stub && detail::is_dynamic(stub->quantizer())) {
      out = detail::dynamic_flow(stub->quantizer(), n.name);  // the next layer quantizes on the fly
      replacement = std::make_shared<nn::Identity>();
    } else if (auto* stub = dynamic_cast<QuantStub*>(m)) {
      if (stub->quantizer()) {
        out = activation_quant(stub->quantizer(), n.name);
        replacement = std::make_shared<Quantize>(*out);
      } else {
        out = in;
      }
    } else if (n.type == "DeQuantStub") {
      if (in.dynamic)
        replacement = std::make_shared<DynamicQuantDequant>(*in.dynamic);
      else
        replacement = std::make_shared<Dequantize>();
    } else if (auto* layer = dynamic_cast<QatLayer*>(m);
               layer && layer->has_quantizers() && detail::needs_dynamic(*layer, in)) {
      std::tie(replacement, out) = detail::dynamic_layer(*layer, in, n.name);
      weighted = true;
    } else if (din >= 0) {
      if (n.type == "Dropout") replacement = std::make_shared<nn::Identity>();
      out = dynamic_pass(id, din);
    } else if (auto* layer = dynamic_cast<QatLayer*>(m); layer && layer->has_quantizers()) {
      QAT_REQUIRE(in, "convert", "layer '", n.name, "' receives a float input (from ",
                  n.inputs.empty() || n.inputs[0] < 0 ? std::string("a constant") : label(n.inputs[0]),
                  "); put a QuantStub before it");
      std::tie(replacement, out) = detail::int8_layer(*layer, *in, n.name);
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
                                    n.type == "BatchNorm2d" || n.type == "BatchNorm1d"
                                        ? " (fuse it into the conv / linear before it)"
                                        : "",
                                    "; end the quantized region with a DeQuantStub before it"));
  }

  void decide(int id, nn::ModulePtr replacement, const Flow& in, bool weighted) {
    const nn::GraphNode& n = node(id);
    auto [it, first] = decided.try_emplace(n.module, Decision{replacement, in, id});
    if (first) return;
    const Decision& d = it->second;
    const bool same_kind = (d.replacement == nullptr) == (replacement == nullptr) &&
                           d.input.has_value() == in.has_value() &&
                           d.input.dynamic.has_value() == in.dynamic.has_value();
    const bool same_input = !weighted || ((!in || same_quant(*d.input, *in)) &&
                                          (!in.dynamic || d.input.dynamic->str() == in.dynamic->str()));
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
  detail::RequireCalibrated guard(options.require_calibrated);
  detail::require_prepared(model);
  const nn::Graph g = nn::trace(model, example_input);
  GraphConverter c(model, g);
  c.run();  // everything is checked and built before the model changes
  c.apply();
  c.link_layouts();
  model.eval();
  return c.report;
}

}  // namespace qat::quant
