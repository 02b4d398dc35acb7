#pragma once
// Crafted checkpoints for the hostile-input regression tests (issue 12): checkpoints of a tiny
// QAT CNN and its int8 conversion, each with one value that passes the CRC but is wrong. The
// generator (make_hostile.cpp) writes them to tests/io/hostile/ once; the committed bytes are
// the test data, and test_hostile.cpp loads each and expects its error (or, for the documented
// safe values, a successful load).
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "framework/autograd/ops.h"
#include "framework/io/io.h"
#include "framework/nn/nn.h"
#include "framework/optim/sgd.h"
#include "framework/tensor/dispatch.h"
#include "framework/tensor/random.h"
#include "modules/quant/quant.h"

namespace qat::test::hostile {

/// quant -> conv(1->2, 3x3, pad 1) -> bn -> relu -> flatten -> fc(32 -> 3) -> dequant on [N, 1, 4, 4].
inline nn::ModulePtr float_model() {
  auto net = std::make_shared<nn::Sequential>();
  net->push_back("quant", std::make_shared<quant::QuantStub>());
  net->push_back("conv", std::make_shared<nn::Conv2d>(1, 2, 3, Conv2dParams{.padding = {1, 1}}));
  net->push_back("bn", std::make_shared<nn::BatchNorm2d>(2));
  net->push_back("relu", std::make_shared<nn::ReLU>());
  net->push_back("flatten", std::make_shared<nn::Flatten>());
  net->push_back("fc", std::make_shared<nn::Linear>(32, 3));
  net->push_back("dequant", std::make_shared<quant::DeQuantStub>());
  return net;
}

inline Tensor example() { return Tensor::zeros(Shape{1, 1, 4, 4}); }

/// Which model a case's checkpoint belongs to.
enum class Kind { Qat, Lsq, Int8 };

/// The model a checkpoint of `kind` loads into: prepared with the preset (int8_default or
/// int8_lsq), and converted for Int8 (qparams from the file).
inline nn::ModulePtr model(Kind kind) {
  nn::ModulePtr m = float_model();
  quant::QConfigRegistry registry;
  registry.set_global(kind == Kind::Lsq ? "int8_lsq" : "int8_default");
  quant::prepare_qat(*m, registry, example());
  if (kind == Kind::Int8) quant::convert(*m, example(), {.require_calibrated = false});
  return m;
}

/// A checkpoint of model(kind) after a few SGD steps on noise (so every observer, LSQ scale and
/// batch-norm statistic holds a real value), with the metadata our examples write.
inline io::Checkpoint trained(Kind kind) {
  manual_seed(7);
  nn::ModulePtr m = float_model();
  quant::QConfigRegistry registry;
  registry.set_global(kind == Kind::Lsq ? "int8_lsq" : "int8_default");
  const quant::PrepareReport report = quant::prepare_qat(*m, registry, example());
  Generator gen(11);
  optim::SGD opt(m->named_parameters(), {.lr = 0.05, .momentum = 0.9});
  m->train();
  for (int step = 0; step < 6; ++step) {
    const Tensor x = Tensor::uniform(Shape{8, 1, 4, 4}, 0, 1, gen);
    const Tensor y = Tensor::from_vector<std::int64_t>({0, 1, 2, 0, 1, 2, 0, 1}, Shape{8});
    opt.zero_grad();
    Tensor loss = cross_entropy((*m)(x), y);
    loss.backward();
    opt.step();
  }
  m->eval();
  if (kind == Kind::Int8) {
    nn::ModulePtr q = float_model();
    quant::prepare_qat(*q, registry, example());
    io::load_into(*q, io::capture(*m));
    quant::convert(*q, example());
    io::Checkpoint c = io::capture(*q);
    c.metadata = quant::checkpoint_metadata(*m, report, /*converted=*/true);
    return c;
  }
  io::Checkpoint c = io::capture(*m);
  c.metadata = quant::checkpoint_metadata(*m, report);
  return c;
}

inline Tensor& tensor(io::Checkpoint& c, const std::string& name) {
  for (auto& [n, t] : c.tensors)
    if (n == name) return t;
  throw Error("hostile: no tensor '" + name + "' in the checkpoint");
}

/// Sets element `i` of tensor `name` to `v` (converted to the tensor's dtype).
inline void set(io::Checkpoint& c, const std::string& name, std::int64_t i, double v) {
  Tensor& t = tensor(c, name);
  Tensor copy = t.clone();
  qat::detail::dispatch_any(copy.dtype(), [&]<class T>() { copy.data<T>()[i] = static_cast<T>(v); });
  t = copy;
}

struct Case {
  std::string file;  ///< under tests/io/hostile/
  Kind kind;
  std::function<void(io::Checkpoint&)> mutate;
  /// Substrings of the expected CheckpointError; empty: the load must succeed (a value the
  /// library documents as safe).
  std::vector<std::string> expect;
};

inline constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
inline constexpr double kInf = std::numeric_limits<double>::infinity();

inline std::vector<Case> cases() {
  using V = std::vector<std::string>;
  return {
      // ---- QAT checkpoints (int8_default) ----
      {"qat_act_scale_denormal.qat", Kind::Qat,
       [](io::Checkpoint& c) { set(c, "quant.activation_post_process.scale", 0, 1e-45); },
       V{"quant.activation_post_process.scale[0] = 1.40129846e-45", "not a scale"}},
      {"qat_act_scale_huge.qat", Kind::Qat,
       [](io::Checkpoint& c) { set(c, "fc.activation_post_process.scale", 0, 1e38); },
       V{"fc.activation_post_process.scale[0] = 9.99999968e+37", "not a scale"}},
      {"qat_weight_zero_point_symmetric.qat", Kind::Qat,
       [](io::Checkpoint& c) { set(c, "fc.weight_fake_quant.zero_point", 1, 5); },
       V{"fc.weight_fake_quant.zero_point[1] = 5", "fixed zero point of int8 symmetric"}},
      {"qat_fake_quant_enabled_7.qat", Kind::Qat,
       [](io::Checkpoint& c) { set(c, "quant.activation_post_process.fake_quant_enabled", 0, 7); },
       V{"quant.activation_post_process.fake_quant_enabled[0] = 7", "0 or 1"}},
      {"qat_min_val_nan.qat", Kind::Qat,
       [](io::Checkpoint& c) {
         set(c, "quant.activation_post_process.activation_post_process.min_val", 0, kNaN);
       },
       V{"quant.activation_post_process.activation_post_process.min_val[0] = nan",
         "not a recorded range"}},
      {"qat_weight_nan.qat", Kind::Qat, [](io::Checkpoint& c) { set(c, "fc.weight", 7, kNaN); },
       V{"fc.weight[7] = nan", "not finite"}},
      {"qat_weight_inf.qat", Kind::Qat, [](io::Checkpoint& c) { set(c, "conv.weight", 0, -kInf); },
       V{"conv.weight[0] = -inf", "not finite"}},
      {"qat_bias_nan.qat", Kind::Qat, [](io::Checkpoint& c) { set(c, "fc.bias", 2, kNaN); },
       V{"fc.bias[2] = nan", "not finite"}},
      {"qat_bn_running_var_negative.qat", Kind::Qat,
       [](io::Checkpoint& c) { set(c, "conv.bn.running_var", 1, -1); },
       V{"conv.bn.running_var[1] = -1", "not a variance"}},
      {"qat_bn_running_var_nan.qat", Kind::Qat,
       [](io::Checkpoint& c) { set(c, "conv.bn.running_var", 0, kNaN); },
       V{"conv.bn.running_var[0] = nan", "not a variance"}},
      // var 0 is a channel that never varied: var + eps > 0, documented as accepted
      {"qat_bn_running_var_zero.qat", Kind::Qat,
       [](io::Checkpoint& c) { set(c, "conv.bn.running_var", 0, 0); }, V{}},
      {"qat_bn_num_batches_tracked_min.qat", Kind::Qat,
       [](io::Checkpoint& c) {
         set(c, "conv.bn.num_batches_tracked", 0, 0);
         tensor(c, "conv.bn.num_batches_tracked").data<std::int64_t>()[0] =
             std::numeric_limits<std::int64_t>::min();
       },
       V{"conv.bn.num_batches_tracked = -9223372036854775808", "not a batch count"}},
      {"qat_unknown_quantizer_kind.qat", Kind::Qat,
       [](io::Checkpoint& c) {
         c.metadata["quant.fc.weight_fake_quant"] = "bogus int8 symmetric per-channel(axis 0)";
       },
       V{"metadata 'quant.fc.weight_fake_quant'", "unknown quantizer kind 'bogus'"}},
      {"qat_spec_int40.qat", Kind::Qat,
       [](io::Checkpoint& c) {
         c.metadata["quant.fc.weight_fake_quant"] = "FakeQuantize int40 symmetric per-channel(axis 7)";
       },
       V{"metadata 'quant.fc.weight_fake_quant'", "int40", "bits must be in [2, 16]"}},
      {"qat_spec_other_axis.qat", Kind::Qat,
       [](io::Checkpoint& c) {
         c.metadata["quant.fc.weight_fake_quant"] = "FakeQuantize int8 symmetric per-channel(axis 7)";
       },
       V{"metadata 'quant.fc.weight_fake_quant'",
         "the model's quantizer is FakeQuantize int8 symmetric per-channel(axis 0)"}},
      {"qat_spec_escape_sequence.qat", Kind::Qat,
       [](io::Checkpoint& c) {
         c.metadata["quant.fc.weight_fake_quant"] = "bogus\x1b]0;owned\x07\r int8";
       },
       V{"bogus\\x1b]0;owned\\x07\\r int8"}},
      // ---- QAT checkpoints (int8_lsq) ----
      {"lsq_scale_nan.qat", Kind::Lsq,
       [](io::Checkpoint& c) { set(c, "fc.weight_fake_quant.scale", 0, kNaN); },
       V{"fc.weight_fake_quant.scale[0] = nan", "learnable scale"}},
      {"lsq_zero_point_inf.qat", Kind::Lsq,
       [](io::Checkpoint& c) { set(c, "quant.activation_post_process.zero_point", 0, kInf); },
       V{"quant.activation_post_process.zero_point[0] = inf", "learnable zero point"}},
      {"lsq_learning_enabled_2.qat", Kind::Lsq,
       [](io::Checkpoint& c) { set(c, "quant.activation_post_process.learning_enabled", 0, 2); },
       V{"quant.activation_post_process.learning_enabled[0] = 2", "0 or 1"}},
      // a scale the optimizer left negative is clamped up to eps by the next forward: accepted
      {"lsq_scale_negative.qat", Kind::Lsq,
       [](io::Checkpoint& c) { set(c, "fc.weight_fake_quant.scale", 0, -0.003); }, V{}},
      // ---- int8 checkpoints (converted from int8_default) ----
      {"int8_weight_scale_nan.qat", Kind::Int8,
       [](io::Checkpoint& c) { set(c, "fc.weight_scale", 0, kNaN); }, V{"fc.weight_scale[0] = nan"}},
      {"int8_weight_scale_zero.qat", Kind::Int8,
       [](io::Checkpoint& c) { set(c, "fc.weight_scale", 1, 0); }, V{"fc.weight_scale[1] = 0"}},
      {"int8_weight_scale_negative.qat", Kind::Int8,
       [](io::Checkpoint& c) { set(c, "conv.weight_scale", 0, -1); }, V{"conv.weight_scale[0] = -1"}},
      {"int8_weight_scale_inf.qat", Kind::Int8,
       [](io::Checkpoint& c) { set(c, "fc.weight_scale", 2, kInf); }, V{"fc.weight_scale[2] = inf"}},
      {"int8_weight_scale_denormal.qat", Kind::Int8,
       [](io::Checkpoint& c) { set(c, "fc.weight_scale", 0, 1e-45); },
       V{"fc.weight_scale[0] = 1.40129846e-45"}},
      {"int8_output_range_reversed.qat", Kind::Int8,
       [](io::Checkpoint& c) {
         set(c, "conv.output_range", 0, 255);
         set(c, "conv.output_range", 1, 0);
       },
       V{"conv.output_range"}},
      // (these files hold the int32 bias of the format before the float bias: load_into upgrades
      // it to float, then refuses it in accumulator units)
      {"int8_bias_max.qat", Kind::Int8, [](io::Checkpoint& c) { set(c, "fc.bias", 0, 2147483647.0); },
       V{"fc.bias[0] = ", "accumulator units", "beyond the int32 room"}},
      {"int8_bias_min.qat", Kind::Int8, [](io::Checkpoint& c) { set(c, "conv.bias", 1, -2147483648.0); },
       V{"conv.bias[1] = ", "accumulator units", "beyond the int32 room"}},
      {"int8_zero_point_max.qat", Kind::Int8,
       [](io::Checkpoint& c) { set(c, "conv.zero_point", 0, 2147483647.0); },
       V{"conv.output_range = [0, 255], zero_point = 2147483647", "lo <= zero_point <= hi"}},
      {"int8_input_zero_point_min.qat", Kind::Int8,
       [](io::Checkpoint& c) { set(c, "fc.input_zero_point", 0, -2147483648.0); },
       V{"fc.input_zero_point[0] = -2147483648"}},
      {"int8_quantize_scale_nan.qat", Kind::Int8,
       [](io::Checkpoint& c) { set(c, "quant.scale", 0, kNaN); }, V{"quant.scale[0] = nan"}},
  };
}

}  // namespace qat::test::hostile
