#pragma once
// The command-line training program shared by mlp_qat and cnn_qat: options, data, the training
// loop, evaluation, progress output and the JSON summary. Each example supplies its models.
#include <functional>
#include <string>
#include <vector>

#include "framework/nn/module.h"

namespace qat::examples {

struct ModelFactory {
  std::string program;             // "mlp_qat"
  std::string model;               // "mlp", reported in JSON
  std::vector<std::string> archs;  // accepted --arch values, the first is the default
  std::function<nn::ModulePtr(const std::string& arch)> build;
  bool flatten_input = false;  // feed (B, 784) instead of (B, 1, 28, 28)
};

/// Parses argv, trains and evaluates; returns the process exit status.
int run(int argc, char** argv, const ModelFactory& factory);

}  // namespace qat::examples
