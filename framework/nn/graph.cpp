#include "framework/nn/graph.h"

#include <algorithm>
#include <sstream>
#include <unordered_map>

#include "framework/autograd/grad_mode.h"
#include "framework/autograd/node.h"

namespace qat::nn {

int Graph::origin(int id) const {
  for (std::size_t guard = 0; id >= 0 && guard <= nodes.size(); ++guard) {
    if (!nodes[static_cast<std::size_t>(id)].container) return id;
    id = nodes[static_cast<std::size_t>(id)].source;
  }
  return id;
}

int Graph::skip_identities(int id) const {
  while (id >= 0 && nodes[static_cast<std::size_t>(id)].kind == GraphNode::Kind::Module &&
         nodes[static_cast<std::size_t>(id)].type == "Identity" &&
         nodes[static_cast<std::size_t>(id)].inputs.size() == 1 && nodes[static_cast<std::size_t>(id)].inputs[0] >= 0)
    id = nodes[static_cast<std::size_t>(id)].inputs[0];
  return id;
}

std::vector<int> Graph::users(int id) const {
  std::vector<int> out;
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    const GraphNode& n = nodes[i];
    if (!n.atomic_level || n.container) continue;
    if (std::find(n.inputs.begin(), n.inputs.end(), id) != n.inputs.end())
      out.push_back(static_cast<int>(i));
  }
  return out;
}

std::vector<int> Graph::calls(const Module* module) const {
  std::vector<int> out;
  for (std::size_t i = 0; i < nodes.size(); ++i)
    if (nodes[i].atomic_level && nodes[i].module == module) out.push_back(static_cast<int>(i));
  return out;
}

std::string Graph::scope_of(int id) const {
  std::vector<std::string> parts;
  for (int s = nodes.at(static_cast<std::size_t>(id)).scope; s >= 0;
       s = nodes[static_cast<std::size_t>(s)].scope)
    parts.push_back(nodes[static_cast<std::size_t>(s)].name.empty() ? "(root)"
                                                                     : nodes[static_cast<std::size_t>(s)].name);
  std::string out;
  for (auto it = parts.rbegin(); it != parts.rend(); ++it) out += (out.empty() ? "" : " > ") + *it;
  return out;
}

std::string Graph::str() const {
  std::ostringstream os;
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    const GraphNode& n = nodes[i];
    if (!n.atomic_level || n.container) continue;
    os << "%" << i << " = ";
    if (n.kind == GraphNode::Kind::Input)
      os << "input";
    else if (n.kind == GraphNode::Kind::Module)
      os << (n.name.empty() ? "(root)" : n.name) << " (" << n.type << ")";
    else
      os << n.type << (n.scope >= 0 ? " in " + scope_of(static_cast<int>(i)) : std::string());
    os << " (";
    for (std::size_t k = 0; k < n.inputs.size(); ++k)
      os << (k ? ", " : "") << (n.inputs[k] < 0 ? std::string("const") : "%" + std::to_string(n.inputs[k]));
    os << ") -> " << n.shape << "\n";
  }
  os << "return %" << output << "\n";
  return os.str();
}

namespace {

class Tracer final : public CallObserver, public autograd::OpObserver {
 public:
  explicit Tracer(Module& model) {
    for (auto& [name, m] : model.named_modules()) names_.emplace(m, name);
  }

  Graph graph;

  int add_input(const Tensor& x) {
    GraphNode n;
    n.kind = GraphNode::Kind::Input;
    n.name = n.type = "input";
    n.shape = x.shape();
    graph.nodes.push_back(std::move(n));
    produce(x, 0);
    return 0;
  }

  int value_of(const Tensor& t) const {
    if (!t.defined()) return -1;
    auto it = producer_.find(t.impl_ptr().get());
    return it == producer_.end() ? -1 : graph.origin(it->second);
  }

  void enter(Module& module, const std::vector<Tensor>& inputs) override {
    GraphNode n;
    n.kind = GraphNode::Kind::Module;
    auto it = names_.find(&module);
    n.name = it == names_.end() ? "<not in model>" : it->second;
    n.type = module.type_name();
    n.module = &module;
    n.container = !module.is_atomic();
    fill_common(n, inputs);
    const int id = static_cast<int>(graph.nodes.size());
    graph.nodes.push_back(std::move(n));
    open_.push_back(id);
    if (!graph.nodes.back().container) ++atomic_depth_;
  }

  void exit(Module& module, const std::vector<Tensor>&, const Tensor& output) override {
    const int id = open_.back();
    open_.pop_back();
    GraphNode& n = graph.nodes[static_cast<std::size_t>(id)];
    if (!n.container) --atomic_depth_;
    n.shape = output.defined() ? output.shape() : Shape{};
    if (n.container) {
      auto it = output.defined() ? producer_.find(output.impl_ptr().get()) : producer_.end();
      n.source = it == producer_.end() ? -1 : graph.origin(it->second);
    }
    (void)module;
    if (output.defined()) produce(output, id);
  }

  void on_op(const char* name, const std::vector<Tensor>& inputs, const Tensor& output) override {
    GraphNode n;
    n.kind = GraphNode::Kind::Op;
    n.name = n.type = name;
    fill_common(n, inputs);
    n.shape = output.shape();
    const int id = static_cast<int>(graph.nodes.size());
    graph.nodes.push_back(std::move(n));
    produce(output, id);
  }

 private:
  void fill_common(GraphNode& n, const std::vector<Tensor>& inputs) const {
    for (const Tensor& t : inputs) {
      if (!t.defined()) continue;
      n.inputs.push_back(value_of(t));
      n.constants.push_back(n.inputs.back() < 0 ? t.detach() : Tensor());
    }
    n.scope = open_.empty() ? -1 : open_.back();
    n.atomic_level = atomic_depth_ == 0;
  }
  void produce(const Tensor& t, int id) {
    producer_[t.impl_ptr().get()] = id;
    alive_.push_back(t);  // keeps the address from being reused during the trace
  }

  std::unordered_map<const Module*, std::string> names_;
  std::unordered_map<const TensorImpl*, int> producer_;
  std::vector<Tensor> alive_;
  std::vector<int> open_;
  int atomic_depth_ = 0;
};

// Restores every module's training flag (parents first, so children keep their own).
class TrainingFlags {
 public:
  explicit TrainingFlags(Module& model) {
    for (auto& [name, m] : model.named_modules()) flags_.emplace_back(m, m->is_training());
  }
  ~TrainingFlags() {
    for (auto& [m, on] : flags_) m->train(on);
  }

 private:
  std::vector<std::pair<Module*, bool>> flags_;
};

}  // namespace

Graph trace(Module& model, const Tensor& example) {
  QAT_REQUIRE(example.defined(), "nn::trace", "example input is undefined");
  TrainingFlags restore(model);
  model.eval();
  NoGradGuard no_grad;
  Tracer tracer(model);
  tracer.add_input(example);
  Tensor out;
  {
    CallObserverGuard calls(&tracer);
    autograd::OpObserverGuard ops(&tracer);
    out = model(example);
  }
  tracer.graph.output = tracer.value_of(out);
  return std::move(tracer.graph);
}

}  // namespace qat::nn
