// NCCL for CUDA tensors (framework/distributed/detail/nccl_group.cpp). On the host, without a
// device: device selection, options, the unique id's exchange through the rendezvous store, error
// texts, and what a CUDA collective says without NCCL or without a device. With a device: a group
// of one forced through NCCL (collectives, the split observer path, DDP on CUDA); with two: a
// 2-process job (this executable re-started as its ranks). Device tests carry a precondition and
// are skipped with the reason; main() then prints a "skipped:" line and exits 77.
#define BOOST_TEST_MODULE qat_nccl
#define BOOST_TEST_NO_MAIN
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <cstdlib>
#include <iostream>
#include <thread>

#include "framework/autograd/ops.h"
#include "framework/distributed/ddp.h"
#include "framework/distributed/detail/group_impl.h"
#include "framework/distributed/replica.h"
#include "framework/nn/nn.h"
#include "modules/quant/quant.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/distributed/nccl_worker.h"
#ifdef QAT_TEST_GLOO
#include "framework/distributed/detail/rendezvous.h"
#endif

using namespace qat;
namespace dist = qat::distributed;
using qat::test::has_cuda_device;

namespace {

// Runs f and returns its qat::Error's message ("" when it did not throw).
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// 0, 1, ..., n - 1 as dtype d (CPU)
Tensor ramp(std::int64_t n, DType d) {
  std::vector<double> v(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) v[i] = static_cast<double>(i);
  return Tensor::from_vector(v, Shape{n}).to(d);
}

dist::ProcessGroupPtr nccl_alone_group() {
  dist::GroupOptions o;
  o.nccl_alone = true;
  return dist::init_process_group(o);
}

}  // namespace

// ---- host: no device needed ------------------------------------------------------------------

BOOST_AUTO_TEST_SUITE(host)

BOOST_AUTO_TEST_CASE(each_rank_picks_local_rank_else_rank_modulo_the_devices) {
  dist::GroupOptions o;
  o.world_size = 8, o.rank = 5;
  BOOST_TEST(o.cuda_device(4) == 1);  // RANK % count
  BOOST_TEST(o.cuda_device(1) == 0);
  o.local_rank = 2;
  BOOST_TEST(o.cuda_device(4) == 2);
  BOOST_TEST(contains(error_of([&] { o.cuda_device(2); }),
                      "LOCAL_RANK=2 but this machine has 2 CUDA devices (one rank per GPU"));
  BOOST_TEST(contains(error_of([&] { o.cuda_device(0); }), "rank 5 has no CUDA device to run on"));
}

BOOST_AUTO_TEST_CASE(from_env_reads_local_rank_and_names_a_bad_value) {
  ::setenv("RANK", "1", 1), ::setenv("WORLD_SIZE", "2", 1), ::setenv("LOCAL_RANK", "1", 1);
  BOOST_TEST(dist::GroupOptions::from_env().local_rank == 1);
  ::setenv("LOCAL_RANK", "one", 1);
  BOOST_TEST(
      contains(error_of([] { dist::GroupOptions::from_env(); }), "LOCAL_RANK='one' is not a whole"));
  ::unsetenv("LOCAL_RANK");
  BOOST_TEST(dist::GroupOptions::from_env().local_rank == -1);
  ::unsetenv("RANK"), ::unsetenv("WORLD_SIZE");
  dist::GroupOptions o;
  o.world_size = 2, o.nccl_alone = true;
  BOOST_TEST(
      contains(error_of([&] { o.validate(); }), "nccl_alone is for a group of one, WORLD_SIZE is 2"));
}

// A group of one: CUDA collectives are the identity (no NCCL, no device needed); nccl_alone
// forces NCCL, which needs it in the build, and a device at the first CUDA collective.
BOOST_AUTO_TEST_CASE(a_group_of_one_and_nccl_alone) {
  auto one = dist::init_process_group({});
  BOOST_TEST(!one->syncs());
  BOOST_TEST(error_of([&] { one->all_reduce_cuda(nullptr, 4, DType::Float32, dist::ReduceOp::Sum); }) ==
             "");
  BOOST_TEST(
      contains(error_of([&] { one->all_reduce_cuda(nullptr, 4, DType::UInt8, dist::ReduceOp::Sum); }),
               "dtype uint8 is not supported"));
  {
    dist::ReplicaGuard guard(one);
    BOOST_TEST(!dist::replicas_active());
  }
  if (!dist::has_nccl()) {
    BOOST_TEST(contains(error_of([] { nccl_alone_group(); }),
                        "a CUDA tensor in a collective needs NCCL, and this build has none"));
    return;
  }
  auto alone = nccl_alone_group();
  BOOST_TEST(alone->syncs());
  {
    dist::ReplicaGuard guard(alone);
    BOOST_TEST(dist::replicas_active());
  }
  if (cuda::is_available()) return;  // the device suite runs it
  // lazily: the communicator is made at the first CUDA collective, which needs the device
  const std::string e =
      error_of([&] { alone->all_reduce_cuda(nullptr, 4, DType::Float32, dist::ReduceOp::Max); });
  BOOST_TEST(contains(e, "ProcessGroup (NCCL setup): no usable CUDA device"), e);
  BOOST_TEST(contains(
      error_of([&] { alone->all_reduce_cuda(nullptr, 4, DType::Float32, dist::ReduceOp::Max); }),
      "the NCCL communicator of rank 0 of 1 could not be set up earlier"));
  std::vector<float> host{1, 2};  // CPU collectives still go to the CPU group
  alone->all_reduce(host.data(), 2, DType::Float32, dist::ReduceOp::Sum);
  BOOST_TEST(host[1] == 2.0f);
}

#ifdef QAT_TEST_NCCL
BOOST_AUTO_TEST_CASE(nccl_errors_name_the_collective_the_rank_and_the_cause) {
  const std::string e =
      dist::detail::nccl_error_text(4 /* ncclInvalidArgument */, "all_reduce (sum, 12 bytes)",
                                    "rank 1 of 2", "count 3 of a null buffer");
  // ncclGetErrorString's text, then ncclGetLastError's
  BOOST_TEST(
      e.rfind("ProcessGroup: all_reduce (sum, 12 bytes) (NCCL) failed on rank 1 of 2: invalid argument",
              0) == 0,
      e);
  BOOST_TEST(e.ends_with(" (count 3 of a null buffer)"), e);
}
#endif

#ifdef QAT_TEST_GLOO
// The unique id: rank 0 makes it (once) and sets it in the rendezvous, every other rank gets it.
BOOST_AUTO_TEST_CASE(the_unique_id_reaches_every_rank_through_the_store) {
  const int port = qat::test::free_port();
  dist::detail::RendezvousServer server(port);
  constexpr int kWorld = 3;
  std::vector<std::vector<char>> got(kWorld);
  std::atomic<int> made{0};
  std::vector<std::thread> ranks;
  for (int r = kWorld - 1; r >= 0; --r)  // the others ask before rank 0 has set it
    ranks.emplace_back([&, r] {
      dist::detail::RendezvousClient client("127.0.0.1", port, std::chrono::seconds(10));
      got[r] = dist::detail::share_from_rank0(client, r, "qat/nccl/unique_id", [&] {
        ++made;
        std::vector<char> id(128);
        for (int i = 0; i < 128; ++i) id[i] = static_cast<char>(i * 7 + 3);
        return id;
      });
    });
  for (auto& t : ranks) t.join();
  BOOST_TEST(made == 1);
  BOOST_TEST(got[0].size() == 128u);
  for (int r = 1; r < kWorld; ++r) BOOST_TEST((got[r] == got[0]));
  // without rank 0 a rank waits up to the timeout, then names the key
  dist::detail::RendezvousClient late("127.0.0.1", port, std::chrono::milliseconds(300));
  const std::string e = error_of([&] { dist::detail::share_from_rank0(late, 1, "qat/nccl/other", {}); });
  BOOST_TEST(contains(e, "timed out after 0.3 s waiting for 'qat/nccl/other'"), e);
}

// Two ranks in threads of this process (Gloo on loopback): a CUDA collective says that the build
// has no NCCL, or (with it, but no device) that there is no device; CPU collectives go on.
BOOST_AUTO_TEST_CASE(a_cuda_collective_of_two_ranks_without_nccl_or_device_is_refused) {
  if (dist::has_nccl() && cuda::device_count() > 0) {
    std::cout << "skipped: this machine has a CUDA device (two ranks of one process would share it)\n";
    return;
  }
  const int port = qat::test::free_port();
  std::vector<std::string> errors(2);
  std::vector<float> sums(2);
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r)
    ranks.emplace_back([&, r] {
      dist::GroupOptions o;
      o.rank = r, o.world_size = 2, o.master_port = port, o.timeout = std::chrono::seconds(20);
      o.lane = dist::GroupOptions::Lane::Off;
      auto g = dist::init_process_group(o);
      errors[r] = error_of([&] { g->all_reduce_cuda(nullptr, 4, DType::Float32, dist::ReduceOp::Sum); });
      float v = static_cast<float>(r + 1);
      g->all_reduce(&v, 1, DType::Float32, dist::ReduceOp::Sum);
      sums[r] = v;
      g->barrier();
    });
  for (auto& t : ranks) t.join();
  const std::string want = dist::has_nccl() ? "ProcessGroup (NCCL setup): no usable CUDA device"
                                            : "ProcessGroup::all_reduce: a CUDA tensor in a collective "
                                              "needs NCCL, and this build has none";
  for (int r = 0; r < 2; ++r) {
    BOOST_TEST(contains(errors[r], want), errors[r]);
    BOOST_TEST(sums[r] == 3.0f);
  }
}
#endif

BOOST_AUTO_TEST_SUITE_END()

// ---- device: a group of one through NCCL ---------------------------------------------------

BOOST_AUTO_TEST_SUITE(device, *boost::unit_test::precondition(has_cuda_device))

// all_reduce (each op and dtype, blocking and async), broadcast, all_gather and barrier on odd
// sizes, each on a slice between guard elements that must stay as they were.
BOOST_AUTO_TEST_CASE(single_rank_collectives_through_nccl) {
  if (!dist::has_nccl()) return;
  auto g = nccl_alone_group();
  for (std::int64_t n : {1, 7, 1023, 4097}) {
    for (DType d : {DType::Float32, DType::Float64, DType::Int32, DType::Int64}) {
      BOOST_TEST_CONTEXT("n " << n << ", " << dtype_name(d)) {
        const Tensor host = ramp(n + 2, d);  // guards at 0 and n + 1
        const Tensor t = host.to(Device::CUDA);
        const Tensor inner = t.rows(1, n + 1);
        for (auto op : {dist::ReduceOp::Sum, dist::ReduceOp::Min, dist::ReduceOp::Max})
          g->all_reduce(inner, op);
        g->all_reduce_async(inner, dist::ReduceOp::Sum)->wait();
        BOOST_TEST(qat::test::same_values(t.to(Device::CPU), host));
        g->broadcast(inner, 0);
        const Tensor all = g->all_gather(inner);
        BOOST_TEST((all.shape() == Shape{1, n}));
        BOOST_TEST(
            qat::test::same_values(all.to(Device::CPU).view_as_shape(Shape{n}), host.rows(1, n + 1)));
      }
    }
  }
  const std::int64_t before = g->stats().nccl_calls;
  g->barrier();
  BOOST_TEST(g->stats().nccl_calls == before + 1);
  BOOST_TEST(
      contains(error_of([&] { g->broadcast(Tensor::ones(Shape{3}, DType::Float32, Device::CUDA), 1); }),
               "root must be in [0, 1), got 1"));
}

// Under a replica group the CUDA FakeQuantize splits its fused kernel around an NCCL all-reduce;
// over one rank that all-reduce is the identity, so the split path must give the fused path's bits.
BOOST_AUTO_TEST_CASE(the_split_observer_path_matches_the_fused_one) {
  if (!dist::has_nccl()) return;
  auto g = nccl_alone_group();
  for (const auto& spec :
       {quant::QuantSpec::activation_affine(8), quant::QuantSpec::weight_per_channel(8, 0)}) {
    const Shape params = spec.granularity == quant::Granularity::PerChannel ? Shape{6} : Shape{1};
    auto make = [&] {
      auto fq = std::make_shared<quant::FakeQuantize>(
          spec, quant::make_observer(quant::ObserverKind::MovingAverage, spec, params), params);
      fq->to(Device::CUDA);
      fq->train();
      return fq;
    };
    auto fused = make(), split = make();
    for (int step = 0; step < 4; ++step) {
      Tensor x = qat::test::rnd(Shape{6, 5, 9}, 50 + step, -1 - step, 2 + step);
      if (step == 2) x.data<float>()[7] = std::nanf("");  // skipped and counted by both
      const Tensor xd = x.to(Device::CUDA);
      const Tensor yf = fused->forward(xd);
      Tensor ys;
      {
        dist::ReplicaGuard guard(g);
        ys = split->forward(xd);
      }
      qat::test::require_bits_equal(yf, ys);
      qat::test::require_bits_equal(fused->scale(), split->scale());
      qat::test::require_bits_equal(fused->observer()->min_val(), split->observer()->min_val());
      qat::test::require_bits_equal(fused->observer()->max_val(), split->observer()->max_val());
      BOOST_TEST(fused->observer()->nonfinite_batches().item() ==
                 split->observer()->nonfinite_batches().item());
    }
  }
  BOOST_TEST(g->stats().nccl_calls >= 8);
}

// DDP with CUDA parameters: buckets on the device, NCCL, the averaging kernel; over one rank the
// gradients stay what backward gave. Parameters on two devices are refused.
BOOST_AUTO_TEST_CASE(ddp_on_cuda) {
  if (!dist::has_nccl()) return;
  auto g = nccl_alone_group();
  auto model = std::make_shared<nn::Linear>(5, 3), plain = std::make_shared<nn::Linear>(5, 3);
  plain->weight().copy_(model->weight()), plain->bias().copy_(model->bias());
  model->to(Device::CUDA), plain->to(Device::CUDA);
  dist::DistributedDataParallel ddp(model, g, {.bucket_bytes = 16});
  const Tensor x = qat::test::rnd(Shape{4, 5}, 9).to(Device::CUDA);
  sum(ddp(x)).backward();
  sum(plain->forward(x)).backward();
  qat::test::require_bits_equal(plain->weight().grad(), model->weight().grad());
  qat::test::require_bits_equal(plain->bias().grad(), model->bias().grad());
  BOOST_TEST(g->stats().nccl_calls >= 3);  // start: broadcasts; backward: buckets
  auto on_gpu = std::make_shared<nn::Linear>(5, 3);
  on_gpu->to(Device::CUDA);
  auto mixed = std::make_shared<nn::Sequential>(
      nn::NamedModules{{"cpu", std::make_shared<nn::Linear>(3, 5)}, {"gpu", on_gpu}});
  BOOST_TEST(contains(error_of([&] { dist::DistributedDataParallel bad(mixed, g); }),
                      "DistributedDataParallel: parameters on two devices"));
}

// Two processes, one GPU each: this executable as the ranks (tests/distributed/nccl_worker.h).
BOOST_AUTO_TEST_CASE(two_ranks_on_two_gpus) {
  if (!dist::has_nccl()) return;
  if (cuda::device_count() < 2) {
    std::cout << "skipped: the 2-rank NCCL job needs 2 CUDA devices, this machine has "
              << cuda::device_count() << " (NCCL refuses two ranks on one GPU)\n";
    return;
  }
  const auto results = qat::test::launch_self(2);
  for (std::size_t r = 0; r < results.size(); ++r) {
    BOOST_TEST(results[r].status == 0, "rank " << r << ": " << results[r].output);
    BOOST_TEST(contains(results[r].output, "nccl worker ok"), results[r].output);
  }
}

BOOST_AUTO_TEST_SUITE_END()

int main(int argc, char* argv[]) {
  qat::test::self_path = argv[0];
  if (std::getenv("QAT_NCCL_WORKER") != nullptr) return qat::test::nccl_worker();
  const int rc = boost::unit_test::unit_test_main(&init_unit_test, argc, argv);
  if (rc != 0 || cuda::is_available()) return rc;
  std::cout << "skipped: no CUDA device (" << cuda::unavailable_reason()
            << "): the NCCL device tests of test_nccl did not run\n";
  return 77;
}
