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

Tensor Teacher::loss(const Tensor& student_logits, const data::Batch& batch) {
  Tensor teacher_logits;
  {
    NoGradGuard no_grad;
    teacher_logits = model_->forward(batch.images);
  }
  return distillation_loss(student_logits, teacher_logits, batch.labels, options_.weight,
                           options_.temperature);
}

std::string Teacher::describe() const {
  std::ostringstream s;
  s << arch_ << " teacher '" << options_.teacher << "', weight " << options_.weight << ", T "
    << options_.temperature;
  return s.str();
}

}  // namespace qat::examples
