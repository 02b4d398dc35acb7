#include "examples/common/app.h"

#include <sys/resource.h>

#include <chrono>
#include <cmath>
#include <iostream>
#include <limits>
#include <memory>
#include <optional>
#include <sstream>

#include "examples/common/checkpoints.h"
#include "examples/common/distill.h"
#include "examples/common/mixed_precision.h"
#include "examples/common/options.h"
#include "examples/common/progress.h"
#include "framework/autograd/grad_mode.h"
#include "framework/autograd/ops.h"
#include "framework/data/dataloader.h"
#include "framework/data/idx.h"
#include "framework/distributed/ddp.h"
#include "framework/io/atomic_file.h"
#include "framework/io/checkpoint.h"
#include "framework/io/checkpoint_error.h"
#include "framework/io/restore.h"
#include "framework/optim/adam.h"
#include "framework/optim/divergence.h"
#include "framework/optim/lr_scheduler.h"
#include "framework/optim/sgd.h"
#include "framework/tensor/blas.h"
#include "framework/tensor/cpu.h"
#include "framework/tensor/cuda.h"
#include "framework/tensor/parallel.h"
#include "framework/tensor/random.h"
#include "modules/quant/checkpoint_meta.h"
#include "modules/quant/convert.h"
#include "modules/quant/learnable_quantizer.h"
#include "modules/quant/prepare.h"
#include "modules/quant/qat_layers.h"
#include "modules/quant/quantizer.h"
#ifdef QAT_HAS_ONNX
#include "modules/onnx/export.h"
#endif

namespace qat::examples {

data::Dataset first(const data::Dataset& d, std::int64_t n) {
  if (n <= 0 || n >= d.size()) return d;
  return {d.images.rows(0, n), d.labels.rows(0, n), d.num_classes};
}

Eval evaluate(nn::Module& model, const data::Dataset& test, bool flatten, Device device) {
  NoGradGuard no_grad;
  model.eval();
  data::DataLoader loader(test, {.batch_size = 1000, .shuffle = false, .flatten = flatten});
  Eval e{0, Tensor::empty(Shape{test.size()}, DType::Int64),
         Tensor::empty(Shape{test.size(), test.num_classes}, DType::Float32)};
  std::int64_t correct = 0, at = 0;
  for (const data::Batch& b : loader) {
    const Tensor logits = model.forward(b.images.to(device)).to(Device::CPU);
    QAT_REQUIRE(
        logits.dtype() == DType::Float32 && logits.dim() == 2 && logits.size(1) == test.num_classes,
        "evaluate", "the model must output float32 (N, ", test.num_classes, ") logits, got ",
        dtype_name(logits.dtype()), logits.shape());
    const Tensor pred = argmax(logits, 1);
    const std::int64_t n = pred.numel();
    std::copy_n(pred.data<std::int64_t>(), n, e.predictions.data<std::int64_t>() + at);
    std::copy_n(logits.data<float>(), n * test.num_classes,
                e.logits.data<float>() + at * test.num_classes);
    for (std::int64_t i = 0; i < n; ++i)
      correct += pred.data<std::int64_t>()[i] == b.labels.data<std::int64_t>()[i];
    at += n;
  }
  e.accuracy = static_cast<double>(correct) / static_cast<double>(test.size());
  return e;
}

namespace {

using Clock = std::chrono::steady_clock;

double peak_rss_mb() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_maxrss) / 1024.0;  // ru_maxrss is in KiB on Linux
}

// ---- training and evaluation -----------------------------------------------------------------

std::unique_ptr<optim::Optimizer> make_optimizer(const Options& o, const nn::Module& model) {
  if (o.optimizer == "adam")
    return std::make_unique<optim::Adam>(
        model.named_parameters(), optim::Adam::Options{.lr = o.lr, .weight_decay = o.weight_decay});
  if (o.optimizer == "adamw")
    return std::make_unique<optim::AdamW>(
        model.named_parameters(), optim::AdamW::Options{.lr = o.lr, .weight_decay = o.weight_decay});
  return std::make_unique<optim::SGD>(
      model.named_parameters(),
      optim::SGD::Options{.lr = o.lr, .momentum = o.momentum, .weight_decay = o.weight_decay});
}

std::unique_ptr<optim::LRScheduler> make_schedule(const Options& o, optim::Optimizer& opt) {
  if (o.schedule == "cosine")
    return std::make_unique<optim::CosineAnnealingLR>(opt, std::max(o.epochs, 1));
  if (o.schedule == "step") return std::make_unique<optim::StepLR>(opt, std::max(1, o.epochs / 3), 0.1);
  return nullptr;
}

/// PyTorch's QAT recipe: from epoch `freeze_bn_epoch` on, batch norm uses (and keeps) its
/// running statistics; from `freeze_observer_epoch` on, the observers stop moving the qparams, so
/// the last epochs fine-tune the weights against the ranges the int8 model will use.
void apply_freezes(const Options& o, nn::Module& model, int epoch) {
  const bool bn = o.freeze_bn_epoch > 0 && epoch >= o.freeze_bn_epoch;
  const bool obs = o.freeze_observer_epoch > 0 && epoch >= o.freeze_observer_epoch;
  if (!bn && !obs) return;
  for (auto& [name, m] : model.named_modules()) {
    if (auto* layer = dynamic_cast<quant::ConvBn2d*>(m); layer && bn) layer->freeze_bn_stats();
    if (auto* q = dynamic_cast<quant::Quantizer*>(m); q && obs) q->disable_observer();
  }
}

struct Summary {
  double train_seconds = 0, last_loss = 0;
  int epochs_run = 0;
};

// ---- the program ----------------------------------------------------------------------------

// --device cuda: a GPU, then one training step of `model` (a copy of its state moved to the
// device) on zeros, so that the first op without a CUDA kernel is named before any training.
void require_cuda_training(nn::Module& model, const ModelFactory& factory, std::int64_t batch) {
  QAT_REQUIRE(cuda::is_available(), "--device cuda",
              "no usable CUDA device: ", cuda::unavailable_reason());
  const io::Checkpoint saved = io::capture(model);  // restored below: the probe changes nothing
  try {
    model.to(Device::CUDA);
    Shape s = example_input(factory).shape();
    s[0] = std::min<std::int64_t>(batch, 2);
    const Tensor x = Tensor::zeros(s, DType::Float32, Device::CUDA);
    const Tensor labels = Tensor::zeros(Shape{s[0]}, DType::Int64, Device::CUDA);
    cross_entropy(model.forward(x), labels).backward();
  } catch (const Error& e) {
    model.to(Device::CPU);
    io::load_into(model, saved);
    throw Error(detail::concat("--device cuda: training needs an op without a CUDA kernel: ", e.what()));
  }
  model.to(Device::CPU);
  io::load_into(model, saved);
}

int run_program(Options o, const ModelFactory& factory) {
  if (o.device == "cuda") {
    QAT_REQUIRE(!o.distributed || distributed::has_nccl(), "--device cuda",
                "--distributed needs NCCL, and this build has none (rebuild with QAT_NCCL=ON and "
                "the CUDA toolkit's NCCL)");
    QAT_REQUIRE(o.distill.teacher.empty(), "--device cuda",
                "--distill runs the teacher on the CPU only");
  }
  set_num_threads(o.threads);
  manual_seed(o.seed);
  // --distributed: one replica per process (torchrun's RANK / WORLD_SIZE / MASTER_ADDR /
  // MASTER_PORT, or mpirun's); --batch is the global batch, split over the replicas. Rank 0
  // prints, evaluates and writes files.
  distributed::ProcessGroupPtr group;
  if (o.distributed) {
    const auto options = distributed::GroupOptions::from_env();  // checked before joining
    QAT_REQUIRE(o.batch % options.world_size == 0, "--batch", "the global batch ", o.batch,
                " must be a multiple of the world size ", options.world_size);
    QAT_REQUIRE(!o.eval_only, "--eval-only", "evaluates in one process; drop --distributed");
    // --device cuda: one GPU per rank (LOCAL_RANK, else RANK % the device count), chosen before
    // any CUDA work: the library's stream, pool and the NCCL communicator live on that device
    if (o.device == "cuda") {
      QAT_REQUIRE(cuda::is_available(), "--device cuda",
                  "no usable CUDA device: ", cuda::unavailable_reason());
      cuda::set_device(options.cuda_device(cuda::device_count()));
    }
    group = distributed::init_process_group(options);
  }
  const int world = group ? group->world_size() : 1;
  const bool lead = !group || group->rank() == 0;

  std::optional<io::Checkpoint> from;  // --load or --resume
  const Options cli = o;
  if (!o.load.empty() || !o.resume.empty()) {
    from = io::load(o.load.empty() ? o.resume : o.load);
    adopt(o, factory, *from);
  }
  // --load FP32 with --mode qat or --budget-bits: QAT (with the command line's configs) starts
  // from the float weights.
  const bool qat_from_fp32 = from && !o.load.empty() && meta(*from, factory, "kind") == "fp32" &&
                             ((cli.mode_given && cli.mode == "qat") || o.mixed.enabled());
  QAT_REQUIRE(!o.mixed.enabled() || qat_from_fp32, "--budget-bits",
              "needs --load FP32_CHECKPOINT (the trained float model whose layers are measured; "
              "write one with --mode fp32 --save PATH)");
  QAT_REQUIRE(!o.mixed.enabled() || !(cli.mode_given && cli.mode == "fp32"), "--budget-bits",
              "trains a QAT model; drop --mode fp32");
  QAT_REQUIRE(o.distill.teacher.empty() || !o.eval_only, "--distill", "has no effect with --eval-only");
  if (qat_from_fp32) {
    o.mode = "qat";
    o.qconfig = cli.qconfig;
    o.rules = cli.rules;
  }
  std::unique_ptr<Teacher> teacher;
  if (!o.distill.teacher.empty()) teacher = std::make_unique<Teacher>(o.distill, factory);
  const bool int8_file = from && meta(*from, factory, "kind") == "int8";
  QAT_REQUIRE(!int8_file || o.resume.empty(), "--resume", "'", o.resume,
              "' is an int8 inference "
              "checkpoint; resume from the QAT checkpoint instead");
  QAT_REQUIRE(!int8_file || o.eval_only, "--load", "'", o.load,
              "' is an int8 inference checkpoint; add --eval-only to evaluate it, or --resume the QAT "
              "checkpoint to train");
  // Where results go, checked before any training (a bad path would otherwise surface after the
  // first epoch).
  if (!o.save.empty() && lead) {
    io::check_writable(o.save);
    if (o.mode == "qat") io::check_writable(o.save + ".int8");
  }
  if (!o.export_onnx.empty() && lead) io::check_writable(o.export_onnx);
  const data::Dataset test = first(data::load_fashion_mnist(o.data, false), o.test_limit);

  std::optional<MixedPrecisionResult> mixed;
  if (o.mixed.enabled()) {  // sensitivity of the loaded float model -> per-layer rules
    nn::ModulePtr float_model = factory.build(o.arch);
    io::load_into(*float_model, *from);
    mixed = plan_mixed_precision(*float_model, factory, o.arch,
                                 first(data::load_fashion_mnist(o.data, true), o.train_limit), o.mixed);
    o.rules.insert(o.rules.end(), mixed->rules.begin(), mixed->rules.end());
    std::cerr << "sensitivity (one layer quantized at a time):\n"
              << mixed->table << "mixed precision under " << o.mixed.budget_bits << " bits per weight:\n"
              << mixed->plan << "rules:";
    for (const std::string& r : mixed->rules) std::cerr << " --rule " << r;
    std::cerr << "\n";
  }

  quant::PrepareReport prepared;
  nn::ModulePtr model = build_model(o, factory, &prepared, qat_from_fp32 ? &*from : nullptr);
  // --device cuda: the model, its optimizer state and each batch live on the GPU; the int8
  // model (convert) and the files are made on the CPU after training.
  const Device device = o.device == "cuda" ? Device::CUDA : Device::CPU;
  if (device == Device::CUDA) require_cuda_training(*model, factory, o.batch);
  if (int8_file)
    quant::convert(*model, example_input(factory),
                   {.require_calibrated = false});  // the file brings the qparams
  if (from && !qat_from_fp32)
    io::load_into(*model, *from);  // strict: names, shapes, dtypes; the model is untouched on error

  std::ostringstream js;
  js.precision(6);
  js << "{\"model\": \"" << factory.model << "\", \"arch\": \"" << o.arch << "\", \"device\": \""
     << o.device << "\", \"mode\": \"" << o.mode << "\", \"qconfig\": \""
     << (o.mode == "qat" ? o.qconfig : "none") << "\"";
  if (o.eval_only) {
    QAT_REQUIRE(from.has_value(), "--eval-only", "needs --load PATH");
    const Eval e = evaluate(*model, test, factory.flatten_input);
    js << ", \"checkpoint\": \"" << from->info.source << "\", \"kind\": \""
       << meta(*from, factory, "kind") << "\", \"test_acc\": " << e.accuracy
       << ", \"peak_rss_mb\": " << peak_rss_mb() << "}";
    if (o.json)
      std::cout << js.str() << std::endl;
    else
      std::cout << factory.model << " " << meta(*from, factory, "kind") << " checkpoint "
                << from->info.source << " test_acc " << e.accuracy << "\n";
    return 0;
  }

  const data::Dataset train = first(data::load_fashion_mnist(o.data, true), o.train_limit);
  model->to(device);  // before the optimizer: its state follows the parameters
  auto optimizer = make_optimizer(o, *model);
  auto schedule = make_schedule(o, *optimizer);
  data::DataLoader loader(train, {.batch_size = o.batch / world,
                                  .shuffle = true,
                                  .seed = o.seed,
                                  .flatten = factory.flatten_input,
                                  .num_replicas = world,
                                  .rank = group ? group->rank() : 0});
  int start_epoch = 0;
  std::int64_t global_step = 0;
  if (!o.resume.empty()) {  // optimizer, schedule, data order and RNG continue where they stopped
    QAT_REQUIRE(from->training.has_value(), "--resume", "'", o.resume, "' holds no training state");
    const io::TrainingState& ts = *from->training;
    if (ts.epoch < 0 || ts.epoch > kMaxEpochs)
      throw io::CheckpointError(
          o.resume, detail::concat("training epoch ", ts.epoch, " is not in [0, ", kMaxEpochs, "]"));
    if (ts.global_step < 0)
      throw io::CheckpointError(o.resume,
                                detail::concat("training global_step ", ts.global_step, " is negative"));
    const auto lr = from->optimizer ? from->optimizer->hyperparameters.find("lr")
                                    : std::map<std::string, double>::const_iterator();
    if (from->optimizer && lr != from->optimizer->hyperparameters.end() && !(lr->second <= kMaxLr))
      throw io::CheckpointError(o.resume, detail::concat("saved lr ", lr->second, " is not in [0, ",
                                                         kMaxLr, "] (the --lr bound)"));
    io::restore_optimizer(*optimizer, *from);
    start_epoch = static_cast<int>(ts.epoch);
    global_step = ts.global_step;
    constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();
    loader.set_state({static_cast<std::uint64_t>(counter(*from, "loader_seed", kMax)),
                      counter(*from, "loader_epoch", kMax), counter(*from, "loader_batch", kMax)});
    io::restore_generators(*from, {{"default", &default_generator()}});
    if (schedule) schedule->set_epoch(start_epoch);
  }
  // after --resume: every replica starts from rank 0's state (they loaded the same file anyway)
  std::unique_ptr<distributed::DistributedDataParallel> ddp;
  if (group) ddp = std::make_unique<distributed::DistributedDataParallel>(model, group);
  if (teacher) teacher->attach(*model);  // --kd-features hooks, on the prepared student
  if (!o.json && lead) {
    if (!prepared.layers.empty())
      std::cerr << "prepare_qat (" << o.qconfig << "):\n" << prepared.table();
    if (teacher) std::cerr << "distillation: " << teacher->describe() << "\n";
    std::cerr << model->summary() << "BLAS: " << detail::blas_info()
              << "\nCPU kernels: " << cpu::describe() << "\n";
  }

  // A non-finite input, loss, gradient or parameter, or a bad quantizer / BN state, stops training
  // with a DivergenceError (run() prints it, exits 2) before anything more is saved.
  // On CUDA the guard's checks copy to the host: gradients and parameters every 100 steps, and
  // the quantizer-state check (host code) off.
  optim::DivergenceGuard guard(*model, *optimizer,
                               {.every = device == Device::CUDA ? 100 : 1,
                                .check_state = device == Device::CPU,
                                .first_step = global_step + 1});
  if (!o.save.empty()) guard.set_note("'" + o.save + "' is left as it was");
  // CUDA: batches go through pinned buffers, copied while the GPU runs the previous step
  std::optional<cuda::PinnedStager> stage;
  if (device == Device::CUDA) stage.emplace();
  Progress progress(loader.size(), o.epochs);
  Summary sum;
  std::int64_t save_bytes = 0;
  double test_acc = 0;
  for (int epoch = start_epoch + 1; epoch <= o.epochs; ++epoch) {
    model->train();
    apply_freezes(o, *model, epoch);
    if (lead) progress.start_epoch(epoch);
    const auto t0 = Clock::now();
    std::int64_t i = 0;
    for (const data::Batch& b : loader) {
      optimizer->zero_grad();
      guard.check_input(b.images);
      const Tensor x = stage ? stage->to_device(b.images) : b.images;
      const Tensor labels = stage ? stage->to_device(b.labels) : b.labels;
      const Tensor logits = ddp ? ddp->forward(x) : model->forward(x);
      Tensor loss = teacher ? teacher->loss(logits, b) : cross_entropy(logits, labels);
      guard.check_loss(loss);
      loss.backward();
      guard.check_gradients();
      optimizer->step();
      guard.end_step();
      sum.last_loss = loss.item();
      ++global_step;
      if (lead) progress.update(i++, sum.last_loss, b.labels.numel() * world);
    }
    const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
    sum.train_seconds += secs;
    ++sum.epochs_run;
    if (schedule) schedule->step();
    if (!lead) continue;  // rank 0 writes and evaluates; the others go on to the next epoch
    if (!o.save.empty()) {
      save_bytes = save_training(o, factory, *model, prepared, *optimizer, loader, epoch, global_step);
      guard.set_note("the last checkpoint is kept ('" + o.save + "' after epoch " +
                     std::to_string(epoch) + ")");
    }
    test_acc = evaluate(*model, test, factory.flatten_input, device).accuracy;
    progress.end_epoch(secs, "test_acc " + std::to_string(test_acc));
  }
  if (!lead) return 0;
  model->to(Device::CPU);  // convert, the int8 comparison and the files: on the host
  if (const std::int64_t clamps = quant::learnable_range_clamps(*model))
    std::cerr << "warning: learned LSQ scales / PACT amax were clamped up to 1.19e-07 " << clamps
              << " times in training (the first clamp of each quantizer is reported above); lower the "
                 "learning rate\n";
  if (sum.epochs_run == 0) {
    test_acc = evaluate(*model, test, factory.flatten_input).accuracy;
    if (!o.save.empty())
      save_bytes =
          save_training(o, factory, *model, prepared, *optimizer, loader, start_epoch, global_step);
  }

  std::int64_t int8_bytes = 0;
  js << ", \"epochs\": " << o.epochs << ", \"batch\": " << o.batch << ", \"threads\": " << o.threads
     << ", \"optimizer\": \"" << o.optimizer << "\", \"schedule\": \"" << o.schedule
     << "\", \"seed\": " << o.seed << ", \"cpu\": \"" << cpu::isa_name(cpu::isa()) << "\""
     << ", \"train_s_per_epoch\": " << (sum.epochs_run ? sum.train_seconds / sum.epochs_run : 0.0)
     << ", \"final_loss\": " << sum.last_loss << ", \"test_acc\": " << test_acc;
  if (ddp) {  // gradient traffic per step: what DDP all-reduced against the gradients' bytes
    const auto& st = ddp->stats();
    js << ", \"world_size\": " << world
       << ", \"allreduce_bytes_per_step\": " << (st.syncs ? st.reduced_bytes / st.syncs : 0)
       << ", \"gradient_bytes\": " << st.gradient_bytes << ", \"allreduce_wait_s_per_epoch\": "
       << (sum.epochs_run ? st.wait_seconds / sum.epochs_run : 0.0) << ", \"dist_lane\": \""
       << distributed::lane_name(group->stats().lane) << "\"";
  }
  if (o.mode == "qat") {
    // The int8 model: a second copy of the trained QAT model, converted to integer inference.
    nn::ModulePtr int8_model = build_model(o, factory);
    io::load_into(*int8_model, io::capture(*model));
    std::optional<quant::ConvertReport> conv;
    try {
      conv = quant::convert(*int8_model, example_input(factory));
    } catch (const Error& e) {  // e.g. FP8 or per-block configs: no int8 backend for them
      std::cerr << "no int8 model: " << e.what() << "\n";
      js << ", \"int8\": \"not convertible\"";
    }
    if (conv) {
      const Eval fq = evaluate(*model, test, factory.flatten_input);
      const Eval q8 = evaluate(*int8_model, test, factory.flatten_input);
      std::int64_t agree = 0;
      double max_diff = 0;
      for (std::int64_t i = 0; i < test.size(); ++i)
        agree += fq.predictions.data<std::int64_t>()[i] == q8.predictions.data<std::int64_t>()[i];
      for (std::int64_t i = 0; i < fq.logits.numel(); ++i)
        max_diff = std::max(max_diff,
                            double(std::fabs(fq.logits.data<float>()[i] - q8.logits.data<float>()[i])));
      const double agreement = static_cast<double>(agree) / static_cast<double>(test.size());
      io::Checkpoint q = io::capture(*int8_model);
      q.metadata = describe(o, factory, "int8");
      // The specs and configs the int8 model came from.
      q.metadata.merge(quant::checkpoint_metadata(*model, prepared, /*converted=*/true));
      int8_bytes = static_cast<std::int64_t>(io::to_bytes(q).size());
      if (!o.save.empty()) io::save(q, o.save + ".int8");
      io::Checkpoint fp32 = io::capture(*factory.build(o.arch));  // the float model of the same network
      js << ", \"int8_acc\": " << q8.accuracy << ", \"agreement\": " << agreement
         << ", \"max_logit_diff\": " << max_diff
         << ", \"fp32_checkpoint_bytes\": " << io::to_bytes(fp32).size()
         << ", \"int8_checkpoint_bytes\": " << int8_bytes;
      if (!o.json) std::cerr << "convert:\n" << conv->table();
    }
  }
  if (!o.export_onnx.empty()) {
#ifdef QAT_HAS_ONNX
    const quant::OnnxExportReport r =
        quant::export_onnx(*model, example_input(factory), o.export_onnx, {.int8_weights = o.onnx_int8});
    js << ", \"onnx_opset\": " << r.opset << ", \"onnx_bytes\": " << r.bytes;
    if (!o.json) std::cerr << "onnx export to " << o.export_onnx << ":\n" << r.table();
#else
    throw Error(
        "--export-onnx: this build has no ONNX export (install libonnx-dev and libprotobuf-dev, "
        "rebuild)");
#endif
  }
  if (save_bytes) js << ", \"checkpoint_bytes\": " << save_bytes;
  if (teacher)
    js << ", \"distill\": {\"weight\": " << o.distill.weight
       << ", \"temperature\": " << o.distill.temperature
       << ", \"teacher_acc\": " << evaluate(teacher->model(), test, factory.flatten_input).accuracy
       << ", \"features\": "
       << "\"" << join(o.distill.features, ',') << "\""
       << ", \"feature_weight\": " << o.distill.feature_weight << "}";
  if (mixed) js << ", \"mixed_precision\": " << mixed->json;
  js << ", \"peak_rss_mb\": " << peak_rss_mb() << "}";
  if (o.json)
    std::cout << js.str() << std::endl;
  else
    std::cout << js.str() << "\n";
  return 0;
}

}  // namespace

int run_training(const Options& o, const ModelFactory& factory) { return run_program(o, factory); }

}  // namespace qat::examples
