#include "modules/quant/prepare.h"

#include <algorithm>
#include <functional>
#include <set>
#include <sstream>
#include <tuple>
#include <unordered_map>

#include "framework/nn/basic.h"
#include "framework/nn/graph.h"
#include "framework/nn/sequential.h"
#include "modules/quant/functional.h"
#include "modules/quant/checkpoint_meta.h"  // registers the load hints wherever prepare_qat links
#include "modules/quant/detail/fusion.h"
#include "modules/quant/qat_layers.h"
#include "modules/quant/stubs.h"

namespace qat::quant {

namespace {

std::string join(const std::string& prefix, const std::string& name) {
  return prefix.empty() ? name : prefix + "." + name;
}

std::shared_ptr<Quantizer> build(const std::optional<QuantizerConfig>& c, const Shape& shape,
                                 const std::string& label) {
  if (!c) return nullptr;
  auto q = make_quantizer(*c, shape);
  q->set_label(label);
  return q;
}

std::string describe(const std::shared_ptr<Quantizer>& q) { return q ? q->spec().str() : "float"; }

// Child swaps that can be undone: a failed prepare_qat leaves the model as it was.
class Transaction {
 public:
  void replace(nn::Module* parent, const std::string& name, nn::ModulePtr module) {
    undo_.push_back({parent, name, parent->child(name)});
    parent->replace_child(name, std::move(module));
  }
  void rollback() {
    for (auto it = undo_.rbegin(); it != undo_.rend(); ++it) it->parent->replace_child(it->name, it->module);
    undo_.clear();
  }
  /// The modules taken out of the model (for the stale-reference checks).
  std::vector<std::pair<std::string, nn::ModulePtr>> replaced() const {
    std::vector<std::pair<std::string, nn::ModulePtr>> out;
    for (const auto& u : undo_) out.emplace_back(u.name, u.module);
    return out;
  }

 private:
  std::vector<detail::Replacement> undo_;
};

// The registry's kind for a layer: fused float layers resolve as the layer they started from.
std::string registry_type(const nn::Module& m) {
  if (dynamic_cast<const QuantLinear*>(&m) || dynamic_cast<const LinearBn1d*>(&m)) return "Linear";
  if (dynamic_cast<const QatLayer*>(&m)) return "Conv2d";
  return m.type_name();
}

// Pass-through modules and ops: an int8 value stays int8 through them (convert has int8 versions).
bool passes_quantized(const nn::GraphNode& n) {
  return detail::keeps_grid(n) || (n.kind == nn::GraphNode::Kind::Module &&
                                   (n.type == "AvgPool2d" || n.type == "AdaptiveAvgPool2d"));
}

struct Planner {
  nn::Module& model;
  const QConfigRegistry& registry;
  PrepareReport report;
  std::set<std::string> used_rules;
  // Functional ops get their quantizer only once everything else succeeded (it cannot be undone).
  std::vector<std::pair<std::shared_ptr<FloatFunctional>, std::shared_ptr<Quantizer>>> functional;
  std::set<const nn::Module*> quantized_functional;

  void reject_prepared() {
    for (auto& [name, m] : model.named_modules()) {
      const auto* layer = dynamic_cast<const QatLayer*>(m);
      const auto* stub = dynamic_cast<const QuantStub*>(m);
      const auto* fn = dynamic_cast<const FloatFunctional*>(m);
      const bool prepared = (layer && layer->has_quantizers()) || (stub && stub->quantizer()) ||
                            (fn && fn->quantizer());
      QAT_REQUIRE(!prepared, "prepare_qat", "module '", name, "' is an already prepared ", m->type_name(),
                  " (the model was prepared before)");
    }
  }

  // Plans the quantized replacement of every quantizable module (after fusion).
  // absorbed: fused layer name -> (absorbed module names, "Conv2d+BatchNorm2d+ReLU")
  using Absorbed = std::map<std::string, std::pair<std::vector<std::string>, std::string>>;
  void plan_layers(Transaction& tx, const Absorbed& absorbed) {
    std::vector<detail::Replacement> swaps;
    for (auto& [prefix, parent] : model.named_modules()) {
      for (const auto& [name, child] : parent->named_children()) {
        const std::string full = join(prefix, name), type = child->type_name();
        auto layer = std::dynamic_pointer_cast<QatLayer>(child);
        auto fn = std::dynamic_pointer_cast<FloatFunctional>(child);
        const bool stub = type == "QuantStub";
        if (type != "Linear" && type != "Conv2d" && !layer && !fn && !stub) continue;
        const std::string kind = registry_type(*child);
        const auto res = registry.resolve(full, kind);
        used_rules.insert(res.rule);
        PreparedLayer row{full, type, "(float)", res.config, res.rule, "-", "float", {}};
        if (auto it = absorbed.find(full); it != absorbed.end())
          std::tie(row.absorbed, row.from_type) = it->second;
        if (res.config == "skip") {
          if (layer) row.to_type = type;  // fused, float
          report.layers.push_back(row);
          continue;
        }
        const QConfig& cfg = registry.get(res.config);
        try {
          nn::ModulePtr module;
          if (stub) {
            auto act = build(cfg.activation, Shape{1}, full + ".activation_post_process");
            module = std::make_shared<QuantStub>(act);
            row.activation = describe(act);
          } else if (fn) {
            auto act = build(cfg.activation, Shape{1}, full + ".activation_post_process");
            row.activation = describe(act);
            row.to_type = type;
            if (act) functional.emplace_back(fn, act), quantized_functional.insert(fn.get());
            report.layers.push_back(row);
            continue;
          } else {
            const Tensor& w = layer ? layer->weight() : child->parameter("weight");
            const std::int64_t out = w.size(0);
            const Shape act_shape = kind == "Linear" ? Shape{1, out} : Shape{1, out, 1, 1};
            auto wq = build(cfg.weight, w.shape(), full + ".weight_fake_quant");
            auto aq = build(cfg.activation, act_shape, full + ".activation_post_process");
            if (layer)
              module = layer->with_quantizers(wq, aq);
            else if (kind == "Linear")
              module = std::make_shared<QuantLinear>(static_cast<const nn::Linear&>(*child), wq, aq);
            else
              module = std::make_shared<QuantConv2d>(static_cast<const nn::Conv2d&>(*child), wq, aq);
            row.weight = describe(wq);
            row.activation = describe(aq);
          }
          row.to_type = module->type_name();
          swaps.push_back({parent, name, module});
          report.layers.push_back(row);
        } catch (const Error& e) {
          throw Error(qat::detail::concat("prepare_qat: layer '", full, "' (", row.from_type, "), config '",
                                     res.config, "' (", res.rule, "): ", e.what()));
        }
      }
    }
    for (const auto& s : swaps) tx.replace(s.parent, s.name, s.module);
  }

  void check_rules(bool strict) {
    for (const std::string& rule : registry.rules())
      if (!used_rules.count(rule)) report.unmatched_rules.push_back(rule);
    if (report.unmatched_rules.empty()) return;
    std::string list;
    for (const auto& r : report.unmatched_rules) list += (list.empty() ? "" : ", ") + r;
    QAT_REQUIRE(!strict, "prepare_qat", "registry rules that match no quantizable module: ", list,
                " (check the names, globs and types against the model's summary())");
    report.warnings.push_back("registry rules that match no quantizable module: " + list);
  }

  // Without a graph, Conv2d followed by BatchNorm2d among the children of a custom module may
  // be a conv-bn run that positional fusion cannot see.
  void warn_unfused_siblings() {
    for (auto& [prefix, parent] : model.named_modules()) {
      if (dynamic_cast<nn::Sequential*>(parent)) continue;
      const auto& kids = parent->named_children();
      for (std::size_t i = 0; i + 1 < kids.size(); ++i)
        if (kids[i].second->type_name() == "Conv2d" && kids[i + 1].second->type_name() == "BatchNorm2d")
          report.warnings.push_back(qat::detail::concat(
              "'", join(prefix, kids[i + 1].first), "' (BatchNorm2d) after '", join(prefix, kids[i].first),
              "' in ", parent->type_name(),
              " is not fused and stays float: pass an example input to prepare_qat to fuse from the graph, "
              "or fuse it with PrepareOptions::fuse_groups"));
    }
  }

  // Checks the prepared model's graph: no stale modules, no quantized layer called on two
  // different inputs; warns about float work between quantized values.
  void check_graph(const nn::Graph& g, const Transaction& tx) {
    std::unordered_map<const nn::Module*, std::string> replaced;
    for (const auto& [name, m] : tx.replaced()) replaced.emplace(m.get(), name);
    std::vector<bool> quantized(g.nodes.size(), false);
    auto name_of = [&](int id) {
      id = g.skip_identities(id);  // an absorbed module stands for the layer it was fused into
      const nn::GraphNode& n = g.nodes[static_cast<std::size_t>(id)];
      return n.kind == nn::GraphNode::Kind::Op ? "op '" + n.type + "'" : "'" + n.name + "'";
    };
    for (std::size_t i = 0; i < g.nodes.size(); ++i) {
      const nn::GraphNode& n = g.nodes[i];
      if (!n.atomic_level || n.container || n.kind == nn::GraphNode::Kind::Input) continue;
      if (n.name == "<not in model>") {
        auto it = replaced.find(n.module);
        const std::string what = it == replaced.end() ? std::string("a module that is not part of the model")
                                                      : "the replaced module '" + it->second + "' (" +
                                                            n.type + ")";
        throw Error(qat::detail::concat(
            "prepare_qat: the forward (in ", g.scope_of(static_cast<int>(i)), ") still calls ", what,
            " through a pointer kept before prepare_qat, so it would train in float: hold children as "
            "nn::Child (register_child) or call them through child(name)"));
      }
      std::vector<int> q_inputs;
      for (int in : n.inputs)
        if (in >= 0 && quantized[static_cast<std::size_t>(in)]) q_inputs.push_back(in);
      const auto* layer = dynamic_cast<const QatLayer*>(n.module);
      const auto* stub = dynamic_cast<const QuantStub*>(n.module);
      if (layer) {
        const std::vector<int> calls = g.calls(n.module);
        for (int c : calls)
          QAT_REQUIRE(g.nodes[static_cast<std::size_t>(c)].inputs == n.inputs, "prepare_qat", "'", n.name,
                      "' (", n.type, ") is called ", calls.size(),
                      " times on different inputs: a quantized layer has one input "
                      "range; use one module per call");
        if (q_inputs.empty() && layer->weight_fake_quant())
          report.warnings.push_back(qat::detail::concat("'", n.name, "' (", n.type,
                                                   ") receives a float input: put a QuantStub before it"));
        quantized[i] = layer->activation_fake_quant() != nullptr;
      } else if (stub) {
        quantized[i] = stub->quantizer() != nullptr;
      } else if (quantized_functional.count(n.module)) {
        quantized[i] = true;
      } else if (n.type == "DeQuantStub") {
        quantized[i] = false;
      } else if (!q_inputs.empty()) {
        if (passes_quantized(n)) {
          quantized[i] = true;
        } else {
          std::string from;
          for (int in : q_inputs) from += (from.empty() ? "" : " and ") + name_of(in);
          const std::string hint =
              n.kind == nn::GraphNode::Kind::Op
                  ? (n.type == "add" || n.type == "mul"
                         ? ": use quant::Add / quant::Mul (an nn::Child<quant::Functional>) so it is "
                           "quantized"
                         : ": it has no int8 version; end the quantized region with a DeQuantStub "
                           "before it")
                  : (n.type == "BatchNorm2d" || n.type == "BatchNorm1d"
                         ? ": it was not fused into the conv / linear before it"
                         : ": it has no int8 version; convert will refuse it");
          report.warnings.push_back(qat::detail::concat(
              "float ", n.kind == nn::GraphNode::Kind::Op ? "" : "module ", name_of(static_cast<int>(i)),
              n.kind == nn::GraphNode::Kind::Op ? " in " + g.scope_of(static_cast<int>(i))
                                                : " (" + n.type + ")",
              " runs on the quantized output of ", from, hint));
        }
      }
    }
  }

  // References to each module from outside the model tree (a shared_ptr member), counted
  // before anything changes: use_count minus the tree's own edges.
  std::unordered_map<const nn::Module*, long> external_references() {
    std::unordered_map<const nn::Module*, long> edges, uses;
    for (auto& [prefix, parent] : model.named_modules())
      for (const auto& [name, child] : parent->named_children()) {
        ++edges[child.get()];
        uses[child.get()] = child.use_count();
      }
    std::unordered_map<const nn::Module*, long> out;
    for (const auto& [m, n] : uses) out[m] = n - edges[m];
    return out;
  }

  // Average pools reading quantized values get their input's qparams on the output (QuantPool).
  void wrap_avg_pools(const nn::Graph& g, Transaction& tx) {
    std::unordered_map<const nn::Module*, std::shared_ptr<Quantizer>> fn_quantizer;
    for (const auto& [fn, q] : functional) fn_quantizer[fn.get()] = q;
    std::unordered_map<const nn::Module*, std::pair<nn::Module*, std::string>> where;
    for (auto& [prefix, parent] : model.named_modules())
      for (const auto& [name, child] : parent->named_children()) where[child.get()] = {parent, name};
    // The quantizer whose grid node `id`'s value lies on (through pass-through modules).
    std::function<std::shared_ptr<Quantizer>(int)> grid = [&](int id) -> std::shared_ptr<Quantizer> {
      if (id < 0) return nullptr;
      const nn::GraphNode& n = g.nodes[static_cast<std::size_t>(id)];
      if (auto* layer = dynamic_cast<const QatLayer*>(n.module)) return layer->activation_fake_quant();
      if (auto* stub = dynamic_cast<const QuantStub*>(n.module)) return stub->quantizer();
      if (dynamic_cast<const QuantPool*>(n.module)) return grid(n.inputs.at(0));
      if (auto it = fn_quantizer.find(n.module); it != fn_quantizer.end()) return it->second;
      return detail::keeps_grid(n) && !n.inputs.empty() ? grid(n.inputs[0]) : nullptr;
    };
    for (std::size_t i = 0; i < g.nodes.size(); ++i) {
      const nn::GraphNode& n = g.nodes[i];
      if (!n.atomic_level || n.kind != nn::GraphNode::Kind::Module ||
          (n.type != "AvgPool2d" && n.type != "AdaptiveAvgPool2d") || g.calls(n.module).size() != 1)
        continue;
      auto q = grid(n.inputs.empty() ? -1 : n.inputs[0]);
      // (a grid with fixed qparams: not block-scaled or dynamic ones, which change per batch)
      if (!q || q->spec().format != Format::Int || q->spec().is_microscaled() || q->spec().dynamic)
        continue;
      const auto& [parent, name] = where.at(n.module);
      tx.replace(parent, name, std::make_shared<QuantPool>(parent->child(name), q));
    }
  }

  // Warns about replaced modules that something outside the model still holds.
  void warn_stale(const Transaction& tx, const std::unordered_map<const nn::Module*, long>& external) {
    std::set<const nn::Module*> seen;
    for (const auto& [name, old] : tx.replaced()) {
      auto it = external.find(old.get());
      if (it == external.end() || it->second <= 0 || !seen.insert(old.get()).second) continue;
      report.warnings.push_back(qat::detail::concat(
          "'", name, "' (", old->type_name(), ") was replaced, but ", it->second,
          " other reference(s) to the old module remain (a shared_ptr member?): calls through them "
          "run the float layer; hold children as nn::Child or call them through child(name)"));
    }
  }
};

PrepareReport prepare(nn::Module& model, const QConfigRegistry& registry, const Tensor* example,
                      const PrepareOptions& options) {
  Planner p{model, registry, {}, {}, {}, {}};
  p.reject_prepared();
  const auto external = p.external_references();
  if (!example && options.fuse) p.warn_unfused_siblings();
  std::vector<FusionGroup> groups;
  if (options.fuse) {
    if (example) {
      std::vector<std::string> notes;
      groups = detail::graph_fusion_groups(nn::trace(model, *example), notes);
      for (auto& n : notes) p.report.warnings.push_back(std::move(n));
    } else {
      groups = detail::sequential_fusion_groups(model);
    }
  }
  // A run whose first layer stays float ("skip") is left as the user wrote it.
  groups.erase(std::remove_if(groups.begin(), groups.end(),
                              [&](const FusionGroup& g) {
                                const std::string type = model.submodule(g[0])->type_name();
                                return registry.resolve(g[0], type).config == "skip";
                              }),
               groups.end());
  groups.insert(groups.end(), options.fuse_groups.begin(), options.fuse_groups.end());
  Transaction tx;
  try {
    std::vector<detail::Replacement> fusion;
    Planner::Absorbed absorbed;
    for (const FusedGroup& f : detail::plan_fusion(model, groups, fusion)) {
      std::string from = model.submodule(f.names[0])->type_name();
      for (std::size_t i = 1; i < f.names.size(); ++i) from += "+" + model.submodule(f.names[i])->type_name();
      absorbed[f.names[0]] = {std::vector<std::string>(f.names.begin() + 1, f.names.end()), from};
    }
    for (const auto& r : fusion) tx.replace(r.parent, r.name, r.module);
    p.plan_layers(tx, absorbed);
    p.check_rules(options.strict);
    if (example) {
      const nn::Graph g = nn::trace(model, *example);
      p.check_graph(g, tx);
      p.wrap_avg_pools(g, tx);
    }
  } catch (...) {
    tx.rollback();
    throw;
  }
  for (auto& [fn, q] : p.functional) fn->set_quantizer(q);
  p.warn_stale(tx, external);
  return p.report;
}

}  // namespace

PrepareReport prepare_qat(nn::Module& model, const QConfigRegistry& registry,
                          const PrepareOptions& options) {
  return prepare(model, registry, nullptr, options);
}

PrepareReport prepare_qat(nn::Module& model, const QConfigRegistry& registry,
                          const Tensor& example_input, const PrepareOptions& options) {
  return prepare(model, registry, &example_input, options);
}

std::map<std::string, std::string> quantization_metadata(nn::Module& model) {
  std::map<std::string, std::string> out;
  for (auto& [name, m] : model.named_modules())
    if (auto* q = dynamic_cast<Quantizer*>(m))
      out["quant." + name] = q->type_name() + " " + q->spec().str();
  return out;
}

std::map<std::string, std::string> PrepareReport::metadata() const {
  std::map<std::string, std::string> out;
  for (const auto& l : layers) out["qconfig." + l.name] = l.config + " (" + l.rule + ")";
  return out;
}

std::string PrepareReport::table() const {
  const std::vector<std::string> head{"layer", "from", "to", "config", "rule", "weight", "activation"};
  std::vector<std::vector<std::string>> rows{head};
  for (const auto& l : layers)
    rows.push_back({l.name, l.from_type, l.to_type, l.config, l.rule, l.weight, l.activation});
  std::vector<std::size_t> width(head.size(), 0);
  for (const auto& r : rows)
    for (std::size_t c = 0; c < r.size(); ++c) width[c] = std::max(width[c], r[c].size());
  std::ostringstream os;
  for (const auto& r : rows) {
    for (std::size_t c = 0; c < r.size(); ++c) {
      os << r[c];
      if (c + 1 < r.size()) os << std::string(width[c] - r[c].size() + 2, ' ');
    }
    os << "\n";
  }
  for (const auto& w : warnings) os << "warning: " << w << "\n";
  return os.str();
}

}  // namespace qat::quant
