#include "modules/quant/convert.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <sstream>

#include "framework/nn/basic.h"
#include "framework/nn/sequential.h"
#include "framework/tensor/finite.h"
#include "modules/quant/detail/convert.h"
#include "modules/quant/dynamic_quantized_linear.h"
#include "modules/quant/qat_layers.h"
#include "modules/quant/quantized_layers.h"
#include "modules/quant/stubs.h"

namespace qat::quant {

namespace detail {

thread_local bool g_require_calibrated = true;

RequireCalibrated::RequireCalibrated(bool on) : prev_(g_require_calibrated) {
  g_require_calibrated = on;
}
RequireCalibrated::~RequireCalibrated() { g_require_calibrated = prev_; }
bool RequireCalibrated::active() { return g_require_calibrated; }

// An activation quantizer's 8-bit grid as uint8 storage: signed codes shift by 128.
ActivationQuant activation_quant(const std::shared_ptr<Quantizer>& q, const std::string& who) {
  QAT_REQUIRE(q != nullptr, "convert", "layer '", who,
              "' has no output quantizer; the int8 "
              "backend needs quantized outputs (give it an activation config)");
  QAT_REQUIRE(!g_require_calibrated || q->calibrated(), "convert", "layer '", who,
              "': its output quantizer never observed data (train the model, or calibrate it with "
              "quant::calibrate, before convert)");
  const QuantSpec& s = q->spec();
  QAT_REQUIRE(!s.dynamic, "convert", "layer '", who, "': activation spec ", s.str(),
              " is dynamic (qparams from each batch); the int8 backend quantizes activations with "
              "fixed qparams and has no dynamic int8 path yet: calibrate a static activation config "
              "for this layer instead");
  QAT_REQUIRE(!s.is_microscaled(), "convert", "layer '", who, "': activation spec ", s.str(),
              " has E8M0 / E4M3 block scales (MX, NVFP4), which the int8 backend does not run");
  QAT_REQUIRE(s.format == Format::Int && s.bits <= 8 && s.granularity == Granularity::PerTensor,
              "convert", "layer '", who, "': activation spec ", s.str(),
              " is not supported by the int8 backend (needs a per-tensor integer spec of <= 8 bits)");
  const QParams p = q->qparams();
  const std::int32_t off = s.is_signed ? 128 : 0;
  return {{p.scale.data<float>()[0], p.zero_point.data<std::int32_t>()[0] + off},
          static_cast<std::int32_t>(s.quant_min()) + off,
          static_cast<std::int32_t>(s.quant_max()) + off};
}

// q = clamp(round(w / s_o), qmin, qmax) per output channel, exactly as the fake quantizer.
struct QuantizedWeight {
  Tensor weight, scale;
};

QuantizedWeight quantize_weight(const Tensor& w, const std::shared_ptr<Quantizer>& q,
                                const std::string& who) {
  QAT_REQUIRE(q != nullptr, "convert", "layer '", who,
              "' has a float weight; the int8 backend needs a "
              "weight quantizer");
  QAT_REQUIRE(!g_require_calibrated || q->calibrated(), "convert", "layer '", who,
              "': its weight quantizer never observed the weight (run at least one training or "
              "calibration forward before convert)");
  const QuantSpec& s = q->spec();
  QAT_REQUIRE(!s.is_microscaled(), "convert", "layer '", who, "': weight spec ", s.str(),
              " has E8M0 / E4M3 block scales (MX, NVFP4), which the int8 backend does not run");
  QAT_REQUIRE(s.format == Format::Int && s.bits <= 8 && s.symmetric && s.is_signed &&
                  (s.granularity == Granularity::PerTensor ||
                   (s.granularity == Granularity::PerChannel && w.shape().axis(s.axis, "convert") == 0)),
              "convert", "layer '", who, "': weight spec ", s.str(),
              " is not supported by the int8 "
              "backend (needs signed symmetric per-tensor or per-output-channel, <= 8 bits)");
  const QParams p = q->qparams();
  const std::int64_t O = w.size(0), K = w.numel() / O;
  QuantizedWeight out{Tensor::empty(w.shape(), DType::Int8), Tensor::empty(Shape{O}, DType::Float32)};
  const float* pw = w.data<float>();
  for (std::int64_t o = 0; o < O; ++o) {
    const float scale = p.scale.data<float>()[p.scale.numel() == 1 ? 0 : o];
    QAT_REQUIRE(p.zero_point.data<std::int32_t>()[p.zero_point.numel() == 1 ? 0 : o] == 0, "convert",
                "layer '", who, "': weight zero point must be 0");
    out.scale.data<float>()[o] = scale;
    const float inv = 1.0f / scale, lo = static_cast<float>(s.quant_min()),
                hi = static_cast<float>(s.quant_max());
    for (std::int64_t k = 0; k < K; ++k)
      out.weight.data<std::int8_t>()[o * K + k] =
          static_cast<std::int8_t>(std::clamp(std::nearbyint(pw[o * K + k] * inv), lo, hi));
  }
  return out;
}

// The float bias of the int8 layer (its output stage adds it in float, as the QAT model). It is
// refused beyond the int32 accumulator's room for K products in units of s_in s_w[o], the bias an
// integer-only backend (ONNX QLinearConv / QLinearMatMul) needs: such a bias dwarfs every product
// (a diverged model).
Tensor checked_bias(const Tensor& b, const Tensor& w_scale, double s_in, std::int64_t K,
                    const std::string& who) {
  if (!b.defined()) return Tensor();
  const double room = 2147483647.0 - 2.0 * 255 * 128 * static_cast<double>(K);
  for (std::int64_t o = 0; o < b.numel(); ++o) {
    const double v =
        std::nearbyint(static_cast<double>(b.data<float>()[o]) / (s_in * w_scale.data<float>()[o]));
    QAT_REQUIRE(std::fabs(v) <= room, "convert", "layer '", who, "': bias[", o,
                "] = ", b.data<float>()[o], " is ", v, " accumulator units (s_in ", s_in, " x s_w ",
                w_scale.data<float>()[o], "), beyond the int32 room of ", room, " for ", K,
                " products (a diverged model?)");
  }
  return b.clone();
}

// NaN / inf would reach float -> int casts: refused, naming the layer, the tensor and the value.
void require_finite(const Tensor& t, const std::string& who, const char* what, const char* note) {
  if (!t.defined()) return;
  const ::qat::detail::NonFinite nf = ::qat::detail::find_nonfinite(t);
  QAT_REQUIRE(nf.count == 0, "convert", "layer '", who, "': ", what,
              ::qat::detail::index_text(t.shape(), nf.first), note, " = ", nf.value, " is not finite (",
              nf.count, " of ", t.numel(),
              " values; the model diverged? optim/divergence.h stops "
              "training at the first such step)");
}

// W' = W f, b' = (b - mean) f + beta, f = gamma / sqrt(running_var + eps)
Folded fold(const BnFoldedLayer& cb) {
  const nn::BatchNorm& bn = *cb.bn();
  const std::int64_t O = cb.weight().size(0), K = cb.weight().numel() / O;
  Folded f{cb.weight().clone(), Tensor::empty(Shape{O}, DType::Float32)};
  for (std::int64_t o = 0; o < O; ++o) {
    const float s = bn.weight().data<float>()[o] /
                    std::sqrt(bn.running_var().data<float>()[o] + static_cast<float>(bn.eps()));
    for (std::int64_t k = 0; k < K; ++k) f.weight.data<float>()[o * K + k] *= s;
    const float b = cb.bias().defined() ? cb.bias().data<float>()[o] : 0.0f;
    f.bias.data<float>()[o] = (b - bn.running_mean().data<float>()[o]) * s + bn.bias().data<float>()[o];
  }
  return f;
}

// The int8 layer for a QAT layer whose input is quantized as `in`, and its output quantization.
std::pair<nn::ModulePtr, ActivationQuant> int8_layer(const QatLayer& layer, const ActivationQuant& in,
                                                     const std::string& full) {
  const auto* bnl = dynamic_cast<const BnFoldedLayer*>(&layer);
  const Folded f = bnl ? fold(*bnl) : Folded{layer.weight(), layer.bias()};
  const char* note = bnl ? " (folded with batch norm)" : "";
  require_finite(f.weight, full, "weight", note);
  require_finite(f.bias, full, "bias", note);
  const QuantizedWeight w = quantize_weight(f.weight, layer.weight_fake_quant(), full);
  const Tensor bias =
      checked_bias(f.bias, w.scale, in.quant.scale, f.weight.numel() / f.weight.size(0), full);
  const ActivationQuant out = activation_quant(layer.activation_fake_quant(), full);
  if (dynamic_cast<const QuantLinear*>(&layer) || dynamic_cast<const LinearBn1d*>(&layer))
    return {
        std::make_shared<QuantizedLinear>(w.weight, w.scale, bias, in.quant, out, layer.fused_relu()),
        out};
  const auto* cb = dynamic_cast<const ConvBn2d*>(&layer);
  const Conv2dParams params = cb ? cb->params() : static_cast<const QuantConv2d&>(layer).params();
  return {std::make_shared<QuantizedConv2d>(w.weight, w.scale, bias, in.quant, out, layer.fused_relu(),
                                            params),
          out};
}

void require_prepared(nn::Module& model) {
  for (auto& [name, m] : model.named_modules())
    if (dynamic_cast<Quantizer*>(m)) return;
  for (auto& [name, m] : model.named_modules())
    QAT_REQUIRE(!dynamic_cast<QuantizedWeightLayer*>(m) && !dynamic_cast<Quantize*>(m) &&
                    !dynamic_cast<DynamicQuantizedLinear*>(m),
                "convert", "the model is converted already ('", name, "' is a ", m->type_name(), ")");
  throw Error(
      "convert: the model has no quantizers: call prepare_qat (then train, or calibrate with "
      "quant::calibrate) before convert");
}

}  // namespace detail

namespace {

using detail::Flow;

std::string join(const std::string& prefix, const std::string& name) {
  return prefix.empty() ? name : prefix + "." + name;
}

struct Swap {
  nn::Module* parent;
  std::string name;
  nn::ModulePtr module;
};

struct Converter {
  std::vector<Swap> swaps;
  ConvertReport report;

  void record(nn::Module* parent, const std::string& name, const std::string& full,
              const nn::ModulePtr& from, nn::ModulePtr to) {
    report.layers.push_back({full, from->type_name(), to->type_name()});
    swaps.push_back({parent, name, std::move(to)});
  }

  // Converts the children of `parent` in order; returns the flow after them. Quantized
  // layers must sit in Sequential containers: elsewhere their execution order is unknown.
  Flow walk(nn::Module& parent, const std::string& prefix, Flow flow) {
    const bool ordered = dynamic_cast<nn::Sequential*>(&parent) != nullptr;
    for (const auto& [name, child] : parent.named_children()) {
      const std::string full = join(prefix, name), type = child->type_name();
      const auto qat_layer = std::dynamic_pointer_cast<QatLayer>(child);
      const bool quant_layer = std::dynamic_pointer_cast<QuantStub>(child) || type == "DeQuantStub" ||
                               (qat_layer && qat_layer->has_quantizers());
      QAT_REQUIRE(ordered || (!quant_layer && !flow), "convert", "layer '", full, "' is inside ",
                  parent.type_name(),
                  ", which is not a Sequential: its execution order (and so "
                  "its input quantization) is unknown without the graph; call convert(model, "
                  "example_input)");
      if (auto stub = std::dynamic_pointer_cast<QuantStub>(child)) {
        if (!stub->quantizer()) continue;
        if (detail::is_dynamic(stub->quantizer())) {  // the next layer quantizes on the fly
          flow = detail::dynamic_flow(stub->quantizer(), full);
          record(&parent, name, full, child, std::make_shared<nn::Identity>());
          continue;
        }
        const ActivationQuant a = detail::activation_quant(stub->quantizer(), full);
        record(&parent, name, full, child, std::make_shared<Quantize>(a));
        flow = a;
      } else if (type == "DeQuantStub") {
        if (flow.dynamic)
          record(&parent, name, full, child, std::make_shared<DynamicQuantDequant>(*flow.dynamic));
        else
          record(&parent, name, full, child, std::make_shared<Dequantize>());
        flow.reset();
      } else if (auto layer = std::dynamic_pointer_cast<QatLayer>(child);
                 layer && layer->has_quantizers() && detail::needs_dynamic(*layer, flow)) {
        auto [q, out] = detail::dynamic_layer(*layer, flow, full);
        record(&parent, name, full, child, q);
        flow = out;
      } else if (auto layer = std::dynamic_pointer_cast<QatLayer>(child);
                 layer && layer->has_quantizers()) {
        require_quantized_input(flow, full);
        auto [q, out] = detail::int8_layer(*layer, *flow, full);
        record(&parent, name, full, child, q);
        flow = out;
      } else if (auto qp = std::dynamic_pointer_cast<QuantPool>(child); qp && flow) {
        nn::ModulePtr inner = qp->pool();
        if (auto avg = std::dynamic_pointer_cast<nn::AvgPool2d>(inner))
          record(&parent, name, full, child, std::make_shared<QuantizedAvgPool2d>(avg->params()));
        else
          record(&parent, name, full, child,
                 std::make_shared<QuantizedAdaptiveAvgPool2d>(
                     std::static_pointer_cast<nn::AdaptiveAvgPool2d>(inner)->output_size()));
      } else if (!child->named_children().empty()) {
        flow = walk(*child, full, flow);  // a container
      } else if (flow.dynamic) {
        // float values the next layer quantizes with their own range: only shape changes keep it
        if (type == "Dropout") record(&parent, name, full, child, std::make_shared<nn::Identity>());
        QAT_REQUIRE(type == "Flatten" || type == "Identity" || type == "Dropout", "convert", "layer '",
                    full, "' (", type,
                    ") reads dynamically quantized values: after convert the next layer quantizes "
                    "them on the fly, from the range of its own input, so only Flatten / Identity / "
                    "Dropout may come between (fuse a ReLU into the layer before)");
      } else if (!flow) {
        continue;  // the float region stays as it is
      } else if (type == "ReLU") {
        record(&parent, name, full, child, std::make_shared<QuantizedReLU>());
      } else if (auto pool = std::dynamic_pointer_cast<nn::MaxPool2d>(child)) {
        record(&parent, name, full, child, std::make_shared<QuantizedMaxPool2d>(pool->params()));
      } else if (auto avg = std::dynamic_pointer_cast<nn::AvgPool2d>(child)) {
        record(&parent, name, full, child, std::make_shared<QuantizedAvgPool2d>(avg->params()));
      } else if (auto ada = std::dynamic_pointer_cast<nn::AdaptiveAvgPool2d>(child)) {
        record(&parent, name, full, child,
               std::make_shared<QuantizedAdaptiveAvgPool2d>(ada->output_size()));
      } else if (type == "Dropout") {
        record(&parent, name, full, child, std::make_shared<nn::Identity>());
      } else if (type != "Flatten" && type != "Identity") {  // shape-only layers pass through
        throw Error(qat::detail::concat(
            "convert: layer '", full, "' (", type,
            ") inside the quantized "
            "region has no int8 version; end the region with a DeQuantStub before it"));
      }
    }
    return flow;
  }

  static void require_quantized_input(const Flow& flow, const std::string& full) {
    QAT_REQUIRE(flow, "convert", "layer '", full, "' receives a float input; put a QuantStub before it");
  }
};

// Whether a Flatten child flattens (N, ...) into (N, rest) (probed on a small tensor).
bool flattens_to_rows(nn::Module& m) {
  const Tensor y = m.forward(Tensor::zeros(Shape{1, 2, 3, 4}));
  return y.shape() == Shape{1, 24};
}

// Channels-last activations inside the quantized region: in each Sequential, a QuantizedConv2d
// followed by only QuantizedReLU / Identity / QuantizedMaxPool2d and then a QuantizedConv2d, or
// a Flatten (to rows) and a QuantizedLinear, hands its output over as (N, H, W, C): the pools
// in between and the consumer read that layout (the linear's weight columns are permuted when
// packed). The outputs are the same values; only the transposes go.
void link_layouts(nn::Module& parent) {
  for (const auto& [name, child] : parent.named_children())
    if (!child->named_children().empty()) link_layouts(*child);
  if (!dynamic_cast<nn::Sequential*>(&parent)) return;
  std::vector<nn::ModulePtr> kids;
  for (const auto& [name, child] : parent.named_children()) kids.push_back(child);
  for (std::size_t i = 0; i < kids.size(); ++i) {
    auto conv = std::dynamic_pointer_cast<QuantizedConv2d>(kids[i]);
    if (!conv) continue;
    std::vector<std::shared_ptr<QuantizedMaxPool2d>> pools;
    std::size_t j = i + 1;
    for (; j < kids.size(); ++j) {
      if (auto pool = std::dynamic_pointer_cast<QuantizedMaxPool2d>(kids[j]))
        pools.push_back(pool);
      else if (kids[j]->type_name() != "QuantizedReLU" && kids[j]->type_name() != "Identity")
        break;
    }
    if (j == kids.size()) continue;
    bool linked = false;
    if (auto next = std::dynamic_pointer_cast<QuantizedConv2d>(kids[j])) {
      next->set_layout(true, next->output_channels_last());
      linked = true;
    } else if (kids[j]->type_name() == "Flatten" && j + 1 < kids.size() && flattens_to_rows(*kids[j])) {
      if (auto fc = std::dynamic_pointer_cast<QuantizedLinear>(kids[j + 1])) {
        fc->set_input_channels_last(conv->weight().size(0));
        linked = true;
      }
    }
    if (!linked) continue;
    conv->set_layout(conv->input_channels_last(), true);
    for (const auto& pool : pools) pool->set_channels_last(true);
  }
}

}  // namespace

ConvertReport convert(nn::Module& model, const ConvertOptions& options) {
  detail::RequireCalibrated guard(options.require_calibrated);
  detail::require_prepared(model);
  Converter c;
  c.walk(model, "", std::nullopt);
  for (const Swap& s : c.swaps) s.parent->replace_child(s.name, s.module);
  link_layouts(model);
  model.eval();
  return c.report;
}

std::string ConvertReport::table() const {
  std::size_t w0 = 5, w1 = 4;
  for (const auto& l : layers) w0 = std::max(w0, l.name.size()), w1 = std::max(w1, l.from_type.size());
  std::ostringstream os;
  os << "layer" << std::string(w0 - 3, ' ') << "from" << std::string(w1 - 2, ' ') << "to\n";
  for (const auto& l : layers)
    os << l.name << std::string(w0 - l.name.size() + 2, ' ') << l.from_type
       << std::string(w1 - l.from_type.size() + 2, ' ') << l.to_type << "\n";
  for (const auto& n : notes) os << "note: " << n << "\n";
  return os.str();
}

}  // namespace qat::quant
