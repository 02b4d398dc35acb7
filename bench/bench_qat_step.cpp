// Where the MLP QAT step's time over the fp32 step goes (issue 9's "MLP QAT epoch / own fp32"
// row, per step): the examples' 784-256-128-10 MLP, batch 64, SGD with momentum and the
// divergence guard, as mlp_qat trains it (1 thread unless QAT_NUM_THREADS). The fp32 step and
// each QAT variant run in alternating blocks of 100 steps (a slow spell of the shared machine
// falls on all of them); each prints its fastest and median block per step and the ratio to the
// fp32 step's. The variants switch parts of the QAT step off to bound what they cost:
//   qat              int8_default, everything on
//   weights off      the layers' weight quantizers (observer and fake quantization) disabled
//   activations off  the layers' output quantizers disabled (the input's QuantStub stays)
// Fashion-MNIST from /usr/share/datasets/fashion-mnist when present, else uniform images.
//   build/bench/bench_qat_step [rounds (20)]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "examples/common/models.h"
#include "framework/autograd/ops.h"
#include "framework/data/dataloader.h"
#include "framework/data/idx.h"
#include "framework/optim/divergence.h"
#include "framework/optim/sgd.h"
#include "framework/tensor/random.h"
#include "modules/quant/quant.h"

using namespace qat;

namespace {

using Clock = std::chrono::steady_clock;
constexpr std::int64_t kBatch = 64, kBlock = 100;

data::Dataset training_data() {
  try {
    return data::load_fashion_mnist();
  } catch (const std::exception& e) {
    std::printf("(no Fashion-MNIST: %s; uniform images instead)\n", e.what());
  }
  Generator gen(3);
  data::Dataset d;
  d.num_classes = 10;
  d.images = Tensor::empty(Shape{6400, 28, 28}, DType::UInt8);
  d.labels = Tensor::empty(Shape{6400}, DType::UInt8);
  for (std::int64_t i = 0; i < d.images.numel(); ++i)
    d.images.data<std::uint8_t>()[i] = static_cast<std::uint8_t>(gen.below(256));
  for (std::int64_t i = 0; i < d.labels.numel(); ++i)
    d.labels.data<std::uint8_t>()[i] = static_cast<std::uint8_t>(gen.below(10));
  return d;
}

enum class Variant { Fp32, Qat, WeightsOff, ActivationsOff };

struct Run {
  std::string name;
  nn::ModulePtr model;
  std::unique_ptr<optim::SGD> opt;
  std::unique_ptr<optim::DivergenceGuard> guard;
  std::unique_ptr<data::DataLoader> loader;
  std::vector<double> blocks;  // seconds per step of each timed block

  Run(std::string label, Variant v, const data::Dataset& d) : name(std::move(label)) {
    manual_seed(0);
    model = examples::fmnist_mlp();
    if (v != Variant::Fp32) {
      quant::prepare_qat(*model, quant::QConfigRegistry());
      for (const char* layer : {"fc1", "fc2", "fc3"}) {
        auto* l = dynamic_cast<quant::QatLayer*>(model->child(layer).get());
        const std::shared_ptr<quant::Quantizer>& q =
            v == Variant::WeightsOff ? l->weight_fake_quant() : l->activation_fake_quant();
        if (v != Variant::Qat && q) q->disable_observer(), q->disable_fake_quant();
      }
    }
    model->train();
    opt = std::make_unique<optim::SGD>(model->named_parameters(),
                                       optim::SGD::Options{.lr = 0.05, .momentum = 0.9});
    guard = std::make_unique<optim::DivergenceGuard>(*model, *opt, optim::DivergenceGuard::Options{});
    loader = std::make_unique<data::DataLoader>(d, data::DataLoader::Options{.batch_size = kBatch,
                                                                             .drop_last = true,
                                                                             .flatten = true});
  }

  // n training steps as examples/common/app.cpp runs them; seconds per step
  double steps(std::int64_t n) {
    data::Batch b;
    const auto t0 = Clock::now();
    for (std::int64_t i = 0; i < n; ++i) {
      if (!loader->next(b)) loader->next(b);  // the next epoch
      opt->zero_grad();
      guard->check_input(b.images);
      Tensor loss = cross_entropy(model->forward(b.images), b.labels);
      guard->check_loss(loss);
      loss.backward();
      guard->check_gradients();
      opt->step();
      guard->end_step();
    }
    return std::chrono::duration<double>(Clock::now() - t0).count() / static_cast<double>(n);
  }

  double fastest() const { return *std::min_element(blocks.begin(), blocks.end()); }
  double median() const {
    std::vector<double> v = blocks;
    std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
    return v[v.size() / 2];
  }
};

}  // namespace

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::max(1, std::atoi(argv[1])) : 20;
  const data::Dataset d = training_data();
  std::vector<std::unique_ptr<Run>> runs;
  runs.push_back(std::make_unique<Run>("fp32", Variant::Fp32, d));
  runs.push_back(std::make_unique<Run>("qat (int8_default)", Variant::Qat, d));
  runs.push_back(std::make_unique<Run>("qat, weights off", Variant::WeightsOff, d));
  runs.push_back(std::make_unique<Run>("qat, activations off", Variant::ActivationsOff, d));
  for (auto& r : runs) r->steps(2 * kBlock);  // warm-up: buffers, observers' first batches
  for (int i = 0; i < rounds; ++i)
    for (auto& r : runs) r->blocks.push_back(r->steps(kBlock));
  std::printf("MLP step, batch %lld, %d rounds of %lld steps each (alternating)\n",
              static_cast<long long>(kBatch), rounds, static_cast<long long>(kBlock));
  std::printf("%-22s %12s %12s %14s %14s\n", "step", "fastest us", "median us", "fastest / fp32",
              "median / fp32");
  const Run& ref = *runs.front();
  for (const auto& r : runs)
    std::printf("%-22s %12.1f %12.1f %13.3fx %13.3fx\n", r->name.c_str(), r->fastest() * 1e6,
                r->median() * 1e6, r->fastest() / ref.fastest(), r->median() / ref.median());
}
