#pragma once
// The command-line training program shared by mlp_qat and cnn_qat: options, data, the training
// loop, evaluation, progress output and the JSON summary. Each example supplies its models.
#include <functional>
#include <string>
#include <vector>

#include "framework/data/dataset.h"
#include "framework/nn/module.h"

namespace qat::examples {

struct ModelFactory {
  std::string program;             // "mlp_qat"
  std::string model;               // "mlp", reported in JSON
  std::vector<std::string> archs;  // accepted --arch values, the first is the default
  std::function<nn::ModulePtr(const std::string& arch)> build;
  bool flatten_input = false;  // feed (B, 784) instead of (B, 1, 28, 28)
};

/// The first `n` samples of `d` (all of them when n <= 0).
data::Dataset first(const data::Dataset& d, std::int64_t n);

struct Eval {
  double accuracy = 0;
  Tensor predictions;  // int64 (N)
  Tensor logits;       // float32 (N, classes)
};
/// Accuracy, predictions and logits in eval mode, without recording a graph.
/// The batches go to `device` (where the model is); logits and predictions come back to the host.
Eval evaluate(nn::Module& model, const data::Dataset& test, bool flatten, Device device = Device::CPU);

/// Parses argv, trains and evaluates; returns the process exit status.
int run(int argc, char** argv, const ModelFactory& factory);

}  // namespace qat::examples
