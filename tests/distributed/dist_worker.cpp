// One rank of a data-parallel test job; test_distributed starts WORLD_SIZE of these with RANK,
// WORLD_SIZE, MASTER_ADDR, MASTER_PORT set, and reads their exit status and output.
//
//   dist_worker collectives
//   dist_worker train QCONFIG STEPS    DDP on 2+ ranks vs one process on the global batch
//   dist_worker no_sync
//   dist_worker fail throw|kill|hang   rank 1 fails at step 3 (the others must stop with an error)
//   dist_worker model_differs          rank 1 builds another model
//   dist_worker join                   only joins the group
//
// Exit status: 0 passed, 1 a check failed (the line says which), 2 qat::Error (printed).
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include "framework/autograd/ops.h"
#include "framework/data/dataloader.h"
#include "framework/distributed/ddp.h"
#include "framework/distributed/process_group.h"
#include "framework/nn/nn.h"
#include "framework/optim/sgd.h"
#include "framework/tensor/random.h"
#include "modules/quant/prepare.h"
#include "modules/quant/stubs.h"

using namespace qat;
using distributed::ProcessGroup;
using distributed::ReduceOp;

namespace {

struct CheckFailed : std::runtime_error {
  using std::runtime_error::runtime_error;
};

void check(bool ok, const std::string& what) {
  if (!ok) throw CheckFailed(what);
}

// 8x8 images in 5 classes: class k brightens row block k, plus noise (learnable, not trivial).
data::Dataset make_data(std::int64_t n) {
  Generator gen(1234);
  Tensor images = Tensor::empty(Shape{n, 8, 8}, DType::UInt8);
  Tensor labels = Tensor::empty(Shape{n}, DType::UInt8);
  std::uint8_t* px = images.data<std::uint8_t>();
  for (std::int64_t i = 0; i < n; ++i) {
    const auto k = static_cast<std::uint8_t>(gen.below(5));
    labels.data<std::uint8_t>()[i] = k;
    for (int p = 0; p < 64; ++p) {
      const int row = p / 8;
      const double base = (row / 2 == k % 4 ? 150.0 : 40.0) + (k == 4 && p % 8 < 2 ? 80.0 : 0.0);
      px[i * 64 + p] =
          static_cast<std::uint8_t>(std::min(255.0, base + static_cast<double>(gen.below(90))));
    }
  }
  return {images, labels, 5};
}

// conv-bn-relu, pool, linear: QAT fuses the ConvBn (SyncBN inside) and puts observers everywhere.
nn::ModulePtr make_model(const std::string& qconfig, std::int64_t classes = 5) {
  auto model = std::make_shared<nn::Sequential>(nn::NamedModules{
      {"quant", std::make_shared<quant::QuantStub>()},
      {"conv", std::make_shared<nn::Conv2d>(1, 4, 3, Conv2dParams{.padding = {1, 1}}, false)},
      {"bn", std::make_shared<nn::BatchNorm2d>(4)},
      {"relu", std::make_shared<nn::ReLU>()},
      {"pool", std::make_shared<nn::MaxPool2d>(2)},
      {"flatten", std::make_shared<nn::Flatten>()},
      {"fc", std::make_shared<nn::Linear>(64, classes)},
      {"dequant", std::make_shared<quant::DeQuantStub>()}});
  if (qconfig != "fp32") {
    quant::QConfigRegistry registry;
    quant::QConfig histogram = registry.get("int8_default");  // histogram-calibrated activations
    histogram.name = "int8_histogram";
    histogram.activation->observer = quant::ObserverKind::Histogram;
    registry.register_config(histogram);
    registry.set_global(qconfig);
    quant::prepare_qat(*model, registry, Tensor::zeros(Shape{1, 1, 8, 8}));
  }
  return model;
}

// FNV-1a over the bytes of every parameter and buffer.
std::int64_t state_hash(const nn::Module& m) {
  std::uint64_t h = 1469598103934665603ULL;
  for (const auto& [name, t] : m.named_state()) {
    const auto* p = static_cast<const unsigned char*>(t.raw_data());
    for (std::size_t i = 0; i < t.nbytes(); ++i) h = (h ^ p[i]) * 1099511628211ULL;
  }
  return static_cast<std::int64_t>(h >> 1);
}

// Every rank's state hash equals rank 0's.
void check_identical(ProcessGroup& g, const nn::Module& m, const std::string& when) {
  Tensor mine = Tensor::full(Shape{1}, 0, DType::Int64);
  mine.data<std::int64_t>()[0] = state_hash(m);
  const Tensor all = g.all_gather(mine);
  for (int r = 1; r < g.world_size(); ++r)
    check(all.data<std::int64_t>()[r] == all.data<std::int64_t>()[0],
          when + ": rank " + std::to_string(r) + "'s parameters and buffers differ from rank 0's");
}

double ranks_sum_of(int w) { return w * (w + 1) / 2.0; }

int collectives(ProcessGroup& g) {
  const int r = g.rank(), w = g.world_size();
  for (std::int64_t n : {1, 7, 1000, 300007}) {  // 300007 floats: several Gloo segments
    Tensor f = Tensor::empty(Shape{n}, DType::Float32);
    Tensor d = Tensor::empty(Shape{n}, DType::Float64);
    Tensor i64 = Tensor::empty(Shape{n}, DType::Int64);
    Tensor i32 = Tensor::empty(Shape{n}, DType::Int32);
    for (std::int64_t k = 0; k < n; ++k) {
      f.data<float>()[k] = static_cast<float>((k % 13) * (r + 1)) * 0.5f;
      d.data<double>()[k] = (k % 7) - r * 1.25;
      i64.data<std::int64_t>()[k] = k * (r + 1);
      i32.data<std::int32_t>()[k] = static_cast<std::int32_t>(k % 100) - r;
    }
    auto wf = g.all_reduce_async(f, ReduceOp::Sum);  // three in flight at once
    auto wd = g.all_reduce_async(d, ReduceOp::Min);
    auto wi = g.all_reduce_async(i64, ReduceOp::Max);
    g.all_reduce(i32, ReduceOp::Sum);
    wf->wait();
    wd->wait();
    wi->wait();
    const double ranks_sum = w * (w + 1) / 2.0;
    for (std::int64_t k = 0; k < n; ++k) {
      check(f.data<float>()[k] == static_cast<float>((k % 13) * ranks_sum * 0.5),
            "all_reduce sum float32");
      check(d.data<double>()[k] == (k % 7) - (w - 1) * 1.25, "all_reduce min float64");
      check(i64.data<std::int64_t>()[k] == k * w, "all_reduce max int64");
      check(i32.data<std::int32_t>()[k] == w * static_cast<std::int32_t>(k % 100) - w * (w - 1) / 2,
            "all_reduce sum int32");
    }
  }
  // Blocking float all-reduces (what observers and SyncBatchNorm issue in the forward pass) take
  // the synchronous lane when small (300001 floats, 1.2 MB, do not), also while async work is in flight on
  // the other connections; the same calls again reuse the lane's rings.
  Tensor big = Tensor::full(Shape{200003}, static_cast<double>(r + 1), DType::Float32);
  auto wbig = g.all_reduce_async(big, ReduceOp::Sum);
  for (int pass = 0; pass < 2; ++pass)
    for (std::int64_t n : {1, 7, 1000, 300001}) {
      std::vector<float> lo(n), hi(n);
      std::vector<double> s(n);
      for (std::int64_t k = 0; k < n; ++k) {
        lo[k] = static_cast<float>(k % 5) - 0.25f * r;
        hi[k] = lo[k];
        s[k] = 0.1 * static_cast<double>(k % 9) + r;
      }
      g.all_reduce(lo.data(), n, DType::Float32, ReduceOp::Min);
      g.all_reduce(hi.data(), n, DType::Float32, ReduceOp::Max);
      g.all_reduce(s.data(), n, DType::Float64, ReduceOp::Sum);
      for (std::int64_t k = 0; k < n; ++k) {
        check(lo[k] == static_cast<float>(k % 5) - 0.25f * (w - 1), "blocking all_reduce min float32");
        check(hi[k] == static_cast<float>(k % 5), "blocking all_reduce max float32");
        double expect = 0;
        for (int q = 0; q < w; ++q) expect += 0.1 * static_cast<double>(k % 9) + q;
        check(std::abs(s[k] - expect) <= 1e-12 * std::abs(expect), "blocking all_reduce sum float64");
      }
    }
  wbig->wait();
  if (const char* expect = std::getenv("QAT_EXPECT_LANE"))
    check(std::string(distributed::lane_name(g.stats().lane)) == expect,
          std::string("the lane runs as ") + distributed::lane_name(g.stats().lane) + ", expected " +
              expect);
  const char* lane_env = std::getenv("QAT_DIST_LANE");
  const bool lane = !(lane_env && std::string(lane_env) == "off");
  // per pass: min and max of 1, 7, 1000 floats, and the sums too with 2 ranks
  const std::int64_t lane_calls = 2 * (w == 2 ? 9 : 6);
  check(g.stats().lane_calls == (lane ? lane_calls : 0),
        "synchronous lane calls: " + std::to_string(g.stats().lane_calls));
  for (std::int64_t k = 0; k < big.numel(); ++k)
    check(big.data<float>()[k] == static_cast<float>(ranks_sum_of(w)), "async sum beside the lane");
  Tensor b = Tensor::full(Shape{3, 5}, r == w - 1 ? 42.0 : -1.0);
  g.broadcast(b, w - 1);
  for (std::int64_t k = 0; k < b.numel(); ++k) check(b.data<float>()[k] == 42.0f, "broadcast");
  Tensor mine = Tensor::full(Shape{2}, r * 10.0, DType::Float64);
  const Tensor all = g.all_gather(mine);
  check(all.shape() == Shape({w, 2}), "all_gather shape");
  for (int k = 0; k < w; ++k) check(all.data<double>()[2 * k] == k * 10.0, "all_gather values");
  g.barrier();
  Tensor empty = Tensor::empty(Shape{0}, DType::Float32);
  g.all_reduce(empty);
  bool refused = false;
  try {
    g.broadcast(b, w);
  } catch (const Error& e) {
    refused = std::string(e.what()).find("root must be in") != std::string::npos;
  }
  check(refused, "broadcast from a root out of range is refused");
  std::cout << "rank " << r << ": collectives ok, all_reduce bytes " << g.stats().all_reduce_bytes
            << "\n";
  return 0;
}

// DDP over the ranks (local batch 32 / W) against one process on the global batch of 32, from
// the same start on the same samples: the replicas stay bit-identical, and losses and state
// follow the single-process run up to float summation order.
int train(const distributed::ProcessGroupPtr& gp, const std::string& qconfig, int steps) {
  ProcessGroup& g = *gp;
  const int w = g.world_size();
  const data::Dataset train = make_data(640);
  manual_seed(7);
  nn::ModulePtr model = make_model(qconfig);
  manual_seed(7);
  nn::ModulePtr ref = make_model(qconfig);
  distributed::DistributedDataParallel ddp(model, gp, {.bucket_bytes = 512});  // several buckets
  optim::SGD opt(model->named_parameters(), {.lr = 0.1, .momentum = 0.9});
  optim::SGD opt_ref(ref->named_parameters(), {.lr = 0.1, .momentum = 0.9});
  data::DataLoader loader(train, {.batch_size = 32 / w, .seed = 3, .num_replicas = w, .rank = g.rank()});
  data::DataLoader loader_ref(train, {.batch_size = 32, .seed = 3});
  model->train();
  ref->train();
  check_identical(g, *model, "after the broadcast");
  double max_loss_diff = 0, first_loss = 0, last_loss = 0;
  data::Batch b, br;
  for (int s = 0; s < steps; ++s) {
    if (!loader.next(b)) loader.next(b);
    if (!loader_ref.next(br)) loader_ref.next(br);
    opt.zero_grad();
    Tensor loss = cross_entropy(ddp(b.images), b.labels);
    loss.backward();
    opt.step();
    opt_ref.zero_grad();
    Tensor loss_ref = cross_entropy((*ref)(br.images), br.labels);
    loss_ref.backward();
    opt_ref.step();
    Tensor global = Tensor::full(Shape{1}, loss.item(), DType::Float64);
    g.all_reduce(global);
    const double mean = global.item() / w, expect = loss_ref.item();
    max_loss_diff =
        std::max(max_loss_diff, std::fabs(mean - expect) / std::max(std::fabs(expect), 1e-6));
    if (s == 0) first_loss = expect;
    last_loss = expect;
    check_identical(g, *model, "step " + std::to_string(s + 1));
  }
  // final state against the single-process run, relative to each tensor's range
  double max_state_diff = 0;
  std::string worst;
  const NamedTensors mine = model->named_state(), theirs = ref->named_state();
  for (std::size_t i = 0; i < mine.size(); ++i) {
    const Tensor& a = mine[i].second;
    const Tensor& e = theirs[i].second;
    if (a.dtype() != DType::Float32) continue;
    double lo = INFINITY, hi = -INFINITY, diff = 0;
    for (std::int64_t k = 0; k < a.numel(); ++k) {
      const double x = a.data<float>()[k], y = e.data<float>()[k];
      if (!std::isfinite(y)) continue;
      lo = std::min(lo, y);
      hi = std::max(hi, y);
      diff = std::max(diff, std::fabs(x - y));
    }
    const double rel = diff / std::max(hi - lo, 1e-3);
    if (rel > max_state_diff) max_state_diff = rel, worst = mine[i].first;
  }
  std::cout << "rank " << g.rank() << ": " << qconfig << " " << steps << " steps, loss " << first_loss
            << " -> " << last_loss << ", max loss diff " << max_loss_diff
            << " (relative), max state diff " << max_state_diff << " of range (" << worst
            << "), replicas bit-identical every step\n";
  check(last_loss < first_loss, "training lowers the loss");
  // LSQ scales its scale gradient by 1 / sqrt(numel(x) * quant_max) with the replica's own x, as
  // PyTorch's LearnableFakeQuantize does under DDP: activation scales then learn sqrt(world) times
  // faster than in one process on the global batch, so that run is not the reference here.
  if (qconfig.find("lsq") == std::string::npos) {
    check(max_loss_diff <= 1e-4, "losses follow the single-process run within 1e-4");
    check(max_state_diff <= 1e-3, "state follows the single-process run within 1e-3 of its range");
  }
  const auto& st = ddp.stats();
  check(st.syncs == steps && st.reduced_bytes == steps * st.gradient_bytes,
        "all-reduce traffic equals the gradient bytes each step");
  return 0;
}

// Gradients accumulated under no_sync stay local; the next backward averages the sum.
int no_sync(const distributed::ProcessGroupPtr& gp) {
  ProcessGroup& g = *gp;
  const data::Dataset train = make_data(128);
  manual_seed(1);
  nn::ModulePtr model = make_model("fp32");
  distributed::DistributedDataParallel ddp(model, gp);
  data::DataLoader loader(
      train, {.batch_size = 8, .seed = 5, .num_replicas = g.world_size(), .rank = g.rank()});
  model->train();
  data::Batch b;
  loader.next(b);
  {
    auto guard = ddp.no_sync();
    cross_entropy(ddp(b.images), b.labels).backward();
  }
  Tensor grad = model->named_parameters().back().second.grad();
  Tensor mine = grad.clone();
  const Tensor all = g.all_gather(mine);
  bool differ = false;
  for (std::int64_t k = 0; k < mine.numel(); ++k)
    differ = differ || all.data<float>()[k] != all.data<float>()[mine.numel() + k];
  check(differ, "under no_sync each rank keeps its own gradient");
  loader.next(b);
  cross_entropy(ddp(b.images), b.labels).backward();
  Tensor after = model->named_parameters().back().second.grad().clone();
  const Tensor all_after = g.all_gather(after);
  for (std::int64_t k = 0; k < after.numel(); ++k)
    check(all_after.data<float>()[k] == all_after.data<float>()[after.numel() + k],
          "after a synced backward every rank has the same gradient");
  check(ddp.stats().syncs == 1, "one synced backward");
  // a training forward that bypasses ddp(...) is refused at its backward
  loader.next(b);
  bool refused = false;
  try {
    cross_entropy((*model)(b.images), b.labels).backward();
  } catch (const Error& e) {
    refused = std::string(e.what()).find("did not go through ddp(x)") != std::string::npos;
  }
  check(refused, "a forward around ddp(...) is refused");
  std::cout << "rank " << g.rank() << ": no_sync ok\n";
  return 0;
}

int fail(const distributed::ProcessGroupPtr& gp, const std::string& how) {
  ProcessGroup& g = *gp;
  const data::Dataset train = make_data(256);
  manual_seed(2);
  nn::ModulePtr model = make_model("int8_default");
  distributed::DistributedDataParallel ddp(model, gp);
  optim::SGD opt(model->named_parameters(), {.lr = 0.05});
  data::DataLoader loader(
      train, {.batch_size = 8, .seed = 5, .num_replicas = g.world_size(), .rank = g.rank()});
  model->train();
  int step = 0;
  for (int epoch = 0; epoch < 100; ++epoch)
    for (const data::Batch& b : loader) {
      if (g.rank() == 1 && ++step == 3) {
        if (how == "kill") raise(SIGKILL);
        if (how == "hang") pause();
        throw Error("dist_worker: injected failure on rank 1");
      }
      opt.zero_grad();
      cross_entropy(ddp(b.images), b.labels).backward();
      opt.step();
    }
  check(false, "rank 0 trained on although rank 1 failed");
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string scenario = argc > 1 ? argv[1] : "";
  try {
    auto group = distributed::init_process_group(distributed::GroupOptions::from_env());
    if (scenario == "collectives") return collectives(*group);
    if (scenario == "train") return train(group, argv[2], std::stoi(argv[3]));
    if (scenario == "no_sync") return no_sync(group);
    if (scenario == "fail") return fail(group, argv[2]);
    if (scenario == "model_differs") {
      nn::ModulePtr model = make_model("int8_default", group->rank() == 1 ? 6 : 5);
      distributed::DistributedDataParallel ddp(model, group);
      return 1;
    }
    if (scenario == "latency") {  // microseconds per all-reduce of n floats
      for (std::int64_t n : {1, 64, 29034}) {
        Tensor t = Tensor::full(Shape{n}, 1.0);
        for (int i = 0; i < 20; ++i) group->all_reduce(t);
        const auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < 500; ++i) group->all_reduce(t);
        const double us =
            std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() /
            500;
        if (group->rank() == 0) std::cout << "all_reduce of " << n << " floats: " << us << " us\n";
      }
      return 0;
    }
    if (scenario == "join") {
      group->barrier();
      std::cout << "rank " << group->rank() << ": joined\n";
      return 0;
    }
    std::cerr << "dist_worker: unknown scenario '" << scenario << "'\n";
    return 64;
  } catch (const CheckFailed& e) {
    std::cerr << "check failed: " << e.what() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 2;
  }
}
