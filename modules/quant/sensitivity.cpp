#include "modules/quant/sensitivity.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>

#include "framework/autograd/grad_mode.h"
#include "framework/autograd/ops.h"
#include "framework/io/restore.h"
#include "modules/quant/control.h"
#include "modules/quant/detail/report_format.h"
#include "modules/quant/prepare.h"

namespace qat::quant {

namespace {

constexpr const char* kFn = "quant::sensitivity";
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Bits of one element of `spec` (no default: a new Format must say how it is stored).
double element_bits(const QuantSpec& spec) {
  switch (spec.format) {
    case Format::Int:
      return spec.bits;
    case Format::FP8_E4M3:
    case Format::FP8_E5M2:
      return 8;
    case Format::FP6_E3M2:
    case Format::FP6_E2M3:
      return 6;
    case Format::FP4_E2M1:
      return 4;
  }
  return spec.bits;
}

// Loss, accuracy and logits of `model` over `batches`, in eval mode without gradients.
struct Outcome {
  double loss = 0, accuracy = 0;
  std::vector<Tensor> logits;
};

Outcome evaluate(nn::Module& model, const std::vector<data::Batch>& batches) {
  NoGradGuard no_grad;
  model.eval();
  Outcome o;
  std::int64_t n = 0, correct = 0;
  for (const data::Batch& b : batches) {
    Tensor logits = model.forward(b.images);
    QAT_REQUIRE(logits.dim() == 2 && logits.size(0) == b.labels.numel(), kFn,
                "the model must output (N, classes) logits for a batch of ", b.labels.numel(), ", got ",
                logits.shape());
    logits = logits.to(DType::Float32);
    const std::int64_t bn = logits.size(0);
    o.loss += cross_entropy(logits, b.labels).item() * static_cast<double>(bn);
    const Tensor pred = argmax(logits, 1);
    const Tensor labels = b.labels.to(DType::Int64);
    for (std::int64_t i = 0; i < bn; ++i)
      correct += pred.data<std::int64_t>()[i] == labels.data<std::int64_t>()[i];
    n += bn;
    o.logits.push_back(logits);
  }
  o.loss /= static_cast<double>(n);
  o.accuracy = static_cast<double>(correct) / static_cast<double>(n);
  return o;
}

// 10 log10(sum f^2 / sum (f - q)^2) over every batch; +inf when they are equal.
double sqnr_db(const std::vector<Tensor>& f, const std::vector<Tensor>& q) {
  double signal = 0, noise = 0;
  for (std::size_t b = 0; b < f.size(); ++b)
    for (std::int64_t i = 0; i < f[b].numel(); ++i) {
      const double a = f[b].data<float>()[i], e = a - q[b].data<float>()[i];
      signal += a * a;
      noise += e * e;
    }
  if (noise == 0) return std::numeric_limits<double>::infinity();
  return 10.0 * std::log10(signal / noise);
}

nn::ModulePtr copy_of(const nn::Module& model, const std::function<nn::ModulePtr()>& build) {
  nn::ModulePtr m = build();
  QAT_REQUIRE(m != nullptr, kFn, "build() returned a null model");
  io::load_into(*m, io::capture(model));  // strict: same names and shapes
  return m;
}

// The configs of `registry` (user configs and replaced presets included) without its rules.
QConfigRegistry configs_only(const QConfigRegistry& registry) {
  QConfigRegistry out;
  for (const std::string& name : registry.names()) out.register_config(registry.get(name), true);
  return out;
}

}  // namespace

double bits_per_weight(const QConfig& config, const Shape& weight_shape) {
  if (!config.weight) return 32;
  const QuantSpec& spec = config.weight->spec;
  const double bits = element_bits(spec);
  const std::int64_t numel = weight_shape.numel();
  QAT_REQUIRE(numel > 0, "quant::bits_per_weight", "empty weight of shape ", weight_shape);
  std::int64_t group = numel;  // weights that share one scale (and zero point)
  double scale_bits = 32;
  if (spec.granularity == Granularity::PerChannel)
    group = numel / weight_shape[weight_shape.axis(spec.axis, "quant::bits_per_weight")];
  if (spec.granularity == Granularity::PerBlock) {
    group = spec.block_size;
    if (spec.block_scale_bits > 0) scale_bits = spec.block_scale_bits;
    if (spec.is_microscaled()) scale_bits = 8;  // E8M0 (MX: mxfp4 = 4 + 8/32 = 4.25) or E4M3 (NVFP4)
  }
  const double zero_point_bits = spec.symmetric || spec.format != Format::Int ? 0 : bits;
  return bits + (scale_bits + zero_point_bits) / static_cast<double>(group);
}

std::vector<std::string> SensitivityTable::layers() const {
  std::vector<std::string> out;
  for (const SensitivityRow& r : rows)
    if (std::find(out.begin(), out.end(), r.layer) == out.end()) out.push_back(r.layer);
  return out;
}

std::string SensitivityTable::table() const {
  using detail::fixed;
  std::vector<std::vector<std::string>> cells{
      {"layer", "config", "weights", "bits/weight", "loss drop", "acc drop %", "logit SQNR dB"}};
  for (const SensitivityRow& r : rows)
    cells.push_back({r.layer, r.config, std::to_string(r.weights), fixed(r.bits_per_weight, 3),
                     fixed(r.loss_drop, 4), fixed(100.0 * r.accuracy_drop, 2),
                     fixed(r.output_sqnr_db, 2)});
  std::ostringstream s;
  s << "float model on " << eval_samples << " held-out samples: loss " << fixed(float_loss, 4)
    << ", accuracy " << fixed(100.0 * float_accuracy, 2) << "%\n";
  std::istringstream lines(detail::aligned(cells, 2));
  std::string line;
  for (std::size_t i = 0; std::getline(lines, line); ++i) {  // line 0 is the header
    s << line;
    if (i > 0 && !rows[i - 1].ok()) s << "  n/a: " << rows[i - 1].error;
    s << "\n";
  }
  return s.str();
}

std::string SensitivityTable::json() const {
  using detail::json_number;
  using detail::json_string;
  std::ostringstream s;
  s << "{\"float_loss\": " << json_number(float_loss)
    << ", \"float_accuracy\": " << json_number(float_accuracy) << ", \"eval_samples\": " << eval_samples
    << ", \"rows\": [";
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const SensitivityRow& r = rows[i];
    s << (i ? ", " : "") << "{\"layer\": " << json_string(r.layer)
      << ", \"config\": " << json_string(r.config) << ", \"weights\": " << r.weights
      << ", \"bits_per_weight\": " << json_number(r.bits_per_weight)
      << ", \"loss_drop\": " << json_number(r.loss_drop)
      << ", \"accuracy_drop\": " << json_number(r.accuracy_drop)
      << ", \"output_sqnr_db\": " << json_number(r.output_sqnr_db);
    if (!r.ok()) s << ", \"error\": " << json_string(r.error);
    s << "}";
  }
  s << "]}";
  return s.str();
}

SensitivityTable sensitivity(const nn::Module& model, const std::function<nn::ModulePtr()>& build,
                             const std::vector<Tensor>& calibration_batches,
                             const std::vector<data::Batch>& eval_batches,
                             const std::vector<std::string>& candidates,
                             const SensitivityOptions& options) {
  QAT_REQUIRE(build != nullptr, kFn, "build is empty: it must return a fresh float model");
  QAT_REQUIRE(!calibration_batches.empty(), kFn, "calibration_batches is empty");
  QAT_REQUIRE(!eval_batches.empty(), kFn, "eval_batches is empty");
  QAT_REQUIRE(!candidates.empty(), kFn, "candidates is empty");
  const QConfigRegistry& registry = options.registry;
  for (const std::string& c : candidates)
    QAT_REQUIRE(
        c == "skip" || registry.contains(c), kFn, "candidate '", c, "' is not a registered config (",
        [&] {
          std::string names;
          for (const auto& n : registry.names()) names += (names.empty() ? "" : ", ") + n;
          return names;
        }(),
        ")");
  const Tensor& example = calibration_batches.front();

  // The quantizable layers: those with a weight that the registry's global default quantizes.
  std::vector<std::string> layers;
  {
    nn::ModulePtr probe = copy_of(model, build);
    const PrepareReport r = prepare_qat(*probe, registry, example);
    for (const PreparedLayer& l : r.layers)
      if (l.weight != "-" && l.to_type != "(float)") layers.push_back(l.name);
  }
  for (const std::string& name : options.layers)
    QAT_REQUIRE(std::find(layers.begin(), layers.end(), name) != layers.end(), kFn, "options.layers: '",
                name, "' is not a quantizable layer with a weight");
  if (!options.layers.empty()) layers = options.layers;

  std::map<std::string, Shape> weight_shape;
  for (const auto& [name, p] : model.named_parameters()) weight_shape.emplace(name, p.shape());

  SensitivityTable table;
  nn::ModulePtr reference = copy_of(model, build);
  const Outcome base = evaluate(*reference, eval_batches);
  table.float_loss = base.loss;
  table.float_accuracy = base.accuracy;
  for (const data::Batch& b : eval_batches) table.eval_samples += b.labels.numel();

  for (const std::string& layer : layers) {
    const auto ws = weight_shape.find(layer + ".weight");
    QAT_REQUIRE(ws != weight_shape.end(), kFn, "layer '", layer, "' has no parameter '", layer,
                ".weight' in the float model");
    for (const std::string& config : candidates) {
      SensitivityRow row{layer, config, ws->second.numel(), 32, kNaN, kNaN, kNaN, ""};
      if (config == "skip") {
        row.loss_drop = row.accuracy_drop = 0;
        row.output_sqnr_db = std::numeric_limits<double>::infinity();
        table.rows.push_back(row);
        continue;
      }
      row.bits_per_weight = bits_per_weight(registry.get(config), ws->second);
      QConfigRegistry one = configs_only(registry);
      one.set_global("skip");
      one.set_module_name(layer, config);
      nn::ModulePtr m = copy_of(model, build);
      try {
        prepare_qat(*m, one, example);
      } catch (const Error& e) {  // the config does not fit this layer
        row.error = e.what();
        table.rows.push_back(row);
        continue;
      }
      calibrate(*m, calibration_batches);
      const Outcome q = evaluate(*m, eval_batches);
      row.loss_drop = q.loss - base.loss;
      row.accuracy_drop = base.accuracy - q.accuracy;
      row.output_sqnr_db = sqnr_db(base.logits, q.logits);
      table.rows.push_back(row);
    }
  }
  return table;
}

}  // namespace qat::quant
