// convert for dynamically quantized activations and per-group weights (torchao's 8da4w,
// int8_dyn_act_int4_weight): the QAT Linear layers concerned become DynamicQuantizedLinear
// (dynamic_quantized_linear.h), shared by the Sequential walk and the graph path.
#include <cmath>

#include "framework/tensor/finite.h"
#include "modules/quant/detail/convert.h"
#include "modules/quant/dynamic_quantized_linear.h"
#include "modules/quant/qat_layers.h"
#include "modules/quant/quantizer.h"

namespace qat::quant::detail {

namespace {

// A per-block float32 weight spec along the inputs of an (O, K) weight.
bool per_group(const QuantSpec& s) {
  return s.granularity == Granularity::PerBlock && s.scale_format == ScaleFormat::Float32 &&
         (s.axis == 1 || s.axis == -1);
}

struct GroupedWeight {
  Tensor codes, scale;
  std::int64_t group;
};

// q = clamp(round_half_even(w * (1/s)), qmin, qmax) per output and group, as the fake quantizer.
GroupedWeight quantize_grouped(const Tensor& w, const std::shared_ptr<Quantizer>& q,
                               const std::string& who) {
  QAT_REQUIRE(q != nullptr, "convert", "layer '", who,
              "' has a float weight; the int8 backend needs a weight quantizer");
  QAT_REQUIRE(!RequireCalibrated::active() || q->calibrated(), "convert", "layer '", who,
              "': its weight quantizer never observed the weight (run at least one training or "
              "calibration forward before convert)");
  const QuantSpec& s = q->spec();
  const std::int64_t O = w.size(0), K = w.size(1);
  QAT_REQUIRE(
      s.format == Format::Int && s.bits <= 8 && s.symmetric && s.is_signed && !s.dynamic &&
          (s.granularity == Granularity::PerTensor ||
           (s.granularity == Granularity::PerChannel && w.shape().axis(s.axis, "convert") == 0) ||
           per_group(s)),
      "convert", "layer '", who, "': weight spec ", s.str(),
      " is not supported by the int8 backend (needs signed symmetric integer weights of <= 8 bits, "
      "per tensor, per output channel or per block of inputs)");
  const std::int64_t group = per_group(s) ? s.block_size : K, groups = (K + group - 1) / group;
  const QParams p = q->qparams();
  QAT_REQUIRE(p.scale.numel() == 1 || p.scale.numel() == O * groups, "convert", "layer '", who,
              "': weight quantizer has ", p.scale.numel(), " scales, expected ", O * groups);
  GroupedWeight out{Tensor::empty(w.shape(), DType::Int8),
                    Tensor::empty(Shape{O, groups}, DType::Float32), group};
  const float* pw = w.data<float>();
  const auto lo = static_cast<float>(s.quant_min()), hi = static_cast<float>(s.quant_max());
  for (std::int64_t o = 0; o < O; ++o)
    for (std::int64_t g = 0; g < groups; ++g) {
      const std::int64_t i = p.scale.numel() == 1 ? 0 : o * groups + g;
      QAT_REQUIRE(p.zero_point.data<std::int32_t>()[p.zero_point.numel() == 1 ? 0 : i] == 0, "convert",
                  "layer '", who, "': weight zero point must be 0");
      const float scale = p.scale.data<float>()[i], inv = 1.0f / scale;
      out.scale.data<float>()[o * groups + g] = scale;
      for (std::int64_t k = g * group; k < std::min(K, (g + 1) * group); ++k)
        out.codes.data<std::int8_t>()[o * K + k] =
            static_cast<std::int8_t>(std::clamp(std::nearbyint(pw[o * K + k] * inv), lo, hi));
    }
  return out;
}

}  // namespace

bool is_dynamic(const std::shared_ptr<Quantizer>& q) { return q != nullptr && q->spec().dynamic; }

Flow dynamic_flow(const std::shared_ptr<Quantizer>& q, const std::string& who) {
  const QuantSpec& s = q->spec();
  QAT_REQUIRE(s.format == Format::Int && s.bits <= 8 &&
                  (s.granularity == Granularity::PerTensor ||
                   (s.granularity == Granularity::PerChannel && s.axis == 0)),
              "convert", "layer '", who, "': dynamic activation spec ", s.str(),
              " has no int8 form (the int8 backend quantizes on the fly per tensor or per row: "
              "per-channel on axis 0, integers of <= 8 bits)");
  return Flow::dynamic_spec(s);
}

bool needs_dynamic(const QatLayer& layer, const Flow& in) {
  const auto& w = layer.weight_fake_quant();
  return in.dynamic.has_value() || is_dynamic(layer.activation_fake_quant()) ||
         (w && per_group(w->spec()));
}

std::pair<nn::ModulePtr, Flow> dynamic_layer(const QatLayer& layer, const Flow& in,
                                             const std::string& who) {
  QAT_REQUIRE(dynamic_cast<const QuantLinear*>(&layer) != nullptr, "convert", "layer '", who, "' (",
              layer.type_name(), ") ",
              in.dynamic ? "reads a dynamically quantized input"
                         : (is_dynamic(layer.activation_fake_quant()) ? "has a dynamic output quantizer"
                                                                      : "has per-block weight scales"),
              ": the int8 backend runs these for Linear layers only (DynamicQuantizedLinear); give "
              "this layer and the one before it static configs (e.g. int8_default), or 'skip'");
  QAT_REQUIRE(in.q || in.dynamic, "convert", "layer '", who,
              "' receives a float input; put a QuantStub before it");
  require_finite(layer.weight(), who, "weight", "");
  require_finite(layer.bias(), who, "bias", "");
  const GroupedWeight w = quantize_grouped(layer.weight(), layer.weight_fake_quant(), who);
  DynamicQuantizedLinear::Options opt;
  opt.input = in.dynamic;
  opt.group = w.group;
  opt.weight_bits = layer.weight_fake_quant()->spec().bits;
  opt.fused_relu = layer.fused_relu();
  Flow out;
  if (is_dynamic(layer.activation_fake_quant())) {
    out = dynamic_flow(layer.activation_fake_quant(), who);
  } else if (layer.activation_fake_quant()) {
    opt.output = activation_quant(layer.activation_fake_quant(), who);
    out = *opt.output;
  }
  const Tensor bias = layer.bias().defined() ? layer.bias().clone() : Tensor();
  return {std::make_shared<DynamicQuantizedLinear>(w.codes, w.scale, bias, opt), out};
}

}  // namespace qat::quant::detail
