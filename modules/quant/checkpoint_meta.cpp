#include "modules/quant/checkpoint_meta.h"

#include <algorithm>
#include <set>

#include "framework/io/restore.h"
#include "modules/quant/quantized_layers.h"
#include "modules/quant/quantizer.h"

namespace qat::quant {
namespace {

using qat::detail::concat;
using qat::detail::printable;

bool starts_with(const std::string& s, std::string_view prefix) { return s.rfind(prefix, 0) == 0; }

bool has_quant_metadata(const io::Checkpoint& ckpt) {
  for (const auto& [key, value] : ckpt.metadata)
    if (starts_with(key, "quant.") || starts_with(key, "qconfig.")) return true;
  return false;
}

std::string qat_hint(const std::string& counts, bool converted) {
  if (converted)
    return concat("the checkpoint holds an int8 model converted from QAT (", counts,
                  "): call prepare_qat with the same registry, then convert, before loading");
  return concat("the checkpoint holds a QAT model (", counts,
                "): call prepare_qat with the same registry before loading");
}

// The configs that "qconfig.<layer>" -> "<config> (<rule>)" metadata names.
std::vector<std::string> configs_in(const io::Checkpoint& ckpt) {
  std::vector<std::string> out;
  for (const auto& [key, value] : ckpt.metadata)
    if (starts_with(key, "qconfig.")) out.push_back(value.substr(0, value.find(" (")));
  return out;
}

std::string quant_load_hint(nn::Module& model, const io::Checkpoint& ckpt, const io::LoadReport& r) {
  std::vector<std::string> quantizers;  // "fc1.weight_fake_quant."
  for (auto& [name, m] : model.named_modules())
    if (dynamic_cast<Quantizer*>(m) != nullptr) quantizers.push_back(name + ".");
  if (!quantizers.empty() && !has_quant_metadata(ckpt)) {
    const bool quantizer_state_missing =
        std::any_of(r.missing.begin(), r.missing.end(), [&](const std::string& t) {
          return std::any_of(quantizers.begin(), quantizers.end(),
                             [&](const std::string& q) { return starts_with(t, q); });
        });
    if (quantizer_state_missing)
      return "the model is prepared for QAT but the checkpoint holds a float model: load it before "
             "prepare_qat, or load with strict=false to keep fresh quantizer state";
  }
  if (quantizers.empty() && !r.unexpected.empty() &&
      !ckpt.metadata.count(std::string(io::kLoadHintKey))) {
    const std::vector<std::string> configs = configs_in(ckpt);
    if (!configs.empty()) {
      const auto kind = ckpt.metadata.find("kind");
      return qat_hint(config_counts(configs), kind != ckpt.metadata.end() && kind->second == "int8");
    }
  }
  return "";
}

// The "quant.<quantizer>" -> "<type> <spec>" metadata (quantization_metadata) parsed strictly and
// compared with the model's quantizer of that name, so that a checkpoint whose recorded
// quantization differs from the model's (another qconfig, a corrupt or crafted file) is refused.
void quant_load_check(nn::Module& model, const io::Checkpoint& ckpt,
                      std::vector<std::string>& problems) {
  std::map<std::string, const Quantizer*> in_model;
  std::set<std::string> kinds{"FakeQuantize",          "FP8FakeQuantize",
                              "LearnableFakeQuantize", "LearnableAmaxFakeQuantize",
                              "MXFakeQuantize",        "DynamicFakeQuantize"};
  for (auto& [name, m] : model.named_modules())
    if (const auto* q = dynamic_cast<const Quantizer*>(m)) {
      in_model.emplace(name, q);
      kinds.insert(q->type_name());
    }
  for (const auto& [key, value] : ckpt.metadata) {
    if (!starts_with(key, "quant.")) continue;
    const std::string where = concat("metadata '", printable(key), "' = '", printable(value), "': ");
    const auto space = value.find(' ');
    const std::string kind = value.substr(0, space);
    if (!kinds.count(kind)) {
      std::string known;
      for (const auto& k : kinds) known += (known.empty() ? "" : ", ") + k;
      problems.push_back(
          concat(where, "unknown quantizer kind '", printable(kind), "' (known: ", known, ")"));
      continue;
    }
    QuantSpec spec;
    try {
      spec = QuantSpec::parse(space == std::string::npos ? std::string() : value.substr(space + 1));
    } catch (const Error& e) {
      problems.push_back(where + e.what());
      continue;
    }
    const auto it = in_model.find(key.substr(6));
    if (it == in_model.end()) continue;  // structure is load_into's business (and int8 models have none)
    const Quantizer& q = *it->second;
    if (q.type_name() != kind || !(q.spec() == spec))
      problems.push_back(concat(where, "the model's quantizer is ", q.type_name(), " ", q.spec().str(),
                                " (prepared with another qconfig or rule?)"));
  }
}

}  // namespace

std::string config_counts(const std::vector<std::string>& configs) {
  std::map<std::string, std::size_t> count;
  for (const auto& c : configs)
    if (c != "skip") ++count[c];
  std::vector<std::pair<std::string, std::size_t>> rows(count.begin(), count.end());
  std::stable_sort(rows.begin(), rows.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });
  std::string out;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    out += concat(i ? ", " : "", rows[i].first, " on ", rows[i].second);
    if (i == 0) out += rows[i].second == 1 ? " layer" : " layers";
  }
  return out;
}

std::map<std::string, std::string> checkpoint_metadata(nn::Module& model, const PrepareReport& report,
                                                       bool converted) {
  register_load_hints();
  std::map<std::string, std::string> out = quantization_metadata(model);
  out.merge(report.metadata());
  std::vector<std::string> configs;
  for (const auto& l : report.layers) configs.push_back(l.config);
  const std::string counts = config_counts(configs);
  if (!counts.empty()) out[std::string(io::kLoadHintKey)] = qat_hint(counts, converted);
  return out;
}

namespace {
// Int8 checkpoints written before the float output stage hold each QuantizedLinear /
// QuantizedConv2d bias as int32 at s_in s_w[o]: bias = q s_in s_w[o] in float (exact in real
// numbers to float rounding; those layers computed with this bias).
void upgrade_int8_bias(nn::Module& model, io::Checkpoint& ckpt) {
  std::map<std::string, Tensor*> by_name;
  for (auto& [name, t] : ckpt.tensors) by_name[name] = &t;
  auto find = [&](const std::string& n) -> Tensor* {
    const auto it = by_name.find(n);
    return it == by_name.end() || !it->second->defined() ? nullptr : it->second;
  };
  for (const auto& [prefix, m] : model.named_modules()) {
    if (dynamic_cast<const QuantizedWeightLayer*>(m) == nullptr) continue;
    const std::string p = prefix.empty() ? "" : prefix + ".";
    Tensor* b = find(p + "bias");
    const Tensor* s_in = find(p + "input_scale");
    const Tensor* s_w = find(p + "weight_scale");
    if (b == nullptr || b->dtype() != DType::Int32 || s_in == nullptr || s_in->numel() != 1 ||
        s_in->dtype() != DType::Float32 || s_w == nullptr || s_w->dtype() != DType::Float32 ||
        s_w->numel() != b->numel())
      continue;  // not the old layout: load_into reports what does not match
    Tensor f = Tensor::empty(b->shape(), DType::Float32);
    for (std::int64_t o = 0; o < b->numel(); ++o)
      f.data<float>()[o] = static_cast<float>(static_cast<double>(b->data<std::int32_t>()[o]) *
                                              s_in->data<float>()[0] * s_w->data<float>()[o]);
    *b = f;
  }
}
}  // namespace

bool register_load_hints() {
  static const bool done = [] {
    io::set_load_hint("modules/quant", quant_load_hint);
    io::set_load_check("modules/quant", quant_load_check);
    io::set_load_upgrade("modules/quant int8 bias", upgrade_int8_bias);
    return true;
  }();
  return done;
}

}  // namespace qat::quant
