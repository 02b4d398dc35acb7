#include "examples/common/distill.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <sstream>

#include "framework/autograd/grad_mode.h"
#include "framework/autograd/ops.h"
#include "framework/io/checkpoint.h"
#include "framework/io/checkpoint_error.h"
#include "framework/io/restore.h"
#include "framework/tensor/error.h"

namespace qat::examples {

namespace {
void add_feature_options(CLI::App& app, DistillOptions& o, CLI::Option* distill) {
  app.add_option("--kd-features", o.features,
                 "with --distill: also match these modules' outputs (names in both models, e.g. "
                 "pool1,pool2) by mean squared error")
      ->delimiter(',')
      ->needs(distill);
  app.add_option("--kd-feature-weight", o.feature_weight,
                 "with --kd-features: loss += beta sum_f mean((student_f - teacher_f)^2)")
      ->check(CLI::Range(0.0, 1e6))
      ->needs(distill)
      ->capture_default_str();
}
}  // namespace

void add_distill_options(CLI::App& app, DistillOptions& o) {
  auto* distill = app.add_option("--distill", o.teacher,
                                 "train against a teacher: an fp32 checkpoint written by --save of an "
                                 "fp32 run (Hinton et al. 2015 distillation)");
  app.add_option("--kd-weight", o.weight,
                 "with --distill: loss = (1-w) CE + w T^2 KL(teacher || student), w in [0, 1]")
      ->check(CLI::Range(0.0, 1.0))
      ->needs(distill)
      ->capture_default_str();
  app.add_option("--kd-temperature", o.temperature, "with --distill: softmax temperature T in (0, 1000]")
      ->check(CLI::Validator(
          [](std::string& text) -> std::string {
            char* end = nullptr;
            const double v = std::strtod(text.c_str(), &end);
            if (text.empty() || end != text.c_str() + text.size() || !(v > 0 && v <= 1000))
              return "'" + text + "' is not in (0, 1000]";
            return "";
          },
          "(0, 1000]"))
      ->needs(distill)
      ->capture_default_str();
  add_feature_options(app, o, distill);
}

Teacher::Teacher(const DistillOptions& options, const ModelFactory& factory) : options_(options) {
  const io::Checkpoint ckpt = io::load(options.teacher);
  const auto entry = [&](const std::string& key) {
    const auto it = ckpt.metadata.find(key);
    if (it == ckpt.metadata.end())
      throw io::CheckpointError(
          options.teacher,
          "--distill: has no '" + key + "' metadata entry: not written by " + factory.program);
    return it->second;
  };
  if (entry("model") != factory.model)
    throw io::CheckpointError(options.teacher, "--distill: holds a '" +
                                                   detail::printable(entry("model")) + "' model, not '" +
                                                   factory.model + "'");
  if (entry("kind") != "fp32")
    throw io::CheckpointError(options.teacher,
                              "--distill: the teacher must be an fp32 checkpoint (written by --save of "
                              "a --mode fp32 run), this one is '" +
                                  detail::printable(entry("kind")) + "'");
  arch_ = entry("arch");
  if (std::find(factory.archs.begin(), factory.archs.end(), arch_) == factory.archs.end())
    throw io::CheckpointError(
        options.teacher, "--distill: holds unknown architecture '" + detail::printable(arch_) + "'");
  model_ = factory.build(arch_);
  io::load_into(*model_, ckpt);  // strict: names, shapes, values checked
  model_->eval();
}

namespace {
nn::Module& module_named(nn::Module& model, const std::string& name, const char* which) {
  std::string known;
  for (auto& [n, m] : model.named_modules()) {
    if (n == name) return *m;
    if (!n.empty() && n.find('.') == std::string::npos) known += (known.empty() ? "" : ", ") + n;
  }
  throw Error("--kd-features: the " + std::string(which) + " has no module '" + detail::printable(name) +
              "' (its top-level modules: " + known + ")");
}
}  // namespace

void Teacher::attach(nn::Module& student) {
  const std::size_t n = options_.features.size();
  student_features_.assign(n, Tensor());
  teacher_features_.assign(n, Tensor());
  for (std::size_t i = 0; i < n; ++i) {
    const std::string& name = options_.features[i];
    nn::Module& s = module_named(student, name, "student");
    nn::Module& t = module_named(*model_, name, "teacher");
    s.register_forward_hook(
        [this, i](nn::Module&, const std::vector<Tensor>&, Tensor& out) { student_features_[i] = out; });
    t.register_forward_hook(
        [this, i](nn::Module&, const std::vector<Tensor>&, Tensor& out) { teacher_features_[i] = out; });
  }
}

Tensor Teacher::loss(const Tensor& student_logits, const data::Batch& batch) {
  Tensor teacher_logits;
  {
    NoGradGuard no_grad;
    teacher_logits = model_->forward(batch.images);
  }
  Tensor loss = distillation_loss(student_logits, teacher_logits, batch.labels, options_.weight,
                                  options_.temperature);
  for (std::size_t i = 0; i < student_features_.size(); ++i) {
    const Tensor& s = student_features_[i];
    const Tensor& t = teacher_features_[i];
    QAT_REQUIRE(s.defined() && t.defined() && s.shape() == t.shape(), "--kd-features", "module '",
                options_.features[i], "' gives ", s.defined() ? s.shape() : Shape{},
                " in the student and ", t.defined() ? t.shape() : Shape{},
                " in the teacher (or was not called)");
    const Tensor d = s - t;
    loss = loss + mul(mean(mul(d, d)), options_.feature_weight);
    student_features_[i] = Tensor();  // the next forward sets it again
  }
  return loss;
}

std::string Teacher::describe() const {
  std::ostringstream s;
  s << arch_ << " teacher '" << options_.teacher << "', weight " << options_.weight << ", T "
    << options_.temperature;
  if (!options_.features.empty()) {
    s << ", features";
    for (const auto& f : options_.features) s << " " << f;
    s << " (MSE weight " << options_.feature_weight << ")";
  }
  return s.str();
}

}  // namespace qat::examples
