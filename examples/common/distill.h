#pragma once
// Knowledge distillation for the example programs (Hinton et al. 2015): an fp32 teacher loaded
// from a checkpoint runs beside the (QAT) student in eval mode without recording a graph, and the
// training loss becomes distillation_loss(student, teacher, labels, weight, T) (autograd/ops.h).
#include <memory>
#include <string>

#include "examples/common/app.h"
#include "framework/data/dataloader.h"

namespace CLI {
class App;
}

namespace qat::examples {

struct DistillOptions {
  std::string teacher;       ///< --distill: an fp32 checkpoint written by --save of an fp32 run
  double weight = 0.5;       ///< --kd-weight w in [0, 1]
  double temperature = 4.0;  ///< --kd-temperature T > 0
};

/// Registers --distill, --kd-weight and --kd-temperature (the last two need --distill).
void add_distill_options(CLI::App& app, DistillOptions& options);

class Teacher {
 public:
  /// Loads the teacher; throws (naming --distill and the file) when it is not an fp32 checkpoint
  /// of `factory`'s model.
  Teacher(const DistillOptions& options, const ModelFactory& factory);
  /// (1 - w) CE(student, labels) + w T^2 KL(softmax(teacher/T) || softmax(student/T)), the
  /// teacher's logits computed here on `batch.images` without a graph.
  Tensor loss(const Tensor& student_logits, const data::Batch& batch);
  /// "cnn-bn teacher 'f.ckpt', weight 0.5, T 4"
  std::string describe() const;
  nn::Module& model() { return *model_; }

 private:
  DistillOptions options_;
  std::string arch_;
  nn::ModulePtr model_;
};

}  // namespace qat::examples
