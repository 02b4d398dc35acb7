// Post-training quantization of the Fashion-MNIST CNN (examples/common/models.h): train the fp32
// model (or --load one written by `cnn_qat --mode fp32 --save PATH`), prepare it with the QAT
// registry, calibrate the observers on a few training batches in eval mode (quant::calibrate),
// convert to int8 and compare: fp32 vs int8 test accuracy and the per-layer numeric report.
#include <CLI/CLI.hpp>
#include <iostream>

#include "examples/common/app.h"
#include "examples/common/models.h"
#include "framework/autograd/ops.h"
#include "framework/data/dataloader.h"
#include "framework/data/idx.h"
#include "framework/io/checkpoint.h"
#include "framework/io/checkpoint_error.h"
#include "framework/io/restore.h"
#include "framework/optim/lr_scheduler.h"
#include "framework/optim/sgd.h"
#include "framework/tensor/parallel.h"
#include "framework/tensor/random.h"
#include "modules/quant/quant.h"

using namespace qat;

namespace {

struct Options {
  std::string data = data::kFashionMnistDir, arch = "cnn-bn", load, act_observer = "default";
  int epochs = 3, threads = 1;
  std::int64_t batch = 64, calib_batches = 32, train_limit = 0, test_limit = 0;
  double lr = 0.05;
  std::uint64_t seed = 0;
  bool json = false;
};

nn::ModulePtr build(const Options& o) { return examples::fmnist_cnn(o.arch == "cnn-bn"); }

// SGD with momentum 0.9 and a cosine schedule, as cnn_qat's defaults.
void train_fp32(const Options& o, nn::Module& model, const data::Dataset& train) {
  optim::SGD opt(model.named_parameters(), {.lr = o.lr, .momentum = 0.9});
  optim::CosineAnnealingLR schedule(opt, std::max(o.epochs, 1));
  data::DataLoader loader(train, {.batch_size = o.batch, .shuffle = true, .seed = o.seed});
  for (int epoch = 1; epoch <= o.epochs; ++epoch) {
    model.train();
    double loss = 0;
    for (const data::Batch& b : loader) {
      opt.zero_grad();
      Tensor l = cross_entropy(model(b.images), b.labels);
      l.backward();
      opt.step();
      loss = l.item();
    }
    schedule.step();
    if (!o.json) std::cerr << "epoch " << epoch << " loss " << loss << "\n";
  }
  model.eval();
}

// The fp32 weights of a `cnn_qat --mode fp32` checkpoint.
void load_fp32(Options& o, nn::ModulePtr& model) {
  const io::Checkpoint ckpt = io::load(o.load);
  auto meta = [&](const char* key) {
    const auto it = ckpt.metadata.find(key);
    return it == ckpt.metadata.end() ? std::string() : it->second;
  };
  if (meta("model") != "cnn" || meta("mode") != "fp32")
    throw io::CheckpointError(ckpt.info.source, "is not an fp32 cnn checkpoint of cnn_qat (model '" +
                                                    meta("model") + "', mode '" + meta("mode") + "')");
  o.arch = meta("arch");
  model = build(o);
  io::load_into(*model, ckpt);
}

// int8_default (per-channel int8 weights, affine uint8 activations), with the activation observer
// --act-observer asks for.
quant::QConfigRegistry registry(const Options& o) {
  quant::QConfigRegistry reg;
  if (o.act_observer == "default") return reg;
  quant::QConfig c = reg.get("int8_default");
  c.name = "int8_ptq";
  c.activation->observer =
      o.act_observer == "minmax" ? quant::ObserverKind::MinMax : quant::ObserverKind::Histogram;
  reg.register_config(c);
  reg.set_global("int8_ptq");
  return reg;
}

int run(Options o) {
  set_num_threads(o.threads);
  manual_seed(o.seed);
  const data::Dataset train = examples::first(data::load_fashion_mnist(o.data, true), o.train_limit);
  const data::Dataset test = examples::first(data::load_fashion_mnist(o.data, false), o.test_limit);

  nn::ModulePtr fp32 = build(o);
  if (!o.load.empty())
    load_fp32(o, fp32);
  else
    train_fp32(o, *fp32, train);
  const double fp32_acc = examples::evaluate(*fp32, test, false).accuracy;

  // A copy of the trained model, prepared, calibrated and converted.
  nn::ModulePtr int8 = build(o);
  io::load_into(*int8, io::capture(*fp32));
  const quant::PrepareReport prepared = quant::prepare_qat(*int8, registry(o));
  data::DataLoader calib(train, {.batch_size = o.batch, .shuffle = true, .seed = o.seed + 1});
  auto it = calib.begin();
  std::int64_t taken = 0;
  const quant::CalibrationReport calibrated = quant::calibrate(*int8, [&](Tensor& batch) {
    if (taken == o.calib_batches || it == calib.end()) return false;
    batch = (*it).images;
    ++it, ++taken;
    return true;
  });
  const data::Batch probe = *data::DataLoader(test, {.batch_size = 256, .shuffle = false}).begin();
  const quant::NumericReport fq_report = quant::compare(*fp32, *int8, probe.images);
  const quant::ConvertReport converted = quant::convert(*int8);
  const double int8_acc = examples::evaluate(*int8, test, false).accuracy;
  const quant::NumericReport report = quant::compare(*fp32, *int8, probe.images);

  if (o.json) {
    std::cout << "{\"arch\": \"" << o.arch << "\", \"act_observer\": \"" << o.act_observer
              << "\", \"calib_batches\": " << calibrated.batches << ", \"fp32_acc\": " << fp32_acc
              << ", \"int8_acc\": " << int8_acc << ", \"fake_quant_report\": " << fq_report.json()
              << ", \"report\": " << report.json() << "}" << std::endl;
    return 0;
  }
  std::cerr << "prepare_qat:\n"
            << prepared.table() << calibrated.str() << "\nconvert:\n"
            << converted.table();
  std::cout << "numeric report, int8 vs fp32 on " << probe.images.size(0) << " test images:\n"
            << report.table() << "fp32 test_acc " << fp32_acc << "\nint8 test_acc " << int8_acc << " ("
            << (int8_acc - fp32_acc) * 100 << " points)\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"ptq_cnn: post-training int8 quantization of the Fashion-MNIST CNN"};
  app.add_option("--data", o.data, "directory with the Fashion-MNIST IDX .gz files")
      ->capture_default_str();
  app.add_option("--arch", o.arch, "architecture")
      ->check(CLI::IsMember({"cnn", "cnn-bn"}))
      ->capture_default_str();
  app.add_option("--load", o.load,
                 "fp32 checkpoint written by cnn_qat --mode fp32 --save (no training)");
  app.add_option("--epochs", o.epochs, "fp32 training epochs")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--batch", o.batch, "batch size (training and calibration)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--lr", o.lr, "SGD learning rate")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--calib-batches", o.calib_batches, "training batches to calibrate on")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--act-observer", o.act_observer,
                 "activation observer: default (moving average), minmax or histogram")
      ->check(CLI::IsMember({"default", "minmax", "histogram"}))
      ->capture_default_str();
  app.add_option("--threads", o.threads, "CPU threads")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--seed", o.seed, "seed for initialisation and shuffling")->capture_default_str();
  app.add_option("--train-limit", o.train_limit, "use only the first N training images (0 = all)");
  app.add_option("--test-limit", o.test_limit, "use only the first N test images (0 = all)");
  app.add_flag("--json", o.json, "print one JSON line instead of the tables");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  try {
    return run(o);
  } catch (const std::exception& e) {
    std::string msg = e.what();
    for (std::size_t at; (at = msg.find('\n')) != std::string::npos;) msg.replace(at, 1, "; ");
    std::cerr << "ptq_cnn: error: " << msg << "\n";
    return 2;
  }
}
