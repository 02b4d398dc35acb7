#include "framework/autograd/engine.h"

#include <algorithm>
#include <mutex>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "framework/autograd/node.h"
#include "framework/tensor/kernels.h"

namespace qat {

Node::~Node() {
  std::vector<Tensor> pending = std::move(inputs);
  while (!pending.empty()) {
    Tensor t = std::move(pending.back());
    pending.pop_back();
    if (!t.defined() || t.impl_ptr().use_count() != 1) continue;
    auto& fn = t.impl().grad_fn;
    if (fn && fn.use_count() == 1) {
      for (Tensor& in : fn->inputs) pending.push_back(std::move(in));
      fn->inputs.clear();
    }
  }  // each tensor dies here with an input-less node: no recursion
}

}  // namespace qat

namespace qat::autograd {

namespace {
thread_local OpObserver* g_op_observer = nullptr;

std::mutex g_grad_observers_mutex;
std::vector<GradReadyObserver*> g_grad_observers;

std::vector<GradReadyObserver*> grad_observers() {
  std::lock_guard lock(g_grad_observers_mutex);
  return g_grad_observers;
}
}  // namespace

void add_grad_ready_observer(GradReadyObserver* observer) {
  std::lock_guard lock(g_grad_observers_mutex);
  g_grad_observers.push_back(observer);
}

void remove_grad_ready_observer(GradReadyObserver* observer) {
  std::lock_guard lock(g_grad_observers_mutex);
  std::erase(g_grad_observers, observer);
}

OpObserverGuard::OpObserverGuard(OpObserver* observer) : prev_(g_op_observer) {
  g_op_observer = observer;
}
OpObserverGuard::~OpObserverGuard() { g_op_observer = prev_; }

void record(Tensor& out, const char* name, std::vector<Tensor> inputs, Node::BackwardFn backward) {
  if (g_op_observer) g_op_observer->on_op(name, inputs, out);
  bool needed = GradMode::is_enabled();
  if (needed) {
    needed = false;
    for (const Tensor& t : inputs) needed = needed || (t.defined() && t.requires_grad());
  }
  if (!needed) return;
  auto node = std::make_shared<Node>();
  node->name = name;
  node->inputs = std::move(inputs);
  node->backward = std::move(backward);
  out.impl().requires_grad = true;
  out.impl().grad_fn = std::move(node);
}

bool is_exclusive(const Tensor& t) {
  return t.impl_ptr().use_count() == 1 && t.impl().storage.use_count() == 1;
}

namespace {

void accumulate_leaf(const Tensor& leaf, Tensor g) {
  Tensor existing = leaf.grad();
  if (!existing.defined()) {
    leaf.impl().grad = (is_exclusive(g) ? std::move(g) : g.clone()).impl_ptr();
  } else {
    detail::add_inplace(existing, g);
  }
}

// Post-order of the non-leaf tensors reachable from root, without recursion.
std::vector<std::shared_ptr<TensorImpl>> topological_order(const std::shared_ptr<TensorImpl>& root) {
  std::vector<std::shared_ptr<TensorImpl>> order;
  std::unordered_set<const TensorImpl*> visited;
  std::vector<std::pair<std::shared_ptr<TensorImpl>, std::size_t>> stack;
  stack.emplace_back(root, 0);
  visited.insert(root.get());
  while (!stack.empty()) {
    auto& [impl, next] = stack.back();
    const auto& inputs = impl->grad_fn->inputs;
    if (next < inputs.size()) {
      const Tensor& in = inputs[next++];
      if (in.defined() && in.requires_grad() && in.impl().grad_fn &&
          visited.insert(in.impl_ptr().get()).second) {
        stack.emplace_back(in.impl_ptr(), 0);
      }
    } else {
      order.push_back(impl);
      stack.pop_back();
    }
  }
  return order;
}

}  // namespace

void backward(const Tensor& root, const Tensor& grad_output, bool retain_graph) {
  QAT_REQUIRE(root.requires_grad(), "Tensor::backward", "tensor of shape ", root.shape(),
              " does not require grad and has no grad_fn");
  Tensor seed = grad_output;
  if (!seed.defined()) {
    QAT_REQUIRE(root.numel() == 1, "Tensor::backward",
                "grad_output can be omitted only for a "
                "one-element tensor, got shape ",
                root.shape());
    seed = Tensor::ones(root.shape(), root.dtype(), root.device());
  }
  common_device("Tensor::backward", {{"self", &root}, {"grad_output", &seed}});
  QAT_REQUIRE(seed.shape() == root.shape() && seed.dtype() == root.dtype(), "Tensor::backward",
              "grad_output ", dtype_name(seed.dtype()), seed.shape(), " does not match tensor ",
              dtype_name(root.dtype()), root.shape());
  const std::vector<GradReadyObserver*> observers = grad_observers();
  if (root.is_leaf()) {
    accumulate_leaf(root, seed);
    for (GradReadyObserver* o : observers) o->leaf_ready(root.impl_ptr().get());
    for (GradReadyObserver* o : observers) o->backward_end();
    return;
  }

  NoGradGuard no_grad;  // backward functions compose ops without recording them
  const auto order = topological_order(root.impl_ptr());
  // With observers: how many nodes still to run read each leaf; at 0 its gradient is complete.
  std::unordered_map<const TensorImpl*, int> readers;
  if (!observers.empty())
    for (const auto& impl : order)
      for (const Tensor& in : impl->grad_fn->inputs)
        if (in.defined() && in.requires_grad() && in.is_leaf()) ++readers[in.impl_ptr().get()];
  std::unordered_map<const TensorImpl*, Tensor> grads;
  grads.emplace(root.impl_ptr().get(), seed);
  std::vector<Tensor> grad_inputs;

  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    Node& node = *(*it)->grad_fn;
    auto found = grads.find(it->get());
    if (found != grads.end()) {
      QAT_REQUIRE(node.backward != nullptr, "Tensor::backward", "op '", node.name,
                  "': trying to backward through the graph a second time; pass "
                  "retain_graph=true to the first backward");
      Tensor g = std::move(found->second);
      grads.erase(found);
      grad_inputs.assign(node.inputs.size(), Tensor());
      node.backward(g, node.inputs, grad_inputs);
      g = Tensor();  // a backward that passed g on in place leaves its gradient exclusive
      for (std::size_t i = 0; i < node.inputs.size(); ++i) {
        const Tensor& in = node.inputs[i];
        Tensor& gi = grad_inputs[i];
        if (!in.defined() || !in.requires_grad() || !gi.defined()) continue;
        QAT_CHECK(gi.shape() == in.shape() && gi.dtype() == in.dtype(), "op '", node.name,
                  "' produced gradient ", gi.shape(), " for input ", i, " of shape ", in.shape());
        if (in.is_leaf()) {
          accumulate_leaf(in, std::move(gi));
        } else {
          auto [slot, inserted] = grads.try_emplace(in.impl_ptr().get(), gi);
          if (!inserted) slot->second = detail::add(slot->second, gi);
        }
      }
      grad_inputs.clear();
    }
    if (!observers.empty())  // read before the inputs are freed below
      for (const Tensor& in : node.inputs)
        if (in.defined() && in.requires_grad() && in.is_leaf() && --readers[in.impl_ptr().get()] == 0)
          for (GradReadyObserver* o : observers) o->leaf_ready(in.impl_ptr().get());
    if (!retain_graph) {
      node.backward = nullptr;
      node.inputs.clear();
    }
  }
  for (GradReadyObserver* o : observers) o->backward_end();
}

}  // namespace qat::autograd
