#include "modules/quant/fuse.h"

#include "modules/quant/detail/fusion.h"

#include <set>

#include "framework/nn/basic.h"
#include "framework/nn/sequential.h"
#include "modules/quant/qat_layers.h"

namespace qat::quant {

namespace {

std::string join(const std::string& prefix, const std::string& name) {
  return prefix.empty() ? name : prefix + "." + name;
}

std::string str(const FusionGroup& g) {
  std::string out;
  for (const auto& n : g) out += (out.empty() ? "{" : ", ") + n;
  return out + "}";
}

// The fusable type sequences, as the types of the group's modules.
bool is_pattern(const std::vector<std::string>& t) {
  return t == std::vector<std::string>{"Conv2d", "BatchNorm2d"} ||
         t == std::vector<std::string>{"Conv2d", "BatchNorm2d", "ReLU"} ||
         t == std::vector<std::string>{"Linear", "BatchNorm1d"} ||
         t == std::vector<std::string>{"Linear", "BatchNorm1d", "ReLU"} ||
         t == std::vector<std::string>{"Conv2d", "ReLU"} ||
         t == std::vector<std::string>{"Linear", "ReLU"};
}

// (parent, local name) of a dotted name.
std::pair<nn::ModulePtr, std::string> parent_of(nn::Module& model, const std::string& path,
                                                nn::ModulePtr root_handle) {
  const auto dot = path.rfind('.');
  if (dot == std::string::npos) return {root_handle, path};
  return {model.submodule(path.substr(0, dot)), path.substr(dot + 1)};
}

}  // namespace

std::vector<FusedGroup> fuse_modules(nn::Module& model, const std::vector<FusionGroup>& groups) {
  std::vector<detail::Replacement> plan;
  std::vector<FusedGroup> done = detail::plan_fusion(model, groups, plan);
  for (const auto& r : plan) r.parent->replace_child(r.name, r.module);
  return done;
}

namespace detail {

std::vector<FusedGroup> plan_fusion(nn::Module& model, const std::vector<FusionGroup>& groups,
                                    std::vector<Replacement>& plans) {
  std::vector<FusedGroup> done;
  std::set<std::string> used;
  // The root has no shared_ptr of its own here: a non-owning handle stands in for it.
  const nn::ModulePtr root(&model, [](nn::Module*) {});
  for (const FusionGroup& g : groups) {
    QAT_REQUIRE(g.size() >= 2, "fuse_modules", "group ", str(g), " needs at least two modules");
    std::vector<nn::ModulePtr> mods;
    std::vector<std::string> types;
    for (const auto& name : g) {
      QAT_REQUIRE(used.insert(name).second, "fuse_modules", "module '", name,
                  "' appears in two groups (", str(g), ")");
      nn::ModulePtr m;
      try {
        m = model.submodule(name);
      } catch (const Error&) {
        throw Error(qat::detail::concat("fuse_modules: group ", str(g), ": no module '", name, "' in ",
                                   model.type_name()));
      }
      mods.push_back(m);
      types.push_back(m->type_name());
    }
    if (!is_pattern(types)) {
      std::string got;
      for (const auto& t : types) got += (got.empty() ? "" : ", ") + t;
      throw Error(qat::detail::concat("fuse_modules: group ", str(g), " has types (", got,
                                      "); fusable are (Conv2d, BatchNorm2d[, ReLU]), (Conv2d, ReLU), "
                                      "(Linear, BatchNorm1d[, ReLU]), (Linear, ReLU)"));
    }
    const bool relu = types.back() == "ReLU";
    nn::ModulePtr fused;
    try {
      if (types[0] == "Linear" && types[1] == "BatchNorm1d") {
        fused = std::make_shared<LinearBn1d>(static_cast<const nn::Linear&>(*mods[0]),
                                             std::static_pointer_cast<nn::BatchNorm1d>(mods[1]), nullptr,
                                             nullptr, relu);
      } else if (types[0] == "Linear") {
        fused = std::make_shared<QuantLinear>(static_cast<const nn::Linear&>(*mods[0]), nullptr, nullptr, true);
      } else if (types[1] == "BatchNorm2d") {
        fused = std::make_shared<ConvBn2d>(static_cast<const nn::Conv2d&>(*mods[0]),
                                           std::static_pointer_cast<nn::BatchNorm2d>(mods[1]), nullptr,
                                           nullptr, relu);
      } else {
        fused = std::make_shared<QuantConv2d>(static_cast<const nn::Conv2d&>(*mods[0]), nullptr, nullptr, true);
      }
    } catch (const Error& e) {
      throw Error(qat::detail::concat("fuse_modules: group ", str(g), ": ", e.what()));
    }
    done.push_back({g, fused->type_name()});
    for (std::size_t i = 0; i < g.size(); ++i) {
      auto [parent, local] = parent_of(model, g[i], root);
      plans.push_back({parent.get(), local, i == 0 ? fused : std::make_shared<nn::Identity>()});
    }
  }
  return done;
}

bool keeps_grid(const nn::GraphNode& n) {
  static const std::set<std::string> modules{"ReLU", "MaxPool2d", "Flatten", "Identity", "Dropout"};
  return n.kind == nn::GraphNode::Kind::Module ? modules.count(n.type) > 0 : n.type == "reshape";
}

std::vector<FusionGroup> sequential_fusion_groups(nn::Module& model) {
  std::vector<FusionGroup> out;
  for (auto& [prefix, parent] : model.named_modules()) {
    if (!dynamic_cast<nn::Sequential*>(parent)) continue;
    const nn::NamedModules& kids = parent->named_children();
    auto type = [&](std::size_t i) { return i < kids.size() ? kids[i].second->type_name() : ""; };
    for (std::size_t i = 0; i < kids.size(); ++i) {
      const std::string t = type(i);
      if (t != "Conv2d" && t != "Linear") continue;
      FusionGroup g{join(prefix, kids[i].first)};
      std::size_t j = i + 1;
      if ((t == "Conv2d" && type(j) == "BatchNorm2d") || (t == "Linear" && type(j) == "BatchNorm1d"))
        g.push_back(join(prefix, kids[j++].first));
      if (type(j) == "ReLU") g.push_back(join(prefix, kids[j++].first));
      if (g.size() > 1) out.push_back(g), i = j - 1;
    }
  }
  return out;
}

std::vector<FusionGroup> graph_fusion_groups(const nn::Graph& graph, std::vector<std::string>& notes) {
  std::vector<FusionGroup> out;
  auto module_call = [&](int id, const char* type) {
    const nn::GraphNode& n = graph.nodes[static_cast<std::size_t>(id)];
    return n.kind == nn::GraphNode::Kind::Module && !n.container && n.atomic_level && n.type == type &&
           n.name != "<not in model>";
  };
  auto called_once = [&](int id) {
    return graph.calls(graph.nodes[static_cast<std::size_t>(id)].module).size() == 1;
  };
  // The single reader of node `id`'s value if it is a call of `type`, else -1.
  auto next = [&](int id, const char* type) {
    const std::vector<int> users = graph.users(id);
    if (users.size() != 1 || id == graph.output || !module_call(users[0], type)) return -1;
    return users[0];
  };
  for (std::size_t i = 0; i < graph.nodes.size(); ++i) {
    const int id = static_cast<int>(i);
    const bool conv = module_call(id, "Conv2d"), linear = module_call(id, "Linear");
    if (!conv && !linear) continue;
    const std::string& name = graph.nodes[i].name;
    if (!called_once(id)) {
      notes.push_back(qat::detail::concat("'", name, "' is called ", graph.calls(graph.nodes[i].module).size(),
                                     " times: not fused"));
      continue;
    }
    FusionGroup g{name};
    int last = id;
    {
      const char* bn_type = conv ? "BatchNorm2d" : "BatchNorm1d";
      if (const int bn = next(last, bn_type); bn >= 0) {
        if (called_once(bn)) {
          g.push_back(graph.nodes[static_cast<std::size_t>(bn)].name);
          last = bn;
        } else {
          notes.push_back(qat::detail::concat("'", graph.nodes[static_cast<std::size_t>(bn)].name, "' (",
                                              bn_type, ") after '", name,
                                              "' is called more than once: not fused, it stays float"));
        }
      }
    }
    if (const int relu = next(last, "ReLU"); relu >= 0) {
      if (called_once(relu))
        g.push_back(graph.nodes[static_cast<std::size_t>(relu)].name);
      else
        notes.push_back(qat::detail::concat("'", graph.nodes[static_cast<std::size_t>(relu)].name,
                                       "' (ReLU) after '", graph.nodes[static_cast<std::size_t>(last)].name,
                                       "' is reused elsewhere: not fused (it runs as an int8 ReLU)"));
    }
    if (g.size() > 1) out.push_back(g);
  }
  return out;
}

}  // namespace detail

}  // namespace qat::quant
