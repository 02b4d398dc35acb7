#include "framework/nn/sequential.h"

namespace qat::nn {

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
  Tensor h = x;
  for (const auto& [name, m] : named_children()) h = (*m)(h);
  return h;
}

ModulePtr Sequential::operator[](std::size_t i) const {
  QAT_REQUIRE(i < size(), "Sequential::operator[]", "index ", i, " out of range for ", size(),
              " modules");
  return named_children()[i].second;
}

}  // namespace qat::nn
