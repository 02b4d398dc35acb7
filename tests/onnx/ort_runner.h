#pragma once
// Runs exported .onnx files in ONNX Runtime for the tests: a node child process running
// tests/onnx/run_ort.js with onnxruntime-node (installed into .deps by scripts/install-deps.sh).
#include <cstdint>
#include <string>

#include "framework/tensor/tensor.h"

namespace qat::test {

/// Empty when node and onnxruntime-node are usable, else why not (checked once per process).
/// The package is looked up in $QAT_ORT_NODE_MODULES, else in the QAT_ORT_NODE_MODULES compile
/// definition (<repo>/.deps/node_modules).
std::string ort_unavailable();

/// Runs the single-input, single-output model at `model_path` on the float32 `input` and returns
/// its float32 output. `optimization`: "all" or "disabled" (ORT's graphOptimizationLevel).
/// `batch` > 0 runs the input in chunks of that many rows along dim 0 and concatenates the
/// outputs; 0 runs it whole. Threads: $QAT_ORT_THREADS (default 1). Throws qat::Error with
/// ONNX Runtime's message when the run fails.
Tensor ort_run(const std::string& model_path, const Tensor& input,
               const std::string& optimization = "all", std::int64_t batch = 0);

}  // namespace qat::test
