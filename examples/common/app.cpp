#include "examples/common/app.h"

#include <sys/resource.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <memory>
#include <sstream>

#include "examples/common/progress.h"
#include "framework/autograd/grad_mode.h"
#include "framework/autograd/ops.h"
#include "framework/data/dataloader.h"
#include "framework/data/idx.h"
#include "framework/optim/adam.h"
#include "framework/optim/lr_scheduler.h"
#include "framework/optim/sgd.h"
#include "framework/tensor/blas.h"
#include "framework/tensor/parallel.h"
#include "framework/tensor/random.h"
#include "modules/quant/prepare.h"

namespace qat::examples {
namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  std::string data = data::kFashionMnistDir;
  std::string arch, mode = "fp32", qconfig = "int8_default", optimizer = "sgd", schedule = "cosine";
  int epochs = 3, threads = 1;
  std::int64_t batch = 64, train_limit = 0, test_limit = 0;
  double lr = 0.05, momentum = 0.9, weight_decay = 0.0;
  std::uint64_t seed = 0;
  std::vector<std::string> rules;  // "fc1=skip", "features.*=int8_lsq", "type:Conv2d=int8_default"
  bool json = false;
};

double peak_rss_mb() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_maxrss) / 1024.0;  // ru_maxrss is in KiB on Linux
}

data::Dataset first(const data::Dataset& d, std::int64_t n) {
  if (n <= 0 || n >= d.size()) return d;
  return {d.images.rows(0, n), d.labels.rows(0, n), d.num_classes};
}

/// Fraction of correctly classified samples, in eval mode without recording a graph.
double evaluate(nn::Module& model, const data::Dataset& test, bool flatten) {
  NoGradGuard no_grad;
  model.eval();
  data::DataLoader loader(test, {.batch_size = 1000, .shuffle = false, .flatten = flatten});
  std::int64_t correct = 0;
  for (const data::Batch& b : loader) {
    const Tensor pred = argmax(model.forward(b.images), 1);
    const std::int64_t* p = pred.data<std::int64_t>();
    const std::int64_t* y = b.labels.data<std::int64_t>();
    for (std::int64_t i = 0; i < pred.numel(); ++i) correct += p[i] == y[i];
  }
  return static_cast<double>(correct) / static_cast<double>(test.size());
}

std::unique_ptr<optim::Optimizer> make_optimizer(const Options& o, const nn::Module& model) {
  if (o.optimizer == "adam")
    return std::make_unique<optim::Adam>(model.named_parameters(),
                                         optim::Adam::Options{.lr = o.lr, .weight_decay = o.weight_decay});
  if (o.optimizer == "adamw")
    return std::make_unique<optim::AdamW>(model.named_parameters(),
                                          optim::AdamW::Options{.lr = o.lr, .weight_decay = o.weight_decay});
  return std::make_unique<optim::SGD>(
      model.named_parameters(),
      optim::SGD::Options{.lr = o.lr, .momentum = o.momentum, .weight_decay = o.weight_decay});
}

std::unique_ptr<optim::LRScheduler> make_schedule(const Options& o, optim::Optimizer& opt) {
  if (o.schedule == "cosine") return std::make_unique<optim::CosineAnnealingLR>(opt, o.epochs);
  if (o.schedule == "step") return std::make_unique<optim::StepLR>(opt, std::max(1, o.epochs / 3), 0.1);
  return nullptr;
}

// "SELECTOR=CONFIG": SELECTOR is "type:TypeName", a glob (has * ? [) or an exact module name.
void add_rule(quant::QConfigRegistry& registry, const std::string& rule) {
  const auto eq = rule.find('=');
  QAT_REQUIRE(eq != std::string::npos && eq > 0 && eq + 1 < rule.size(), "--rule",
              "expected SELECTOR=CONFIG, got '", rule, "'");
  const std::string selector = rule.substr(0, eq), config = rule.substr(eq + 1);
  if (selector.rfind("type:", 0) == 0) registry.set_module_type(selector.substr(5), config);
  else if (selector.find_first_of("*?[") != std::string::npos) registry.set_module_glob(selector, config);
  else registry.set_module_name(selector, config);
}

int train_and_evaluate(const Options& o, const ModelFactory& factory) {
  set_num_threads(o.threads);
  manual_seed(o.seed);

  const data::Dataset train = first(data::load_fashion_mnist(o.data, true), o.train_limit);
  const data::Dataset test = first(data::load_fashion_mnist(o.data, false), o.test_limit);
  nn::ModulePtr model = factory.build(o.arch);
  if (o.mode == "qat") {
    quant::QConfigRegistry registry;
    registry.set_global(o.qconfig);
    for (const std::string& rule : o.rules) add_rule(registry, rule);
    const quant::PrepareReport report = quant::prepare_qat(*model, registry);
    if (!o.json) std::cerr << "prepare_qat (" << o.qconfig << "):\n" << report.table();
  }
  auto optimizer = make_optimizer(o, *model);
  auto schedule = make_schedule(o, *optimizer);
  data::DataLoader loader(train, {.batch_size = o.batch, .shuffle = true, .seed = o.seed,
                                  .flatten = factory.flatten_input});
  if (!o.json) std::cerr << model->summary() << "BLAS: " << detail::blas_info() << "\n";

  Progress progress(loader.size(), o.epochs);
  double train_seconds = 0, test_acc = 0, last_loss = 0;
  for (int epoch = 1; epoch <= o.epochs; ++epoch) {
    model->train();
    progress.start_epoch(epoch);
    const auto t0 = Clock::now();
    std::int64_t i = 0;
    for (const data::Batch& b : loader) {
      optimizer->zero_grad();
      Tensor loss = cross_entropy(model->forward(b.images), b.labels);
      loss.backward();
      optimizer->step();
      last_loss = loss.item();
      progress.update(i++, last_loss, b.labels.numel());
    }
    const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
    train_seconds += secs;
    if (schedule) schedule->step();
    test_acc = evaluate(*model, test, factory.flatten_input);
    progress.end_epoch(secs, "test_acc " + std::to_string(test_acc));
  }

  std::ostringstream js;
  js.precision(6);
  js << "{\"model\": \"" << factory.model << "\", \"arch\": \"" << o.arch << "\", \"mode\": \""
     << o.mode << "\", \"qconfig\": \"" << (o.mode == "qat" ? o.qconfig : "none") << "\", \"epochs\": " << o.epochs << ", \"batch\": " << o.batch
     << ", \"threads\": " << o.threads << ", \"optimizer\": \"" << o.optimizer
     << "\", \"seed\": " << o.seed << ", \"train_s_per_epoch\": "
     << (o.epochs ? train_seconds / o.epochs : 0.0) << ", \"final_loss\": " << last_loss
     << ", \"test_acc\": " << test_acc << ", \"peak_rss_mb\": " << peak_rss_mb() << "}";
  if (o.json) std::cout << js.str() << std::endl;
  else std::cout << factory.model << " " << o.mode << " test_acc " << test_acc
                 << " train_s_per_epoch " << (o.epochs ? train_seconds / o.epochs : 0.0) << "\n";
  return 0;
}

}  // namespace

int run(int argc, char** argv, const ModelFactory& factory) {
  Options o;
  o.arch = factory.archs.front();
  CLI::App app{factory.program + ": train a " + factory.model +
               " on Fashion-MNIST (fp32 or quantization-aware) and evaluate it"};
  app.add_option("--data", o.data, "directory with the Fashion-MNIST IDX .gz files")->capture_default_str();
  app.add_option("--arch", o.arch, "architecture")->check(CLI::IsMember(factory.archs))->capture_default_str();
  app.add_option("--mode", o.mode, "fp32 or qat")->check(CLI::IsMember({"fp32", "qat"}))->capture_default_str();
  app.add_option("--qconfig", o.qconfig, "QAT config preset (with --mode qat)")
      ->check(CLI::IsMember(quant::QConfigRegistry().names()))->capture_default_str();
  app.add_option("--rule", o.rules,
                 "per-layer QAT config, repeatable: NAME=CONFIG, GLOB=CONFIG or type:TYPE=CONFIG "
                 "(CONFIG may be 'skip')");
  app.add_option("--epochs", o.epochs, "training epochs")->check(CLI::NonNegativeNumber)->capture_default_str();
  app.add_option("--batch", o.batch, "batch size")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--lr", o.lr, "learning rate")->check(CLI::NonNegativeNumber)->capture_default_str();
  app.add_option("--momentum", o.momentum, "SGD momentum")->check(CLI::Range(0.0, 1.0))->capture_default_str();
  app.add_option("--weight-decay", o.weight_decay, "weight decay")->check(CLI::NonNegativeNumber)->capture_default_str();
  app.add_option("--optimizer", o.optimizer, "sgd, adam or adamw")
      ->check(CLI::IsMember({"sgd", "adam", "adamw"}))->capture_default_str();
  app.add_option("--schedule", o.schedule, "learning-rate schedule per epoch: none, cosine or step")
      ->check(CLI::IsMember({"none", "cosine", "step"}))->capture_default_str();
  app.add_option("--threads", o.threads, "CPU threads (1 gives bit-identical runs)")
      ->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--seed", o.seed, "seed for initialisation and shuffling")->capture_default_str();
  app.add_option("--train-limit", o.train_limit, "use only the first N training images (0 = all)");
  app.add_option("--test-limit", o.test_limit, "use only the first N test images (0 = all)");
  app.add_flag("--json", o.json, "print a JSON summary as the last line of stdout");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  try {
    return train_and_evaluate(o, factory);
  } catch (const std::exception& e) {
    std::cerr << factory.program << ": error: " << e.what() << "\n";
    return 2;
  }
}

}  // namespace qat::examples
