#pragma once
// Knowledge distillation for the example programs (Hinton et al. 2015): an fp32 teacher loaded
// from a checkpoint runs beside the (QAT) student in eval mode without recording a graph, and the
// training loss becomes distillation_loss(student, teacher, labels, weight, T) (autograd/ops.h).
#include <memory>
#include <string>
#include <vector>

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
  /// --kd-features: modules of the same name in student and teacher whose outputs are matched
  /// by mean squared error (e.g. pool1,pool2: after the quantized conv-bn-relu blocks)
  std::vector<std::string> features;
  double feature_weight = 1.0;  ///< --kd-feature-weight beta >= 0
};

/// Registers --distill, --kd-weight and --kd-temperature (the last two need --distill).
void add_distill_options(CLI::App& app, DistillOptions& options);

class Teacher {
 public:
  /// Loads the teacher; throws (naming --distill and the file) when it is not an fp32 checkpoint
  /// of `factory`'s model.
  Teacher(const DistillOptions& options, const ModelFactory& factory);
  /// Registers forward hooks on `student` and the teacher that keep the outputs of the
  /// --kd-features modules (throws naming a feature that either model lacks). Call after
  /// prepare_qat, before training.
  void attach(nn::Module& student);
  /// (1 - w) CE(student, labels) + w T^2 KL(softmax(teacher/T) || softmax(student/T))
  ///   + beta sum_f mean((student_f - teacher_f)^2)   (FitNets-style feature loss, Romero et al. 2015)
  /// the teacher's logits and features computed here on `batch.images` without a graph; the
  /// student's features are those of its last forward.
  Tensor loss(const Tensor& student_logits, const data::Batch& batch);
  /// "cnn-bn teacher 'f.ckpt', weight 0.5, T 4"
  std::string describe() const;
  nn::Module& model() { return *model_; }

 private:
  DistillOptions options_;
  std::string arch_;
  nn::ModulePtr model_;
  std::vector<Tensor> student_features_, teacher_features_;
};

}  // namespace qat::examples
