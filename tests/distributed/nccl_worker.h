#pragma once
// test_nccl's 2-process job: the executable re-started as its ranks (QAT_NCCL_WORKER set, with
// torchrun's environment), one GPU each. Each rank checks collectives of CUDA tensors against
// values it can compute alone, a FakeQuantize on CUDA under the replica group against a CPU one on
// the global batch, and DDP's CUDA gradients against the average of both ranks' CPU gradients.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "framework/autograd/ops.h"
#include "framework/distributed/ddp.h"
#include "framework/distributed/replica.h"
#include "framework/nn/nn.h"
#include "modules/quant/quant.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/distributed/free_port.h"

namespace qat::test {

inline std::string self_path;  // argv[0]

/// Equal values, compared in double (any dtype, any device).
inline bool same_values(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape()) return false;
  return a.to(Device::CPU).to(DType::Float64).to_vector<double>() ==
         b.to(Device::CPU).to(DType::Float64).to_vector<double>();
}

struct RankRun {
  int status = -1;
  std::string output;
};

/// This executable as `world` ranks of a job on loopback; killed after `limit_s`.
inline std::vector<RankRun> launch_self(int world, double limit_s = 240) {
  const std::string port = std::to_string(free_port());
  std::vector<pid_t> pids(world);
  std::vector<std::string> logs(world);
  for (int r = 0; r < world; ++r) {
    logs[r] = "/tmp/qat_nccl_rank_" + std::to_string(::getpid()) + "_" + std::to_string(r) + ".log";
    pids[r] = ::fork();
    if (pids[r] == 0) {
      ::setenv("QAT_NCCL_WORKER", "1", 1), ::setenv("RANK", std::to_string(r).c_str(), 1);
      ::setenv("LOCAL_RANK", std::to_string(r).c_str(), 1);
      ::setenv("WORLD_SIZE", std::to_string(world).c_str(), 1);
      ::setenv("MASTER_ADDR", "127.0.0.1", 1), ::setenv("MASTER_PORT", port.c_str(), 1);
      ::setenv("QAT_DIST_TIMEOUT", "60", 1);
      if (!std::freopen(logs[r].c_str(), "w", stdout)) ::_exit(126);
      ::dup2(::fileno(stdout), 2);
      ::execl(self_path.c_str(), self_path.c_str(), static_cast<char*>(nullptr));
      ::_exit(127);
    }
  }
  std::vector<RankRun> out(world);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(limit_s);
  for (int left = world; left > 0;) {
    for (int r = 0; r < world; ++r) {
      int st = 0;
      if (pids[r] <= 0 || ::waitpid(pids[r], &st, WNOHANG) != pids[r]) continue;
      out[r].status = WIFEXITED(st) ? WEXITSTATUS(st) : -WTERMSIG(st);
      pids[r] = 0;
      --left;
    }
    if (left > 0 && std::chrono::steady_clock::now() > deadline)
      for (pid_t p : pids)
        if (p > 0) ::kill(p, SIGKILL);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  for (int r = 0; r < world; ++r) {
    std::ifstream f(logs[r]);
    std::stringstream ss;
    ss << f.rdbuf();
    out[r].output = ss.str();
    std::remove(logs[r].c_str());
  }
  return out;
}

#define QAT_WORKER_CHECK(cond, what) \
  if (!(cond)) throw Error(std::string("check failed: ") + (what))

/// One rank of the job; 0 when every check passed.
inline int nccl_worker() {
  namespace dist = qat::distributed;
  int rank = -1;
  try {
    const auto o = dist::GroupOptions::from_env();
    rank = o.rank;
    cuda::set_device(o.cuda_device(cuda::device_count()));
    auto g = dist::init_process_group(o);
    const int w = g->world_size();
    // all_reduce: rank r holds (r + 1) (i + 1)
    constexpr std::int64_t n = 1001;
    for (DType d : {DType::Float32, DType::Float64, DType::Int32, DType::Int64}) {
      std::vector<double> mine(n), sum(n), mn(n), mx(n);
      for (std::int64_t i = 0; i < n; ++i) {
        mine[i] = (rank + 1.0) * (i + 1.0);
        sum[i] = (i + 1.0) * w * (w + 1) / 2, mn[i] = i + 1.0, mx[i] = w * (i + 1.0);
      }
      const Tensor host = Tensor::from_vector(mine, Shape{n}).to(d);
      const std::pair<dist::ReduceOp, std::vector<double>*> cases[] = {
          {dist::ReduceOp::Sum, &sum}, {dist::ReduceOp::Min, &mn}, {dist::ReduceOp::Max, &mx}};
      for (const auto& [op, want] : cases) {
        const Tensor t = host.to(Device::CUDA);
        if (op == dist::ReduceOp::Sum)
          g->all_reduce_async(t, op)->wait();
        else
          g->all_reduce(t, op);
        QAT_WORKER_CHECK(same_values(t, Tensor::from_vector(*want, Shape{n})), "all_reduce");
      }
    }
    const Tensor b = Tensor::full(Shape{5, 3}, rank, DType::Float32, Device::CUDA);
    g->broadcast(b, w - 1);
    QAT_WORKER_CHECK(same_values(b, Tensor::full(Shape{5, 3}, w - 1)), "broadcast");
    const Tensor all =
        g->all_gather(Tensor::full(Shape{7}, rank, DType::Int64, Device::CUDA)).to(Device::CPU);
    for (int q = 0; q < w; ++q) QAT_WORKER_CHECK(all.data<std::int64_t>()[q * 7 + 6] == q, "all_gather");
    g->barrier();

    // FakeQuantize: this rank's rows of the global batch on CUDA vs the CPU on the whole batch
    const auto spec = quant::QuantSpec::activation_affine(8);
    auto cpu_fq = std::make_shared<quant::FakeQuantize>(
        spec, quant::make_observer(quant::ObserverKind::MovingAverage, spec, Shape{1}), Shape{1});
    auto dev_fq = std::make_shared<quant::FakeQuantize>(
        spec, quant::make_observer(quant::ObserverKind::MovingAverage, spec, Shape{1}), Shape{1});
    dev_fq->to(Device::CUDA);
    cpu_fq->train(), dev_fq->train();
    for (int step = 0; step < 3; ++step) {
      // rank r's rows hold this rank's extremes: the global range needs both ranks
      const Tensor global = rnd(Shape{4 * w, 6}, 70 + step, -1 - step, 1 + 2 * step);
      const Tensor ref = cpu_fq->forward(global);
      Tensor y;
      {
        dist::ReplicaGuard guard(g);
        y = dev_fq->forward(global.rows(4 * rank, 4 * rank + 4).clone().to(Device::CUDA));
      }
      QAT_WORKER_CHECK(same_values(dev_fq->scale(), cpu_fq->scale()), "FakeQuantize scale");
      QAT_WORKER_CHECK(same_values(dev_fq->zero_point(), cpu_fq->zero_point()),
                       "FakeQuantize zero_point");
      QAT_WORKER_CHECK(same_values(y, ref.rows(4 * rank, 4 * rank + 4).clone()), "FakeQuantize output");
    }

    // DDP: the average of both ranks' gradients (CPU reference, to rounding)
    manual_seed(3);
    auto model = std::make_shared<nn::Linear>(6, 4);
    std::vector<Tensor> grads;
    for (int q = 0; q < w; ++q) {
      auto m = std::make_shared<nn::Linear>(6, 4);
      m->weight().copy_(model->weight()), m->bias().copy_(model->bias());
      sum(m->forward(rnd(Shape{3, 6}, 90 + q))).backward();
      grads.push_back(m->weight().grad());
    }
    model->to(Device::CUDA);
    dist::DistributedDataParallel ddp(model, g);
    sum(ddp(rnd(Shape{3, 6}, 90 + rank).to(Device::CUDA))).backward();
    const std::vector<float> got = model->weight().grad().to_vector<float>();
    for (std::size_t i = 0; i < got.size(); ++i) {
      double avg = 0;
      for (const Tensor& gr : grads) avg += gr.data<float>()[i] / w;
      QAT_WORKER_CHECK(std::abs(got[i] - avg) <= 1e-5 * std::max(1.0, std::abs(avg)), "DDP gradient");
    }
    g->barrier();
    std::cout << "nccl worker ok (rank " << rank << " of " << w << ", " << g->stats().nccl_calls
              << " NCCL calls)" << std::endl;
    return 0;
  } catch (const std::exception& e) {
    std::cout << "rank " << rank << ": " << e.what() << std::endl;
    return 1;
  }
}

}  // namespace qat::test
