#include "examples/common/options.h"

#include <CLI/CLI.hpp>
#include <charconv>
#include <cmath>
#include <iostream>
#include <limits>
#include <sstream>
#include <type_traits>

#include "modules/quant/qconfig.h"

namespace qat::examples {

namespace {

// A CLI11 check that the option is a finite number in [lo, hi] ("1..1024" in the help and in
// errors, never CLI11's 309-digit ranges). `lo_open`: lo itself is excluded ("(0, 1e+06]").
template <class T>
CLI::Validator bounded(T lo, T hi, bool lo_open = false) {
  std::ostringstream os;
  if constexpr (std::is_integral_v<T>)
    os << lo << ".." << hi;
  else
    os << (lo_open ? "(" : "[") << lo << ", " << hi << "]";
  const std::string range = os.str();
  return CLI::Validator(
      [=](std::string& text) -> std::string {
        T v{};
        const char* b = text.data();
        const char* e = text.data() + text.size();
        bool ok;
        if constexpr (std::is_integral_v<T>) {
          const auto r = std::from_chars(b, e, v);
          ok = r.ec == std::errc() && r.ptr == e;
        } else {
          char* end = nullptr;
          v = std::strtod(text.c_str(), &end);
          ok = !text.empty() && end == text.c_str() + text.size() && std::isfinite(v);
        }
        if (!ok)
          return "'" + detail::printable(text) + "' is not a " +
                 (std::is_integral_v<T> ? "whole" : "finite") + " number";
        if (v < lo || v > hi || (lo_open && v == lo)) return "'" + text + "' is not in " + range;
        return "";
      },
      range);
}

}  // namespace

int run(int argc, char** argv, const ModelFactory& factory) {
  Options o;
  o.arch = factory.archs.front();
  CLI::App app{factory.program + ": train a " + factory.model +
               " on Fashion-MNIST (fp32 or quantization-aware), convert it to int8 and evaluate"};
  app.add_option("--data", o.data, "directory with the Fashion-MNIST IDX .gz files")
      ->capture_default_str();
  app.add_option("--arch", o.arch, "architecture")
      ->check(CLI::IsMember(factory.archs))
      ->capture_default_str();
  app.add_option("--mode", o.mode, "fp32 or qat")
      ->check(CLI::IsMember({"fp32", "qat"}))
      ->capture_default_str();
  app.add_option("--qconfig", o.qconfig, "QAT config preset (with --mode qat)")
      ->check(CLI::IsMember(quant::QConfigRegistry().names()))
      ->capture_default_str();
  app.add_option("--rule", o.rules,
                 "per-layer QAT config, repeatable: NAME=CONFIG, GLOB=CONFIG or type:TYPE=CONFIG "
                 "(CONFIG may be 'skip')");
  app.add_option(
         "--epochs", o.epochs,
         "training epochs (the total, also with --resume; 0: evaluate and save the model as it is)")
      ->check(bounded(0, kMaxEpochs))
      ->capture_default_str();
  app.add_option("--batch", o.batch, "batch size")
      ->check(bounded<std::int64_t>(1, 1000000))
      ->capture_default_str();
  app.add_option("--lr", o.lr, "learning rate")
      ->check(bounded(0.0, kMaxLr, true))
      ->capture_default_str();
  app.add_option("--momentum", o.momentum, "SGD momentum")
      ->check(bounded(0.0, 1.0))
      ->capture_default_str();
  app.add_option("--weight-decay", o.weight_decay, "weight decay")
      ->check(bounded(0.0, 10.0))
      ->capture_default_str();
  app.add_option("--optimizer", o.optimizer, "sgd, adam or adamw")
      ->check(CLI::IsMember({"sgd", "adam", "adamw"}))
      ->capture_default_str();
  app.add_option("--schedule", o.schedule, "learning-rate schedule per epoch: none, cosine or step")
      ->check(CLI::IsMember({"none", "cosine", "step"}))
      ->capture_default_str();
  app.add_option("--threads", o.threads, "CPU threads (1 gives bit-identical runs)")
      ->check(bounded(1, kMaxThreads))
      ->capture_default_str();
  app.add_option("--freeze-bn-epoch", o.freeze_bn_epoch,
                 "QAT: from this epoch on, batch norm keeps its running statistics (0: never)")
      ->check(bounded(0, kMaxEpochs));
  app.add_option("--freeze-observer-epoch", o.freeze_observer_epoch,
                 "QAT: from this epoch on, observers stop updating the qparams (0: never)")
      ->check(bounded(0, kMaxEpochs));
  app.add_option("--seed", o.seed, "seed for initialisation and shuffling")->capture_default_str();
  app.add_option("--train-limit", o.train_limit, "use only the first N training images (0 = all)")
      ->check(bounded<std::int64_t>(0, std::numeric_limits<std::int64_t>::max()));
  app.add_option("--test-limit", o.test_limit, "use only the first N test images (0 = all)")
      ->check(bounded<std::int64_t>(0, std::numeric_limits<std::int64_t>::max()));
  app.add_option("--save", o.save,
                 "write the training checkpoint to PATH after every epoch (QAT mode: "
                 "the int8 model to PATH.int8 at the end)");
  auto* load =
      app.add_option("--load", o.load, "load a checkpoint (QAT, fp32 or int8) written by --save");
  app.add_flag("--eval-only", o.eval_only, "with --load: evaluate, do not train")->needs(load);
  app.add_option("--resume", o.resume, "continue training from a checkpoint written by --save")
      ->excludes(load);
  app.add_flag("--json", o.json, "print a JSON summary as the last line of stdout");
  app.add_option("--device", o.device, "cpu or cuda (cuda needs a GPU and a CUDA kernel for every op)")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
  app.add_flag("--distributed", o.distributed,
               "data-parallel training, one replica per process: start N processes with RANK, "
               "WORLD_SIZE, MASTER_ADDR, MASTER_PORT set (scripts/launch.sh N ...) or under mpirun; "
               "--batch is the global batch");
  add_distill_options(app, o.distill);
  add_mixed_precision_options(app, o.mixed);
  auto* onnx =
      app.add_option("--export-onnx", o.export_onnx,
                     "write the trained QAT model to PATH as ONNX (QuantizeLinear/DequantizeLinear)");
  app.add_flag("--onnx-int8", o.onnx_int8, "with --export-onnx: int8 weight initializers (smaller file)")
      ->needs(onnx);
  try {
    app.parse(argc, argv);
    o.mode_given = app.count("--mode") > 0;
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  try {
    return run_training(o, factory);
  } catch (const std::exception& e) {
    std::string msg = e.what();  // one line: multi-line reports are joined with "; "
    for (std::size_t at; (at = msg.find("\n")) != std::string::npos;) msg.replace(at, 1, "; ");
    std::cerr << factory.program << ": error: " << msg << "\n";
    return 2;
  }
}

}  // namespace qat::examples
