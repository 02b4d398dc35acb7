#include "modules/quant/numeric_report.h"

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <limits>
#include <map>
#include <sstream>

#include "framework/autograd/grad_mode.h"
#include "framework/nn/batchnorm.h"
#include "framework/nn/graph.h"
#include "modules/quant/analysis.h"
#include "modules/quant/qat_layers.h"
#include "modules/quant/quantized_layers.h"
#include "modules/quant/stubs.h"

namespace qat::quant {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Removes the hooks it registered when it goes out of scope.
class Hooks {
 public:
  Hooks() = default;
  Hooks(const Hooks&) = delete;
  Hooks& operator=(const Hooks&) = delete;
  ~Hooks() {
    for (auto& [m, h] : hooks_) m->remove_hook(h);
  }
  // Records the module's first output (a copy) under `key`.
  void capture(nn::Module& m, const std::string& key, std::map<std::string, Tensor>& into) {
    hooks_.emplace_back(
        &m, m.register_forward_hook([&into, key](nn::Module&, const std::vector<Tensor>&, Tensor& out) {
          if (!into.count(key) && out.defined()) into[key] = out.clone();
        }));
  }

 private:
  std::vector<std::pair<nn::Module*, std::int64_t>> hooks_;
};

// Every module's training flag, restored on destruction (parents first).
class TrainingFlags {
 public:
  explicit TrainingFlags(nn::Module& model) {
    for (auto& [name, m] : model.named_modules()) flags_.emplace_back(m, m->is_training());
  }
  ~TrainingFlags() {
    for (auto& [m, on] : flags_) m->train(on);
  }
  TrainingFlags(const TrainingFlags&) = delete;
  TrainingFlags& operator=(const TrainingFlags&) = delete;

 private:
  std::vector<std::pair<nn::Module*, bool>> flags_;
};

nn::Module* find(nn::Module& model, const std::string& name) {
  if (name.empty()) return &model;
  try {
    return model.submodule(name).get();
  } catch (const Error&) {
    return nullptr;
  }
}

// An integer tensor as float: x = scale (q - zero_point) with its QuantInfo; channels-last
// (N, H, W, C) is transposed back to (N, C, H, W).
Tensor dequantized(const Tensor& y, bool channels_last) {
  Tensor x = y;
  if (y.dtype() != DType::Float32) {
    const QuantInfo info = y.quant_info();
    x = Tensor::empty(y.shape(), DType::Float32);
    float* px = x.data<float>();
    auto fill = [&](const auto* q) {
      for (std::int64_t i = 0; i < y.numel(); ++i)
        px[i] = static_cast<float>(info.scale * (static_cast<double>(q[i]) - info.zero_point));
    };
    switch (y.dtype()) {
      case DType::UInt8:
        fill(y.data<std::uint8_t>());
        break;
      case DType::Int8:
        fill(y.data<std::int8_t>());
        break;
      case DType::Int32:
        fill(y.data<std::int32_t>());
        break;
      default:
        QAT_REQUIRE(false, "quant::compare", "cannot dequantize a ", dtype_name(y.dtype()), " output");
    }
  }
  if (!channels_last || x.dim() != 4) return x;
  const std::int64_t N = x.size(0), H = x.size(1), W = x.size(2), C = x.size(3);
  Tensor out = Tensor::empty(Shape{N, C, H, W}, DType::Float32);
  const float* src = x.data<float>();
  float* dst = out.data<float>();
  for (std::int64_t n = 0; n < N; ++n)
    for (std::int64_t h = 0; h < H; ++h)
      for (std::int64_t w = 0; w < W; ++w)
        for (std::int64_t c = 0; c < C; ++c)
          dst[((n * C + c) * H + h) * W + w] = src[((n * H + h) * W + w) * C + c];
  return out;
}

// w[o, ...] * per_channel[o] (per_channel of size 1 or O).
Tensor scale_rows(const Tensor& w, const std::vector<double>& per_channel) {
  Tensor out = w.detach().clone();
  if (out.dtype() != DType::Float32) out = out.to(DType::Float32);
  const std::int64_t O = w.size(0), inner = w.numel() / O;
  float* p = out.data<float>();
  for (std::int64_t o = 0; o < O; ++o)
    for (std::int64_t i = 0; i < inner; ++i)
      p[o * inner + i] =
          static_cast<float>(p[o * inner + i] * per_channel[per_channel.size() == 1 ? 0 : o]);
  return out;
}

// Batch-norm folding factor f = gamma / sqrt(running_var + eps) (Jacob et al. 2018 sec. 3.2).
std::vector<double> bn_factor(const nn::BatchNorm& bn) {
  std::vector<double> f(static_cast<std::size_t>(bn.num_features()));
  for (std::size_t c = 0; c < f.size(); ++c) {
    const double gamma = bn.weight().defined() ? bn.weight().data<float>()[c] : 1.0;
    f[c] = gamma / std::sqrt(static_cast<double>(bn.running_var().data<float>()[c]) + bn.eps());
  }
  return f;
}

std::vector<double> values(const Tensor& t) {
  const Tensor f = t.dtype() == DType::Float32 ? t : t.to(DType::Float32);
  return std::vector<double>(f.data<float>(), f.data<float>() + f.numel());
}

double saturation(const Tensor& x, double lo, double hi) {
  if (!x.defined() || x.numel() == 0) return kNaN;
  std::int64_t out = 0;
  const float* p = x.data<float>();
  for (std::int64_t i = 0; i < x.numel(); ++i) out += p[i] < lo || p[i] > hi;
  return static_cast<double>(out) / static_cast<double>(x.numel());
}

// The output quantizer of a non-QAT-layer module: its child "activation_post_process".
Quantizer* output_quantizer(const nn::Module& m) {
  if (dynamic_cast<const Quantizer*>(&m)) return nullptr;  // a quantizer's child is its observer
  for (const auto& [name, c] : m.named_children())
    if (name == "activation_post_process") return dynamic_cast<Quantizer*>(c.get());
  return nullptr;
}

bool is_layer(nn::Module& m) {
  if (dynamic_cast<QatLayer*>(&m) || m.has_buffer("output_range")) return true;  // QAT or int8
  if (auto* stub = dynamic_cast<QuantStub*>(&m)) return stub->quantizer() != nullptr;
  return output_quantizer(m) != nullptr;  // functional ops
}

std::string number(double v, int precision) {
  if (std::isnan(v)) return "-";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  std::ostringstream s;
  s << std::fixed << std::setprecision(precision) << v;
  return s.str();
}

std::string json_number(double v) {
  if (std::isnan(v)) return "null";
  if (std::isinf(v)) return v > 0 ? "\"inf\"" : "\"-inf\"";
  std::ostringstream s;
  s << std::setprecision(9) << v;
  return s.str();
}

std::string json_string(const std::string& v) {
  std::string out = "\"";
  for (char c : v) out += (c == '"' || c == '\\') ? std::string{'\\', c} : std::string{c};
  return out + "\"";
}

}  // namespace

NumericReport compare(nn::Module& float_model, nn::Module& quant_model, const Tensor& batch) {
  constexpr const char* fn = "quant::compare";
  QAT_REQUIRE(batch.defined(), fn, "batch is undefined");
  QAT_REQUIRE(&float_model != &quant_model, fn, "float_model and quant_model are the same module");

  // The layers: outermost quantized modules (a QAT layer's quantizers are part of it).
  std::vector<std::pair<std::string, nn::Module*>> layers;
  for (auto& [name, m] : quant_model.named_modules()) {
    const bool inside =
        !layers.empty() && !layers.back().first.empty() && name.rfind(layers.back().first + ".", 0) == 0;
    if (!inside && !name.empty() && is_layer(*m)) layers.emplace_back(name, m);
  }
  QAT_REQUIRE(!layers.empty(), fn,
              "quant_model has no quantized layers (prepare_qat it, or convert it, first)");

  // Each layer's float point: its output followed through the Identity modules left by fusion.
  const nn::Graph graph = nn::trace(quant_model, batch);
  std::map<std::string, std::vector<std::string>> absorbed;  // layer -> identities, in order
  for (auto& [name, m] : layers) {
    const std::vector<int> calls = graph.calls(m);
    for (int id = calls.empty() ? -1 : calls.front(); id >= 0;) {
      const std::vector<int> users = graph.users(id);
      id = -1;
      if (users.size() != 1) break;
      const nn::GraphNode& u = graph.nodes[static_cast<std::size_t>(users.front())];
      if (u.kind != nn::GraphNode::Kind::Module || u.type != "Identity") break;
      absorbed[name].push_back(u.name);
      id = users.front();
    }
  }

  std::map<std::string, Tensor> float_out, quant_out;
  NumericReport report;
  {
    TrainingFlags restore_float(float_model), restore_quant(quant_model);
    Hooks hooks;
    for (auto& [name, m] : layers) {
      hooks.capture(*m, name, quant_out);
      const std::string point = absorbed.count(name) ? absorbed[name].back() : name;
      if (nn::Module* fm = find(float_model, point)) hooks.capture(*fm, point, float_out);
    }
    float_model.eval();
    quant_model.eval();
    NoGradGuard no_grad;
    float_model(batch);
    quant_model(batch);
  }

  NoGradGuard no_grad;
  for (auto& [name, m] : layers) {
    LayerNumerics r{name, m->type_name(), absorbed.count(name) ? absorbed[name].back() : name,
                    kNaN, kNaN,           kNaN,
                    kNaN, kNaN,           kNaN,
                    kNaN};
    // The float weight, folded with the float batch norm that the layer absorbed (if any).
    Tensor w_float;
    nn::Module* fm = find(float_model, name);
    if (fm && fm->has_parameter("weight")) {
      w_float = fm->parameter("weight").detach();
      for (const std::string& a : absorbed[name])
        if (auto* bn = dynamic_cast<nn::BatchNorm*>(find(float_model, a)))
          w_float = scale_rows(w_float, bn_factor(*bn));
    }
    Tensor w_quant, w_scale;
    double lo = kNaN, hi = kNaN;  // representable output range
    bool channels_last = false;
    Quantizer* act = nullptr;
    if (auto* layer = dynamic_cast<QatLayer*>(m)) {
      Tensor w = layer->weight().detach();
      if (auto* cb = dynamic_cast<BnFoldedLayer*>(layer)) w = scale_rows(w, bn_factor(*cb->bn()));
      w_quant = layer->weight_fake_quant() ? layer->weight_fake_quant()->forward(w) : w;
      if (layer->weight_fake_quant()) w_scale = layer->weight_fake_quant()->qparams().scale;
      act = layer->activation_fake_quant().get();
    } else if (auto* stub = dynamic_cast<QuantStub*>(m)) {
      act = stub->quantizer().get();
    } else if (m->has_buffer("output_range")) {  // int8 layers
      r.scale = m->buffer("scale").to(DType::Float32).item();
      r.zero_point = m->buffer("zero_point").to(DType::Float32).item();
      const Tensor range = m->buffer("output_range");
      lo = (range.data<std::int32_t>()[0] - r.zero_point) * r.scale;
      hi = (range.data<std::int32_t>()[1] - r.zero_point) * r.scale;
      if (auto* wl = dynamic_cast<QuantizedWeightLayer*>(m)) {
        w_scale = wl->weight_scale();
        std::vector<double> s = values(w_scale);
        w_quant = scale_rows(wl->weight(), s);  // w = s_o q (symmetric int8)
      }
      if (auto* conv = dynamic_cast<QuantizedConv2d*>(m)) channels_last = conv->output_channels_last();
    } else {
      act = output_quantizer(*m);
    }
    if (act) {
      const QParams q = act->qparams();
      if (q.scale.numel() == 1) {
        r.scale = q.scale.item();
        r.zero_point = q.zero_point.to(DType::Float32).item();
        if (act->spec().format == Format::Int && !act->spec().is_microscaled() && !act->spec().dynamic) {
          lo = (act->spec().quant_min() - r.zero_point) * r.scale;
          hi = (act->spec().quant_max() - r.zero_point) * r.scale;
        }
      }
    }
    if (w_scale.defined()) {
      const std::vector<double> s = values(w_scale);
      r.weight_scale_min = *std::min_element(s.begin(), s.end());
      r.weight_scale_max = *std::max_element(s.begin(), s.end());
    }
    if (w_float.defined() && w_quant.defined() && w_float.shape() == w_quant.shape())
      r.weight_sqnr_db =
          sqnr_db(w_float, w_quant.dtype() == DType::Float32 ? w_quant : w_quant.to(DType::Float32));
    const auto fo = float_out.find(r.float_point);
    const auto qo = quant_out.find(name);
    if (fo != float_out.end() && qo != quant_out.end() && fo->second.dtype() == DType::Float32) {
      const Tensor y = dequantized(qo->second, channels_last);
      if (y.shape() == fo->second.shape()) r.activation_sqnr_db = sqnr_db(fo->second, y);
      if (!std::isnan(lo)) r.saturation = saturation(fo->second, lo, hi);
    }
    report.layers.push_back(r);
  }
  return report;
}

std::string NumericReport::table() const {
  const std::vector<std::string> head = {"layer",       "type",  "float point", "weight SQNR dB",
                                         "act SQNR dB", "scale", "zero point",  "weight scale min..max",
                                         "saturation %"};
  std::vector<std::vector<std::string>> rows{head};
  for (const LayerNumerics& l : layers)
    rows.push_back({l.name, l.type, l.float_point, number(l.weight_sqnr_db, 2),
                    number(l.activation_sqnr_db, 2), number(l.scale, 6), number(l.zero_point, 0),
                    std::isnan(l.weight_scale_min)
                        ? "-"
                        : number(l.weight_scale_min, 6) + ".." + number(l.weight_scale_max, 6),
                    number(100.0 * l.saturation, 3)});
  std::vector<std::size_t> width(head.size(), 0);
  for (const auto& row : rows)
    for (std::size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], row[c].size());
  std::ostringstream s;
  for (const auto& row : rows) {
    for (std::size_t c = 0; c < row.size(); ++c)
      s << (c ? "  " : "") << (c < 3 ? std::left : std::right) << std::setw(static_cast<int>(width[c]))
        << row[c];
    s << "\n";
  }
  return s.str();
}

std::string NumericReport::json() const {
  std::ostringstream s;
  s << "{\"layers\": [";
  for (std::size_t i = 0; i < layers.size(); ++i) {
    const LayerNumerics& l = layers[i];
    s << (i ? ", " : "") << "{\"name\": " << json_string(l.name) << ", \"type\": " << json_string(l.type)
      << ", \"float_point\": " << json_string(l.float_point)
      << ", \"weight_sqnr_db\": " << json_number(l.weight_sqnr_db)
      << ", \"activation_sqnr_db\": " << json_number(l.activation_sqnr_db)
      << ", \"scale\": " << json_number(l.scale) << ", \"zero_point\": " << json_number(l.zero_point)
      << ", \"weight_scale_min\": " << json_number(l.weight_scale_min)
      << ", \"weight_scale_max\": " << json_number(l.weight_scale_max)
      << ", \"saturation\": " << json_number(l.saturation) << "}";
  }
  s << "]}";
  return s.str();
}

}  // namespace qat::quant
