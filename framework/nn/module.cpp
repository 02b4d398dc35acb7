#include "framework/nn/module.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <iomanip>
#include <sstream>

namespace qat::nn {
namespace {
std::string join(const std::string& prefix, const std::string& name) {
  return prefix.empty() ? name : prefix + "." + name;
}

template <class List, class Key>
auto find_named(List& list, const Key& key) {
  return std::find_if(list.begin(), list.end(), [&](const auto& p) { return p.first == key; });
}

// Depth-first walk over (dotted prefix, module) pairs, without recursion.
template <class F>
void walk(const Module& root, F visit) {
  std::vector<std::pair<std::string, const Module*>> stack{{"", &root}};
  while (!stack.empty()) {
    auto [prefix, m] = stack.back();
    stack.pop_back();
    visit(prefix, *m);
    const auto& kids = m->named_children();
    for (auto it = kids.rbegin(); it != kids.rend(); ++it)
      stack.emplace_back(join(prefix, it->first), it->second.get());
  }
}
}  // namespace

namespace {
thread_local CallObserver* g_call_observer = nullptr;
std::int64_t next_hook_handle() {
  static std::atomic<std::int64_t> next{1};
  return next++;
}
}  // namespace

CallObserverGuard::CallObserverGuard(CallObserver* observer) : prev_(g_call_observer) {
  g_call_observer = observer;
}
CallObserverGuard::~CallObserverGuard() { g_call_observer = prev_; }
CallObserver* CallObserverGuard::current() { return g_call_observer; }

Tensor Module::operator()(const Tensor& x) {
  if (pre_hooks_.empty() && hooks_.empty() && !g_call_observer) return forward(x);
  return call({x}, [&] { return forward(x); });
}

Tensor Module::call(const std::vector<Tensor>& inputs, const std::function<Tensor()>& body) {
  CallObserver* observer = g_call_observer;
  for (const auto& [h, hook] : pre_hooks_) hook(*this, inputs);
  if (observer) observer->enter(*this, inputs);
  Tensor out = body();
  for (const auto& [h, hook] : hooks_) hook(*this, inputs, out);
  if (observer) observer->exit(*this, inputs, out);
  return out;
}

std::int64_t Module::register_forward_pre_hook(ForwardPreHook hook) {
  QAT_REQUIRE(hook != nullptr, "Module::register_forward_pre_hook", "empty hook on ", type_name_);
  const std::int64_t h = next_hook_handle();
  pre_hooks_.emplace_back(h, std::move(hook));
  return h;
}

std::int64_t Module::register_forward_hook(ForwardHook hook) {
  QAT_REQUIRE(hook != nullptr, "Module::register_forward_hook", "empty hook on ", type_name_);
  const std::int64_t h = next_hook_handle();
  hooks_.emplace_back(h, std::move(hook));
  return h;
}

bool Module::remove_hook(std::int64_t handle) {
  auto drop = [&](auto& list) {
    auto it = find_named(list, handle);
    if (it == list.end()) return false;
    list.erase(it);
    return true;
  };
  return drop(pre_hooks_) || drop(hooks_);
}

void Module::check_new_name(const std::string& name, const char* fn) const {
  QAT_REQUIRE(!name.empty() && name.find('.') == std::string::npos, fn, "invalid name '", name,
              "' (must be non-empty and contain no '.')");
  const bool taken = find_named(parameters_, name) != parameters_.end() ||
                     find_named(buffers_, name) != buffers_.end() ||
                     find_named(children_, name) != children_.end();
  QAT_REQUIRE(!taken, fn, "name '", name, "' is already registered in ", type_name_);
}

Tensor Module::register_parameter(const std::string& name, Tensor value) {
  check_new_name(name, "Module::register_parameter");
  require_float(value, "Module::register_parameter", name.c_str());
  QAT_REQUIRE(value.is_leaf(), "Module::register_parameter", "parameter '", name,
              "' must be a leaf tensor (detach it first)");
  value.requires_grad_(true);
  parameters_.emplace_back(name, value);
  own_state_valid_ = false;
  return value;
}

Tensor Module::register_buffer(const std::string& name, Tensor value) {
  check_new_name(name, "Module::register_buffer");
  QAT_REQUIRE(value.defined(), "Module::register_buffer", "buffer '", name, "' is undefined");
  buffers_.emplace_back(name, value);
  own_state_valid_ = false;
  return value;
}

void Module::add_child(const std::string& name, ModulePtr module) {
  check_new_name(name, "Module::register_module");
  QAT_REQUIRE(module != nullptr, "Module::register_module", "child '", name, "' is null");
  children_.emplace_back(name, std::move(module));
}

NamedTensors Module::named_parameters(bool recurse) const {
  if (!recurse) return parameters_;
  NamedTensors out;
  walk(*this, [&](const std::string& prefix, const Module& m) {
    for (const auto& [n, t] : m.parameters_) out.emplace_back(join(prefix, n), t);
  });
  return out;
}

NamedTensors Module::named_buffers(bool recurse) const {
  if (!recurse) return buffers_;
  NamedTensors out;
  walk(*this, [&](const std::string& prefix, const Module& m) {
    for (const auto& [n, t] : m.buffers_) out.emplace_back(join(prefix, n), t);
  });
  return out;
}

NamedTensors Module::named_state() const {
  NamedTensors out = named_parameters();
  NamedTensors b = named_buffers();
  out.insert(out.end(), b.begin(), b.end());
  return out;
}

Module& Module::to(Device device) {
  // swap the storage inside each TensorImpl, so every handle on it sees the move
  auto move = [device](TensorImpl& t) {
    if (t.storage->device() == device) return;
    const Tensor moved = Tensor(std::make_shared<TensorImpl>(t)).to(device);
    t.storage = moved.impl().storage;
    t.offset = 0;
  };
  for (auto& [name, t] : named_state()) {
    move(t.impl());
    if (t.impl().grad) move(*t.impl().grad);
  }
  return *this;
}

ModuleRefs Module::named_modules() {
  ModuleRefs out;
  walk(*this, [&](const std::string& prefix, const Module& m) {
    out.emplace_back(prefix, const_cast<Module*>(&m));  // walk is shared with the const views
  });
  return out;
}

std::vector<Tensor> Module::parameters() const {
  std::vector<Tensor> out;
  for (auto& [n, t] : named_parameters()) out.push_back(t);
  return out;
}

ModulePtr Module::child(const std::string& name) const {
  auto it = find_named(children_, name);
  QAT_REQUIRE(it != children_.end(), "Module::child", type_name_, " has no child '", name, "'");
  return it->second;
}

Tensor Module::parameter(const std::string& name) const {
  auto it = find_named(parameters_, name);
  QAT_REQUIRE(it != parameters_.end(), "Module::parameter", type_name_, " has no parameter '", name,
              "'");
  return it->second;
}

Tensor Module::buffer(const std::string& name) const {
  auto it = find_named(buffers_, name);
  QAT_REQUIRE(it != buffers_.end(), "Module::buffer", type_name_, " has no buffer '", name, "'");
  return it->second;
}

bool Module::has_parameter(const std::string& name) const {
  return find_named(parameters_, name) != parameters_.end();
}

bool Module::has_buffer(const std::string& name) const {
  return find_named(buffers_, name) != buffers_.end();
}

ModulePtr Module::submodule(const std::string& path) const {
  QAT_REQUIRE(!path.empty(), "Module::submodule", "empty path");
  const Module* cur = this;
  ModulePtr found;
  std::size_t start = 0;
  while (start <= path.size()) {
    const std::size_t dot = std::min(path.find('.', start), path.size());
    const std::string part = path.substr(start, dot - start);
    auto it = find_named(cur->children_, part);
    QAT_REQUIRE(it != cur->children_.end(), "Module::submodule", "no module '", path, "' ('", part,
                "' not found in ", cur->type_name_, ")");
    found = it->second;
    cur = found.get();
    start = dot + 1;
  }
  return found;
}

Tensor Module::replace_buffer(const std::string& name, Tensor value) {
  auto it = find_named(buffers_, name);
  QAT_REQUIRE(it != buffers_.end(), "Module::replace_buffer", type_name_, " has no buffer '", name, "'");
  QAT_REQUIRE(value.defined(), "Module::replace_buffer", "new value of buffer '", name,
              "' is undefined");
  it->second = value;
  own_state_valid_ = false;
  return value;
}

void Module::replace_child(const std::string& name, ModulePtr module) {
  QAT_REQUIRE(module != nullptr, "Module::replace_child", "replacement for '", name, "' is null");
  auto it = find_named(children_, name);
  QAT_REQUIRE(it != children_.end(), "Module::replace_child", type_name_, " has no child '", name, "'");
  module->train(training_);
  it->second = std::move(module);
}

void Module::train(bool on) {
  training_ = on;
  for (auto& [n, c] : children_) c->train(on);
}

void Module::check_state(const StateView&, std::vector<std::string>&) const {}

Tensor Module::forward_max_pooled(const Tensor&, const Pool2dParams&) { return Tensor(); }

// The view holds handles: built once, it sees every in-place change of the tensors.
void Module::check_current_state(std::vector<std::string>& problems) const {
  if (!own_state_valid_) {
    own_state_.clear();
    for (const auto& [name, t] : parameters_) own_state_.emplace(name, t);
    for (const auto& [name, t] : buffers_) own_state_.emplace(name, t);
    own_state_valid_ = true;
  }
  check_state(own_state_, problems);
}

void Module::zero_grad() {
  for (auto& [n, t] : named_parameters()) t.zero_grad();
}

std::int64_t Module::num_parameters() const {
  std::int64_t n = 0;
  for (auto& [name, t] : named_parameters()) n += t.numel();
  return n;
}

std::string Module::summary() const {
  std::vector<std::array<std::string, 5>> rows{{"module", "type", "parameters", "count", ""}};
  std::int64_t total = 0;
  walk(*this, [&](const std::string& prefix, const Module& m) {
    std::string shapes;
    std::int64_t count = 0;
    for (const auto& [n, t] : m.parameters_) {
      shapes += (shapes.empty() ? "" : " ") + n + t.shape().str();
      count += t.numel();
    }
    total += count;
    rows.push_back({prefix.empty() ? "(root)" : prefix, m.type_name_, shapes, std::to_string(count),
                    m.extra_repr()});
  });
  std::array<std::size_t, 4> width{};
  for (const auto& r : rows)
    for (std::size_t c = 0; c < width.size(); ++c) width[c] = std::max(width[c], r[c].size());
  std::ostringstream os;
  for (const auto& r : rows) {
    os << std::left << std::setw(int(width[0] + 2)) << r[0] << std::setw(int(width[1] + 2)) << r[1]
       << std::setw(int(width[2] + 2)) << r[2] << std::right << std::setw(int(width[3])) << r[3];
    if (!r[4].empty()) os << "  " << r[4];
    os << "\n";
  }
  os << "total parameters: " << total << "\n";
  return os.str();
}

}  // namespace qat::nn
