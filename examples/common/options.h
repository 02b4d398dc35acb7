#pragma once
// The examples' command-line options (options.cpp parses them with CLI11) and the program that
// runs them (app.cpp).
#include <cstdint>
#include <string>
#include <vector>

#include "examples/common/app.h"
#include "examples/common/distill.h"
#include "examples/common/mixed_precision.h"
#include "framework/data/idx.h"
#include "framework/tensor/parallel.h"

namespace qat::examples {

/// Bounds of the numeric options (also applied to what --resume reads).
constexpr int kMaxThreads = qat::kMaxThreads;
constexpr int kMaxEpochs = 1000000;
constexpr double kMaxLr = 1e6;

struct Options {
  std::string data = data::kFashionMnistDir;
  std::string arch, mode = "fp32", qconfig = "int8_default", optimizer = "sgd", schedule = "cosine";
  std::vector<std::string> rules;  // "fc1=skip", "features.*=int8_lsq", "type:Conv2d=int8_default"
  int epochs = 3, threads = 1;
  int freeze_bn_epoch = 0, freeze_observer_epoch = 0;  // 0: never
  std::int64_t batch = 64, train_limit = 0, test_limit = 0;
  double lr = 0.05, momentum = 0.9, weight_decay = 0.0;
  std::uint64_t seed = 0;
  std::string save, load, resume, export_onnx;
  bool eval_only = false, json = false, onnx_int8 = false, distributed = false;
  std::string device = "cpu";  // --device cpu|cuda
  bool mode_given = false;     // --mode on the command line (QAT from an fp32 --load)
  DistillOptions distill;
  MixedPrecisionOptions mixed;
};

/// Trains, converts, evaluates and writes what `o` asks for; returns the exit status (throws on
/// bad input, which run() prints as one line and turns into status 2).
int run_training(const Options& o, const ModelFactory& factory);

}  // namespace qat::examples
