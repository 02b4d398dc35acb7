// Data-parallel training with real processes on loopback: the suite starts the ranks of each job
// itself (dist_worker, and the cnn_qat example with --distributed), with torchrun's environment.
#define BOOST_TEST_MODULE distributed
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/test/unit_test.hpp>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "framework/distributed/process_group.h"
#include "free_port.h"

namespace {

using Clock = std::chrono::steady_clock;

struct RankResult {
  int status = -1;  // exit status, or -signal
  std::string output;
  double seconds = 0;
};

using EnvFn = std::function<std::map<std::string, std::string>(int rank)>;

// Starts `world` processes `argv` (rank r with RANK=r, WORLD_SIZE, MASTER_ADDR/PORT and what
// `env` adds), waits for all of them, and kills what still runs after `limit_s`, or `grace_s`
// after rank 0 has exited.
std::vector<RankResult> launch(const std::vector<std::string>& argv, int world, const EnvFn& env = {},
                               double limit_s = 120, double grace_s = 1e9) {
  const int port = qat::test::free_port();
  std::vector<pid_t> pids(world);
  std::vector<std::string> logs(world);
  std::vector<RankResult> results(world);
  const auto t0 = Clock::now();
  for (int r = 0; r < world; ++r) {
    logs[r] = "/tmp/qat-dist-" + std::to_string(::getpid()) + "-" + std::to_string(r) + ".log";
    std::map<std::string, std::string> vars{
        {"RANK", std::to_string(r)},  {"WORLD_SIZE", std::to_string(world)},
        {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", std::to_string(port)},
        {"QAT_DIST_TIMEOUT", "60"},   {"QAT_NUM_THREADS", "1"}};
    if (env)
      for (const auto& [k, v] : env(r)) vars[k] = v;
    const pid_t pid = ::fork();
    if (pid == 0) {
      for (const auto& [k, v] : vars) {
        if (k == "@cpu") {  // bind this rank to one core, as launch.sh QAT_BIND=1 does
          cpu_set_t set;
          CPU_ZERO(&set);
          CPU_SET(std::stoi(v), &set);
          ::sched_setaffinity(0, sizeof set, &set);
          continue;
        }
        ::setenv(k.c_str(), v.c_str(), 1);
      }
      const int fd = ::open(logs[r].c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      ::dup2(fd, 1);
      ::dup2(fd, 2);
      std::vector<char*> args;
      for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
      args.push_back(nullptr);
      ::execv(args[0], args.data());
      ::_exit(127);
    }
    pids[r] = pid;
  }
  int running = world;
  while (running > 0) {
    for (int r = 0; r < world; ++r) {
      if (pids[r] <= 0) continue;
      int st = 0;
      if (::waitpid(pids[r], &st, WNOHANG) == pids[r]) {
        results[r].status = WIFEXITED(st) ? WEXITSTATUS(st) : -WTERMSIG(st);
        results[r].seconds = std::chrono::duration<double>(Clock::now() - t0).count();
        pids[r] = 0;
        --running;
      }
    }
    const double now = std::chrono::duration<double>(Clock::now() - t0).count();
    if (running > 0 && (now > limit_s || (pids[0] == 0 && now > results[0].seconds + grace_s)))
      for (int r = 0; r < world; ++r)
        if (pids[r] > 0) ::kill(pids[r], SIGKILL);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  for (int r = 0; r < world; ++r) {
    std::ifstream in(logs[r]);
    std::stringstream ss;
    ss << in.rdbuf();
    results[r].output = ss.str();
    std::remove(logs[r].c_str());
    BOOST_TEST_MESSAGE("rank " << r << " (status " << results[r].status << ", " << results[r].seconds
                               << " s):\n"
                               << results[r].output);
  }
  return results;
}

const std::string kWorker = QAT_DIST_WORKER;

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

struct NeedsGloo {
  NeedsGloo() {
    if (!qat::distributed::has_gloo()) {
      std::cout << "skipped: this build has no distributed backend (libgloo-dev)\n";
      std::exit(77);
    }
  }
};
BOOST_TEST_GLOBAL_FIXTURE(NeedsGloo);

}  // namespace

BOOST_AUTO_TEST_SUITE(collectives)

BOOST_AUTO_TEST_CASE(all_reduce_broadcast_all_gather_barrier_on_2_and_3_ranks) {
  for (int world : {2, 3}) {
    const auto rs = launch({kWorker, "collectives"}, world);
    for (const RankResult& r : rs) BOOST_TEST(r.status == 0, r.output);
  }
  // the lane spinning, and no lane (every collective on the event-loop connections)
  for (const char* lane : {"spin", "off"}) {
    const auto rs = launch({kWorker, "collectives"}, 2, [=](int) {
      return std::map<std::string, std::string>{{"QAT_DIST_LANE", lane}, {"QAT_EXPECT_LANE", lane}};
    });
    for (const RankResult& r : rs) BOOST_TEST(r.status == 0, lane << ": " << r.output);
  }
}

// QAT_DIST_LANE=auto (the default): ranks that share cores sleep in recv, ranks bound to cores of
// their own spin.
BOOST_AUTO_TEST_CASE(the_lane_spins_only_on_cores_of_its_own) {
  const auto shared = launch({kWorker, "collectives"}, 2, [](int) {
    return std::map<std::string, std::string>{{"QAT_EXPECT_LANE", "block"}};
  });
  for (const RankResult& r : shared) BOOST_TEST(r.status == 0, r.output);
  cpu_set_t mine;
  CPU_ZERO(&mine);
  ::sched_getaffinity(0, sizeof mine, &mine);
  std::vector<int> cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &mine)) cpus.push_back(c);
  if (cpus.size() < 2) {
    std::cout << "skipped: binding 2 ranks to cores of their own needs 2 cores, this process may "
                 "use "
              << cpus.size() << "\n";
    return;
  }
  const auto bound = launch({kWorker, "collectives"}, 2, [&](int rank) {
    return std::map<std::string, std::string>{{"QAT_EXPECT_LANE", "spin"},
                                              {"@cpu", std::to_string(cpus[rank])}};
  });
  for (const RankResult& r : bound) BOOST_TEST(r.status == 0, r.output);
}

BOOST_AUTO_TEST_CASE(a_group_of_one_needs_no_backend) {
  auto g = qat::distributed::init_process_group({});
  qat::Tensor t = qat::Tensor::full(qat::Shape{3}, 2.0);
  g->all_reduce(t);
  BOOST_TEST(t.data<float>()[2] == 2.0f);
  BOOST_TEST(g->all_gather(t).shape() == qat::Shape({1, 3}));
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(ddp)

// The replicas hold bit-identical parameters, buffers and qparams after every step, and follow a
// single process training on the global batch (the same samples per step).
BOOST_AUTO_TEST_CASE(replicas_stay_identical_and_match_one_process_on_the_global_batch) {
  for (const char* qconfig : {"fp32", "int8_default", "int8_lsq"}) {
    const auto rs = launch({kWorker, "train", qconfig, "20"}, 2);
    for (const RankResult& r : rs) {
      BOOST_TEST(r.status == 0, qconfig << ": " << r.output);
      BOOST_TEST(contains(r.output, "replicas bit-identical every step"), r.output);
    }
  }
}

// Histogram counts summed over 4 replicas. Few steps: the histogram's range grows in whole bins,
// so the float-order noise between the two runs (1e-7) flips a bin after ~6 steps; the replicas
// themselves stay bit-identical throughout.
BOOST_AUTO_TEST_CASE(histogram_observers_and_four_ranks) {
  const auto rs = launch({kWorker, "train", "int8_histogram", "5"}, 4);
  for (const RankResult& r : rs) BOOST_TEST(r.status == 0, r.output);
}

BOOST_AUTO_TEST_CASE(no_sync_accumulates_locally) {
  const auto rs = launch({kWorker, "no_sync"}, 2);
  for (const RankResult& r : rs) BOOST_TEST(r.status == 0, r.output);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(failures)

// A rank that throws, is killed or hangs: the others stop with an error naming the collective
// and their rank, within seconds (a dead peer closes its connections) or the timeout (a hang).
BOOST_AUTO_TEST_CASE(a_failing_rank_stops_the_others_with_a_clear_error) {
  for (const char* lane : {"block", "spin"})
    for (const char* how : {"throw", "kill"}) {
      const auto rs = launch({kWorker, "fail", how}, 2, [=](int) {
        return std::map<std::string, std::string>{{"QAT_DIST_LANE", lane}};
      });
      BOOST_TEST(rs[1].status != 0);
      BOOST_TEST(rs[0].status == 2, lane << ", " << how << ": " << rs[0].output);
      BOOST_TEST(contains(rs[0].output, "failed on rank 0 of 2"), rs[0].output);
      BOOST_TEST(rs[0].seconds < 30.0, how << ": rank 0 took " << rs[0].seconds << " s to stop");
    }
}

BOOST_AUTO_TEST_CASE(a_hanging_rank_is_reported_after_the_timeout) {
  const auto rs = launch(
      {kWorker, "fail", "hang"}, 2,
      [](int) {
        return std::map<std::string, std::string>{{"QAT_DIST_TIMEOUT", "3"}};
      },
      60, /*grace_s=*/0.5);
  BOOST_TEST(rs[0].status == 2, rs[0].output);
  BOOST_TEST(contains(rs[0].output, "failed on rank 0 of 2"), rs[0].output);
  BOOST_TEST(rs[0].seconds < 25.0);
  BOOST_TEST(rs[1].status == -SIGKILL);  // the harness ends the hanging one
}

BOOST_AUTO_TEST_CASE(mismatched_world_sizes_are_refused) {
  const auto rs = launch(
      {kWorker, "join"}, 2,
      [](int r) {
        return std::map<std::string, std::string>{{"WORLD_SIZE", r == 0 ? "2" : "3"},
                                                  {"QAT_DIST_TIMEOUT", "10"}};
      },
      30);
  BOOST_TEST(rs[1].status == 2, rs[1].output);
  BOOST_TEST(contains(rs[1].output, "WORLD_SIZE=3 but rank 0 started the group with WORLD_SIZE=2"),
             rs[1].output);
  BOOST_TEST(rs[0].status == 2, rs[0].output);
  BOOST_TEST(contains(rs[0].output, "rank 1 was started with WORLD_SIZE=3, this one with 2"),
             rs[0].output);
}

BOOST_AUTO_TEST_CASE(an_unreachable_master_is_named) {
  const auto rs = launch(
      {kWorker, "join"}, 1,
      [](int) {  // rank 1 alone: nobody serves the port
        return std::map<std::string, std::string>{
            {"QAT_DIST_TIMEOUT", "2"}, {"RANK", "1"}, {"WORLD_SIZE", "2"}};
      },
      30);
  BOOST_TEST(rs[0].status == 2, rs[0].output);
  BOOST_TEST(
      contains(rs[0].output, "cannot reach the rendezvous at MASTER_ADDR:MASTER_PORT = 127.0.0.1:"),
      rs[0].output);
  BOOST_TEST(rs[0].seconds < 15.0);
}

BOOST_AUTO_TEST_CASE(two_processes_with_one_rank_are_refused) {
  const auto rs = launch(
      {kWorker, "join"}, 3,
      [](int r) {
        return std::map<std::string, std::string>{{"RANK", r == 2 ? "1" : std::to_string(r)},
                                                  {"QAT_DIST_TIMEOUT", "5"}};
      },
      30, /*grace_s=*/10);
  int taken = 0;
  for (const RankResult& r : rs)
    taken += contains(r.output, "RANK 1 is already taken by another process");
  BOOST_TEST(taken == 1);
  BOOST_TEST(rs[0].status == 2, rs[0].output);  // rank 0 waits for rank 2, which never joins
}

BOOST_AUTO_TEST_CASE(a_rank_that_never_joins_is_named) {
  const auto rs = launch(
      {kWorker, "join"}, 1,
      [](int) {
        return std::map<std::string, std::string>{{"WORLD_SIZE", "2"}, {"QAT_DIST_TIMEOUT", "2"}};
      },
      30);
  BOOST_TEST(rs[0].status == 2, rs[0].output);
  BOOST_TEST(contains(rs[0].output, "rank 1 did not join within 2 s"), rs[0].output);
}

BOOST_AUTO_TEST_CASE(bad_environment_values_are_named) {
  const auto rs = launch(
      {kWorker, "join"}, 1,
      [](int) {
        return std::map<std::string, std::string>{{"RANK", "5"}};
      },
      30);
  BOOST_TEST(rs[0].status == 2);
  BOOST_TEST(contains(rs[0].output, "RANK must be in [0, 1) for WORLD_SIZE 1, got 5"), rs[0].output);
  const auto port = launch(
      {kWorker, "join"}, 1,
      [](int) {
        return std::map<std::string, std::string>{{"MASTER_PORT", "http"}};
      },
      30);
  BOOST_TEST(contains(port[0].output, "MASTER_PORT='http' is not a whole number"), port[0].output);
  const auto poll = launch(
      {kWorker, "join"}, 1,
      [](int) {
        return std::map<std::string, std::string>{{"QAT_DIST_LANE", "fast"}};
      },
      30);
  BOOST_TEST(contains(poll[0].output, "QAT_DIST_LANE='fast' must be auto, off, block or spin"), poll[0].output);
}

BOOST_AUTO_TEST_CASE(models_that_differ_between_ranks_are_refused_at_start) {
  const auto rs = launch({kWorker, "model_differs"}, 2);
  for (const RankResult& r : rs) {
    BOOST_TEST(r.status == 2, r.output);
    BOOST_TEST(contains(r.output, "the model differs between ranks: rank 1 has"), r.output);
  }
}

BOOST_AUTO_TEST_SUITE_END()

#ifdef QAT_CNN_QAT
// The example program: rank 0 alone writes the checkpoint; a resumed distributed run ends exactly
// where an uninterrupted one does; DDP's traffic per step equals the gradient bytes.
BOOST_AUTO_TEST_SUITE(cnn_qat_distributed)

namespace {

// The JSON summary line of a run's output.
std::string json_of(const std::string& out) {
  const auto at = out.rfind("{\"model\"");
  return at == std::string::npos ? "" : out.substr(at, out.find('}', at) - at + 1);
}

std::string field(const std::string& json, const std::string& key) {
  const auto at = json.find("\"" + key + "\": ");
  if (at == std::string::npos) return "";
  const auto from = at + key.size() + 4;
  return json.substr(from, json.find_first_of(",}", from) - from);
}

bool has_fashion_mnist() {
  return std::ifstream("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz").good();
}

}  // namespace

BOOST_AUTO_TEST_CASE(save_and_resume_across_two_ranks) {
  if (!has_fashion_mnist()) {
    std::cout << "skipped: no Fashion-MNIST in /usr/share/datasets/fashion-mnist\n";
    return;
  }
  const std::string dir = "/tmp/qat-dist-cli-" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  const std::vector<std::string> common{QAT_CNN_QAT,    "--distributed", "--mode",        "qat",
                                        "--arch",       "cnn-bn",        "--train-limit", "2048",
                                        "--test-limit", "500",           "--json"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> a = common;
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  };
  const auto whole = launch(with({"--epochs", "2", "--save", dir + "/whole.ckpt"}), 2);
  BOOST_TEST(whole[0].status == 0, whole[0].output);
  BOOST_TEST(whole[1].status == 0, whole[1].output);
  const std::string j = json_of(whole[0].output);
  BOOST_TEST(field(j, "world_size") == "2", j);
  BOOST_TEST(!field(j, "gradient_bytes").empty());
  BOOST_TEST(field(j, "allreduce_bytes_per_step") == field(j, "gradient_bytes"), j);
  BOOST_TEST(json_of(whole[1].output).empty());  // rank 1 neither prints a summary...
  BOOST_TEST(std::filesystem::exists(dir + "/whole.ckpt"));
  BOOST_TEST(std::filesystem::exists(dir + "/whole.ckpt.int8"));

  const auto first = launch(with({"--epochs", "1", "--save", dir + "/part.ckpt"}), 2);
  BOOST_TEST(first[0].status == 0, first[0].output);
  const auto rest =
      launch(with({"--epochs", "2", "--resume", dir + "/part.ckpt", "--save", dir + "/part.ckpt"}), 2);
  BOOST_TEST(rest[0].status == 0, rest[0].output);
  BOOST_TEST(rest[1].status == 0, rest[1].output);
  const std::string r = json_of(rest[0].output);
  for (const char* key : {"final_loss", "test_acc", "int8_acc"})
    BOOST_TEST(field(r, key) == field(j, key), key << ": resumed " << r << " vs whole " << j);
  // ...nor writes: the only files are rank 0's
  std::int64_t files = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) files += e.is_regular_file();
  BOOST_TEST(files == 4);
  std::filesystem::remove_all(dir);
}

BOOST_AUTO_TEST_CASE(global_batch_must_split_over_the_ranks) {
  const auto rs = launch({QAT_CNN_QAT, "--distributed", "--batch", "63", "--epochs", "1"}, 2, {}, 60);
  for (const RankResult& r : rs) {  // every rank refuses before joining
    BOOST_TEST(r.status == 2, r.output);
    BOOST_TEST(contains(r.output, "--batch: the global batch 63 must be a multiple of the world size 2"),
               r.output);
  }
}

BOOST_AUTO_TEST_CASE(mpirun_launches_the_same_job) {
  if (std::system("command -v mpirun >/dev/null 2>&1") != 0 || !has_fashion_mnist()) {
    std::cout << "skipped: no mpirun (openmpi-bin) or no Fashion-MNIST\n";
    return;
  }
  const std::string log = "/tmp/qat-dist-mpirun-" + std::to_string(::getpid()) + ".log";
  const std::string cmd =
      std::string("OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 MASTER_PORT=") +
      std::to_string(qat::test::free_port()) + " timeout 120 mpirun --oversubscribe -np 2 " + QAT_CNN_QAT +
      " --distributed --epochs 1 --train-limit 1024 --test-limit 200 --json > " + log + " 2>&1";
  const int status = std::system(cmd.c_str());
  std::ifstream in(log);
  std::stringstream ss;
  ss << in.rdbuf();
  std::remove(log.c_str());
  BOOST_TEST(status == 0, ss.str());
  BOOST_TEST(field(json_of(ss.str()), "world_size") == "2", ss.str());
}

BOOST_AUTO_TEST_SUITE_END()
#endif
