#include "framework/nn/sequential.h"

#include <typeinfo>

#include "framework/nn/basic.h"

namespace qat::nn {

namespace {
// a ReLU then a MaxPool2d (those exact types), neither watched by a hook or a graph capture
const MaxPool2d* relu_then_pool(const Module& a, const Module& b) {
  if (typeid(a) != typeid(ReLU) || typeid(b) != typeid(MaxPool2d)) return nullptr;
  if (a.has_hooks() || b.has_hooks() || CallObserverGuard::current() != nullptr) return nullptr;
  return static_cast<const MaxPool2d*>(&b);
}

// children[i], then only Identity children, then a max pool, none watched: the pool's index
// (0: no such pool)
std::size_t pool_after(const NamedModules& children, std::size_t i) {
  if (children[i].second->has_hooks() || CallObserverGuard::current() != nullptr) return 0;
  for (std::size_t j = i + 1; j < children.size(); ++j) {
    const Module& m = *children[j].second;
    if (m.has_hooks()) return 0;
    if (m.max_pool_params() != nullptr) return j;
    if (typeid(m) != typeid(Identity)) return 0;
  }
  return 0;
}
}  // namespace

Sequential::Sequential(std::initializer_list<ModulePtr> modules) : Sequential() {
  for (const auto& m : modules) push_back(m);
}

Sequential::Sequential(const NamedModules& named) : Sequential() {
  for (const auto& [name, m] : named) push_back(name, m);
}

Sequential& Sequential::push_back(ModulePtr module) {
  return push_back(std::to_string(size()), std::move(module));
}

Sequential& Sequential::push_back(const std::string& name, ModulePtr module) {
  register_module(name, std::move(module));
  return *this;
}

Tensor Sequential::forward(const Tensor& x) {
  const NamedModules& children = named_children();
  Tensor h = x;
  for (std::size_t i = 0; i < children.size(); ++i) {
    const Module& m = *children[i].second;
    if (i + 1 < children.size())
      if (const MaxPool2d* pool = relu_then_pool(m, *children[i + 1].second)) {
        h = relu_max_pool2d(h, pool->params());
        ++i;
        continue;
      }
    if (const std::size_t j = pool_after(children, i)) {
      Tensor pooled = children[i].second->forward_max_pooled(h, *children[j].second->max_pool_params());
      if (pooled.defined()) {
        h = pooled;
        i = j;
        continue;
      }
    }
    h = (*children[i].second)(h);
  }
  return h;
}

ModulePtr Sequential::operator[](std::size_t i) const {
  QAT_REQUIRE(i < size(), "Sequential::operator[]", "index ", i, " out of range for ", size(),
              " modules");
  return named_children()[i].second;
}

}  // namespace qat::nn
