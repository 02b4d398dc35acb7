#include "modules/quant/prepare.h"

#include <algorithm>
#include <functional>
#include <sstream>

#include "framework/nn/basic.h"
#include "framework/nn/sequential.h"
#include "modules/quant/qat_layers.h"
#include "modules/quant/stubs.h"

namespace qat::quant {

namespace {

// A planned swap: parent's child `name` becomes `module`; `absorbed` children become Identity.
struct Swap {
  nn::Module* parent;
  std::string name;
  nn::ModulePtr module;
  std::vector<std::string> absorbed;
};

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

}  // namespace

PrepareReport prepare_qat(nn::Module& model, const QConfigRegistry& registry,
                          const PrepareOptions& options) {
  PrepareReport report;
  std::vector<Swap> swaps;
  for (auto& [prefix, parent] : model.named_modules()) {
    const nn::NamedModules children = parent->named_children();
    const bool sequential = dynamic_cast<nn::Sequential*>(parent) != nullptr;
    auto child_type = [&](std::size_t i) {
      return i < children.size() ? children[i].second->type_name() : std::string();
    };
    for (std::size_t i = 0; i < children.size(); ++i) {
      const auto& [name, child] = children[i];
      const std::string full = join(prefix, name), type = child->type_name();
      QAT_REQUIRE(!std::dynamic_pointer_cast<QatLayer>(child), "prepare_qat", "module '", full,
                  "' is already a ", type, " (the model was prepared before)");
      if (type != "Linear" && type != "Conv2d" && type != "QuantStub") continue;
      QAT_REQUIRE(type != "QuantStub" || !static_cast<const QuantStub&>(*child).quantizer(),
                  "prepare_qat", "module '", full,
                  "' is an already prepared QuantStub (the model "
                  "was prepared before)");
      const auto res = registry.resolve(full, type);
      PreparedLayer row{full, type, "(float)", res.config, res.rule, "-", "float"};
      if (res.config == "skip") {
        report.layers.push_back(row);
        continue;
      }
      const QConfig& cfg = registry.get(res.config);
      try {
        Swap swap{parent, name, nullptr, {}};
        if (type == "QuantStub") {
          auto act = build(cfg.activation, Shape{1}, full + ".activation_post_process");
          swap.module = std::make_shared<QuantStub>(act);
          row.to_type = "QuantStub";
          row.activation = describe(act);
        } else if (type == "Linear") {
          const auto& lin = static_cast<const nn::Linear&>(*child);
          const bool relu = options.fuse && sequential && child_type(i + 1) == "ReLU";
          auto w = build(cfg.weight, lin.weight().shape(), full + ".weight_fake_quant");
          auto a =
              build(cfg.activation, Shape{1, lin.out_features()}, full + ".activation_post_process");
          swap.module = std::make_shared<QuantLinear>(lin, w, a, relu);
          if (relu) swap.absorbed.push_back(children[i + 1].first);
          row.from_type = relu ? "Linear+ReLU" : "Linear";
          row.weight = describe(w);
          row.activation = describe(a);
        } else {  // Conv2d
          const auto& conv = static_cast<const nn::Conv2d&>(*child);
          const bool bn = options.fuse && sequential && child_type(i + 1) == "BatchNorm2d";
          const bool relu = options.fuse && sequential && child_type(i + (bn ? 2 : 1)) == "ReLU";
          auto w = build(cfg.weight, conv.weight().shape(), full + ".weight_fake_quant");
          auto a = build(cfg.activation, Shape{1, conv.out_channels(), 1, 1},
                         full + ".activation_post_process");
          if (bn) {
            auto bn_module = std::dynamic_pointer_cast<nn::BatchNorm2d>(children[i + 1].second);
            swap.module = std::make_shared<ConvBn2d>(conv, bn_module, w, a, relu);
            swap.absorbed.push_back(children[i + 1].first);
          } else {
            swap.module = std::make_shared<QuantConv2d>(conv, w, a, relu);
          }
          if (relu) swap.absorbed.push_back(children[i + (bn ? 2 : 1)].first);
          row.from_type = std::string("Conv2d") + (bn ? "+BatchNorm2d" : "") + (relu ? "+ReLU" : "");
          row.weight = describe(w);
          row.activation = describe(a);
        }
        row.to_type = swap.module->type_name();
        i += swap.absorbed.size();
        swaps.push_back(std::move(swap));
        report.layers.push_back(row);
      } catch (const Error& e) {
        throw Error(detail::concat("prepare_qat: layer '", full, "' (", type, "), config '", res.config,
                                   "' (", res.rule, "): ", e.what()));
      }
    }
  }
  // Everything was built: now change the model.
  for (const Swap& s : swaps) {
    s.parent->replace_child(s.name, s.module);
    for (const auto& a : s.absorbed) s.parent->replace_child(a, std::make_shared<nn::Identity>());
  }
  return report;
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
  return os.str();
}

}  // namespace qat::quant
