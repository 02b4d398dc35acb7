// The example programs end to end on a small synthetic Fashion-MNIST-shaped data set: training,
// checkpoints, int8 evaluation, exact resume, and the exit status and message on bad files.
#define BOOST_TEST_MODULE qat_examples
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <sstream>
#include <string>

#include "framework/distributed/process_group.h"
#include "framework/io/io.h"
#include "framework/tensor/cuda.h"
#include "framework/tensor/random.h"

namespace io = qat::io;
namespace distributed = qat::distributed;
namespace cuda = qat::cuda;
using qat::Tensor;

namespace fs = std::filesystem;

namespace {

struct Result {
  int status;
  std::string out, err;
};

// One folder per test process: two suites running at once (two checkouts) never share files.
fs::path work_dir() { return fs::temp_directory_path() / ("qat_cli_" + std::to_string(::getpid())); }

Result run(const std::string& args) {
  static int n = 0;
  const fs::path dir = work_dir();
  const std::string out = (dir / ("out" + std::to_string(n))).string(),
                    err = (dir / ("err" + std::to_string(n++))).string();
  const int rc = std::system((args + " >" + out + " 2>" + err).c_str());
  auto slurp = [](const std::string& p) {
    std::ifstream f(p);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
  };
  return {WIFEXITED(rc) ? WEXITSTATUS(rc) : -1, slurp(out), slurp(err)};
}

// The last line of stdout, and one "key": value field of that JSON line.
std::string last_line(const std::string& s) {
  const auto end = s.find_last_not_of('\n');
  const auto start = s.rfind('\n', end);
  return s.substr(start == std::string::npos ? 0 : start + 1,
                  end - (start == std::string::npos ? 0 : start + 1) + 1);
}
std::string field(const std::string& json, const std::string& key) {
  const auto at = json.find("\"" + key + "\": ");
  if (at == std::string::npos) return "(missing " + key + ")";
  const auto start = at + key.size() + 4;
  return json.substr(start, json.find_first_of(",}", start) - start);
}

// Class c draws a bright square in a class-specific place: learnable in a few steps.
void write_idx(const fs::path& dir, const std::string& prefix, int n, std::uint64_t seed) {
  qat::Generator gen(seed);
  std::string images, labels;
  auto be32 = [](std::string& s, std::uint32_t v) {
    for (int k = 3; k >= 0; --k) s.push_back(static_cast<char>((v >> (8 * k)) & 0xFF));
  };
  be32(images, 0x803), be32(images, n), be32(images, 28), be32(images, 28);
  be32(labels, 0x801), be32(labels, n);
  for (int i = 0; i < n; ++i) {
    const int c = static_cast<int>(gen.below(10));
    labels.push_back(static_cast<char>(c));
    for (int p = 0; p < 28 * 28; ++p) {
      const int r = p / 28, col = p % 28, r0 = (c / 5) * 14, c0 = (c % 5) * 5;
      const bool on = r >= r0 && r < r0 + 10 && col >= c0 && col < c0 + 5;
      images.push_back(static_cast<char>(on ? 200 + gen.below(56) : gen.below(40)));
    }
  }
  for (auto [name, bytes] : {std::pair{prefix + "-images-idx3-ubyte.gz", &images},
                             {prefix + "-labels-idx1-ubyte.gz", &labels}}) {
    gzFile f = gzopen((dir / name).c_str(), "wb");
    gzwrite(f, bytes->data(), static_cast<unsigned>(bytes->size()));
    gzclose(f);
  }
}

struct Fixture {
  fs::path dir = work_dir();
  std::string data;
  Fixture() {
    fs::remove_all(dir);
    fs::create_directories(dir / "data");
    write_idx(dir / "data", "train", 640, 1);
    write_idx(dir / "data", "t10k", 200, 2);
    data = " --data " + (dir / "data").string() + " --threads 1 --json";
  }
  ~Fixture() { fs::remove_all(dir); }
  std::string path(const std::string& name) const { return (dir / name).string(); }
};

}  // namespace

BOOST_FIXTURE_TEST_SUITE(cli, Fixture)

BOOST_AUTO_TEST_CASE(train_save_convert_and_reload) {
  const Result r =
      run(std::string(QAT_MLP_QAT) + data + " --mode qat --epochs 2 --save " + path("m.ckpt"));
  BOOST_REQUIRE_MESSAGE(r.status == 0, r.err);
  const std::string js = last_line(r.out);
  BOOST_TEST(field(js, "mode") == "\"qat\"");
  BOOST_TEST(std::stod(field(js, "test_acc")) > 0.5, js);
  BOOST_TEST(std::stod(field(js, "agreement")) >= 0.99, js);
  BOOST_TEST(std::stoll(field(js, "int8_checkpoint_bytes")) <=
             0.3 * std::stoll(field(js, "fp32_checkpoint_bytes")));
  BOOST_TEST(fs::file_size(path("m.ckpt")) == std::stoull(field(js, "checkpoint_bytes")));
  BOOST_TEST(fs::exists(path("m.ckpt.int8")));
  const Result q = run(std::string(QAT_MLP_QAT) + data + " --load " + path("m.ckpt") + " --eval-only");
  BOOST_REQUIRE_MESSAGE(q.status == 0, q.err);
  BOOST_TEST(field(last_line(q.out), "test_acc") == field(js, "test_acc"));
  BOOST_TEST(field(last_line(q.out), "kind") == "\"qat\"");
  const Result i8 =
      run(std::string(QAT_MLP_QAT) + data + " --load " + path("m.ckpt.int8") + " --eval-only");
  BOOST_REQUIRE_MESSAGE(i8.status == 0, i8.err);
  BOOST_TEST(field(last_line(i8.out), "test_acc") == field(js, "int8_acc"));
}

BOOST_AUTO_TEST_CASE(resume_is_exact) {
  const std::string base =
      std::string(QAT_CNN_QAT) + data + " --mode qat --arch cnn-bn --train-limit 320";
  // the same run stopped after epoch 1 (its checkpoint), then resumed to epoch 2
  const Result one = run(base + " --epochs 1 --save " + path("one.ckpt"));
  BOOST_REQUIRE_MESSAGE(one.status == 0, one.err);
  const Result a = run(base + " --epochs 2");
  const Result b = run(base + " --epochs 2 --resume " + path("one.ckpt"));
  BOOST_REQUIRE_MESSAGE(a.status == 0, a.err);
  BOOST_REQUIRE_MESSAGE(b.status == 0, b.err);
  for (const char* key : {"final_loss", "test_acc", "int8_acc", "agreement"}) {
    BOOST_TEST(field(last_line(a.out), key).find("missing") == std::string::npos, key);
    BOOST_TEST(field(last_line(a.out), key) == field(last_line(b.out), key), key);
  }
  // and a resumed run differs from one that restarts from scratch after epoch 1
  BOOST_TEST(field(last_line(one.out), "final_loss") != field(last_line(b.out), "final_loss"));
}

BOOST_AUTO_TEST_CASE(bad_checkpoints_exit_2_with_one_line) {
  const Result r = run(std::string(QAT_MLP_QAT) + data +
                       " --mode qat --epochs 1 --train-limit 64 --save " + path("m.ckpt"));
  BOOST_REQUIRE_MESSAGE(r.status == 0, r.err);
  const std::uintmax_t size = fs::file_size(path("m.ckpt"));
  auto corrupt = [&](const std::string& name, const std::function<void(std::string&)>& edit) {
    std::ifstream in(path("m.ckpt"), std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), {});
    edit(bytes);
    std::ofstream(path(name), std::ios::binary) << bytes;
  };
  corrupt("flipped.ckpt", [&](std::string& b) { b[size / 2] ^= 0x5A; });
  corrupt("truncated.ckpt", [&](std::string& b) { b.resize(size - 100); });
  struct Case {
    std::string file, expect;
  } cases[] = {{path("flipped.ckpt"), "payload is corrupt"},
               {path("truncated.ckpt"), "truncated"},
               {path("missing.ckpt"), "cannot open"}};
  for (const Case& c : cases) {
    const Result e = run(std::string(QAT_MLP_QAT) + data + " --load " + c.file + " --eval-only");
    BOOST_TEST(e.status == 2, c.file);
    BOOST_TEST(e.out.empty(), c.file);
    BOOST_TEST(std::count(e.err.begin(), e.err.end(), '\n') == 1, e.err);
    BOOST_TEST(e.err.find(c.file) != std::string::npos, e.err);
    BOOST_TEST(e.err.find(c.expect) != std::string::npos, e.err);
  }
  // a checkpoint of another program
  const Result cnn = run(std::string(QAT_CNN_QAT) + data + " --epochs 0 --save " + path("cnn.ckpt"));
  BOOST_REQUIRE_MESSAGE(cnn.status == 0, cnn.err);
  const Result m = run(std::string(QAT_MLP_QAT) + data + " --load " + path("cnn.ckpt") + " --eval-only");
  BOOST_TEST(m.status == 2);
  BOOST_TEST(m.err.find("holds a 'cnn' model, not 'mlp'") != std::string::npos, m.err);
  // bad command lines
  BOOST_TEST(run(std::string(QAT_MLP_QAT) + " --epochs -1").status == 2);
  BOOST_TEST(run(std::string(QAT_MLP_QAT) + " --mode int3").status == 2);
  const Result nodata = run(std::string(QAT_MLP_QAT) + " --data " + path("nowhere") + " --epochs 1");
  BOOST_TEST(nodata.status == 2);
  BOOST_TEST(nodata.err.find(path("nowhere")) != std::string::npos, nodata.err);
}

// PTQ of an fp32 checkpoint: calibrated and converted, int8 close to fp32; the report in JSON.
BOOST_AUTO_TEST_CASE(ptq_of_an_fp32_checkpoint) {
  const Result f =
      run(std::string(QAT_CNN_QAT) + data + " --arch cnn-bn --epochs 1 --save " + path("f.ckpt"));
  BOOST_REQUIRE_MESSAGE(f.status == 0, f.err);
  const Result p =
      run(std::string(QAT_PTQ_CNN) + data + " --load " + path("f.ckpt") + " --calib-batches 2");
  BOOST_REQUIRE_MESSAGE(p.status == 0, p.err);
  const std::string js = last_line(p.out);
  BOOST_TEST(field(js, "calib_batches") == "2");
  BOOST_TEST(field(js, "arch") == "\"cnn-bn\"");
  const double fp32 = std::stod(field(js, "fp32_acc")), int8 = std::stod(field(js, "int8_acc"));
  BOOST_TEST(fp32 > 0.5, js);
  BOOST_TEST(std::fabs(int8 - fp32) <= 0.05, js);
  for (const char* layer : {"quant", "conv1", "conv2", "fc"})
    BOOST_TEST(js.find(std::string("{\"name\": \"") + layer + "\"") != std::string::npos, js);
  // a QAT checkpoint is not an fp32 one
  const Result q =
      run(std::string(QAT_CNN_QAT) + data + " --mode qat --epochs 0 --save " + path("q.ckpt"));
  BOOST_REQUIRE_MESSAGE(q.status == 0, q.err);
  const Result e = run(std::string(QAT_PTQ_CNN) + data + " --load " + path("q.ckpt"));
  BOOST_TEST(e.status == 2);
  BOOST_TEST(e.err.find("not an fp32 cnn checkpoint") != std::string::npos, e.err);
}

BOOST_AUTO_TEST_SUITE_END()

// Divergence (DivergenceGuard in the training loop): the first non-finite loss, gradient or
// parameter stops training with exit status 2 and one line naming the step; nothing is saved, so an
// earlier checkpoint keeps its bytes.
BOOST_FIXTURE_TEST_SUITE(cli_divergence, Fixture)

BOOST_AUTO_TEST_CASE(divergence_exits_2_keeping_the_last_checkpoint) {
  auto bytes = [](const std::string& p) {
    std::ifstream in(p, std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(in)), {});
  };
  // fp32 at the largest --lr: the loss overflows to nan at step 3
  const Result fp32 = run(std::string(QAT_MLP_QAT) + data + " --train-limit 256 --epochs 1 --lr 1e6");
  BOOST_TEST(fp32.status == 2);
  BOOST_TEST(fp32.out.empty(), fp32.out);
  BOOST_TEST(fp32.err.find("mlp_qat: error: divergence at step 3: the loss is nan") != std::string::npos,
             fp32.err);

  const std::string base = std::string(QAT_MLP_QAT) + data + " --train-limit 128";
  const Result good = run(base + " --epochs 1 --mode qat --save " + path("m.ckpt"));
  BOOST_REQUIRE_MESSAGE(good.status == 0, good.err);
  const std::string ckpt = bytes(path("m.ckpt")), int8 = bytes(path("m.ckpt.int8"));
  BOOST_REQUIRE(!ckpt.empty() && !int8.empty());
  // QAT: resumed from a copy whose weights are huge but finite (a valid file): the first step
  // overflows; the step count goes on after the 2 steps of epoch 1
  io::Checkpoint big = io::load(path("m.ckpt"));
  for (auto& [name, t] : big.tensors)
    if (name == "fc1.weight") t = Tensor::full(t.shape(), 3e38);
  io::save(big, path("big.ckpt"));
  const std::string big_bytes = bytes(path("big.ckpt"));
  const Result resumed =
      run(base + " --epochs 2 --resume " + path("big.ckpt") + " --save " + path("big.ckpt"));
  BOOST_TEST(resumed.status == 2);
  BOOST_TEST(resumed.err.find("mlp_qat: error: divergence at step 3: ") != std::string::npos,
             resumed.err);
  BOOST_TEST(resumed.err.find("'" + path("big.ckpt") + "' is left as it was") != std::string::npos,
             resumed.err);
  BOOST_TEST(bytes(path("big.ckpt")) == big_bytes);
  BOOST_TEST(!fs::exists(path("big.ckpt.int8")));
  BOOST_TEST(bytes(path("m.ckpt")) == ckpt);
  BOOST_TEST(bytes(path("m.ckpt.int8")) == int8);
}

BOOST_AUTO_TEST_SUITE_END()

// Hostile and careless command lines and checkpoints (issue 12): each gets exit status 2 and one
// clear line, before any training.
BOOST_FIXTURE_TEST_SUITE(cli_hostile, Fixture)

BOOST_AUTO_TEST_CASE(option_bounds_are_readable) {
  const std::string mlp = std::string(QAT_MLP_QAT) + data + " --train-limit 64 ";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--threads 100000", "--threads: '100000' is not in 1..1024"},
      {"--threads 0", "--threads: '0' is not in 1..1024"},
      {"--batch 0", "--batch: '0' is not in 1..1000000"},
      {"--lr nan", "--lr: 'nan' is not a finite number"},
      {"--lr 1e308", "--lr: '1e308' is not in (0, 1e+06]"},
      {"--lr 0", "--lr: '0' is not in (0, 1e+06]"},
      {"--epochs -1", "--epochs: '-1' is not in 0..1000000"},
      {"--momentum 2", "--momentum: '2' is not in [0, 1]"},
      {"--weight-decay inf", "--weight-decay: 'inf' is not a finite number"},
      {"--batch 1.5", "--batch: '1.5' is not a whole number"},
      // checked before any device, data or process group is touched
      {"--device cuda --distill t.ckpt", "--device cuda: --distill runs the teacher on the CPU only"},
  };
  for (const auto& [args, want] : cases) {
    const Result r = run(mlp + args);
    BOOST_TEST(r.status == 2, args);
    BOOST_TEST(r.err.find(want) != std::string::npos, args << ": " << r.err);
    BOOST_TEST(r.err.size() < 200u, args << ": " << r.err);  // no 309-digit DBL_MAX
  }
}

// --device cuda --distributed: NCCL in the build and a GPU, checked before the group is joined
BOOST_AUTO_TEST_CASE(cuda_distributed_needs_nccl_and_a_device) {
  const std::string mlp = std::string(QAT_MLP_QAT) + data + " --train-limit 64 ";
  std::string want;
  if (!distributed::has_nccl())
    want = "--device cuda: --distributed needs NCCL, and this build has none";
  else if (!cuda::is_available())
    want = "--device cuda: no usable CUDA device: ";
  else {
    std::cout << "skipped: a CUDA device is there, so --device cuda --distributed trains "
                 "(test_nccl runs it)\n";
    return;
  }
  const Result r = run(mlp + "--device cuda --distributed");
  BOOST_TEST(r.status == 2);
  BOOST_TEST(r.err.find(want) != std::string::npos, r.err);
  BOOST_TEST(std::count(r.err.begin(), r.err.end(), '\n') <= 1, r.err);  // one line
}

BOOST_AUTO_TEST_CASE(bad_paths_and_checkpoints_fail_before_training) {
  const std::string mlp = std::string(QAT_MLP_QAT) + data + " --train-limit 128 ";
  const Result nodir = run(mlp + "--epochs 1 --save " + path("no/such/dir/m.ckpt"));
  BOOST_TEST(nodir.status == 2);
  BOOST_TEST(nodir.err.find("cannot save: directory '" + path("no/such/dir") + "' does not exist") !=
                 std::string::npos,
             nodir.err);
  BOOST_TEST(nodir.err.find("epoch") == std::string::npos, nodir.err);  // no training happened

  BOOST_REQUIRE(run(mlp + "--epochs 1 --mode qat --save " + path("q.ckpt")).status == 0);
  const Result int8 = run(mlp + "--load " + path("q.ckpt.int8"));
  BOOST_TEST(int8.status == 2);
  BOOST_TEST(int8.err.find("is an int8 inference checkpoint; add --eval-only") != std::string::npos,
             int8.err);

  // crafted copies of q.ckpt: each passes the CRC, each is refused naming the file and the value
  auto crafted = [&](const std::string& name, const std::function<void(io::Checkpoint&)>& edit) {
    io::Checkpoint c = io::load(path("q.ckpt"));
    edit(c);
    io::save(c, path(name));
    return path(name);
  };
  const std::string nokind = crafted("nokind.ckpt", [](io::Checkpoint& c) { c.metadata.erase("kind"); });
  const Result r1 = run(mlp + "--eval-only --load " + nokind);
  BOOST_TEST(r1.status == 2);
  BOOST_TEST(
      r1.err.find("checkpoint '" + nokind + "': has no 'kind' metadata entry") != std::string::npos,
      r1.err);

  const std::string esc =
      crafted("esc.ckpt", [](io::Checkpoint& c) { c.metadata["arch"] = "mlp\x1b]0;owned\x07\r"; });
  const Result r2 = run(mlp + "--eval-only --load " + esc);
  BOOST_TEST(r2.status == 2);
  BOOST_TEST(r2.err.find("unknown architecture 'mlp\\x1b]0;owned\\x07\\r'") != std::string::npos,
             r2.err);
  BOOST_TEST(r2.err.find('\x1b') == std::string::npos);

  const std::string far = crafted("far.ckpt", [](io::Checkpoint& c) { c.training->epoch = 1LL << 40; });
  const Result r3 = run(mlp + "--epochs 3 --resume " + far);
  BOOST_TEST(r3.status == 2);
  BOOST_TEST(r3.err.find("checkpoint '" + far +
                         "': training epoch 1099511627776 is not in [0, 1000000]") != std::string::npos,
             r3.err);

  const std::string back =
      crafted("back.ckpt", [](io::Checkpoint& c) { c.training->global_step = INT64_MIN; });
  const Result r4 = run(mlp + "--epochs 3 --resume " + back);
  BOOST_TEST(r4.status == 2);
  BOOST_TEST(r4.err.find("training global_step -9223372036854775808 is negative") != std::string::npos,
             r4.err);

  const std::string hot =
      crafted("hot.ckpt", [](io::Checkpoint& c) { c.optimizer->hyperparameters["lr"] = 1e300; });
  const Result r5 = run(mlp + "--epochs 3 --resume " + hot);
  BOOST_TEST(r5.status == 2);
  BOOST_TEST(r5.err.find("saved lr 1e+300 is not in [0, 1e+06]") != std::string::npos, r5.err);

  const std::string seedless =
      crafted("seedless.ckpt", [](io::Checkpoint& c) { c.training->counters.erase("loader_seed"); });
  const Result r6 = run(mlp + "--epochs 3 --resume " + seedless);
  BOOST_TEST(r6.status == 2);
  BOOST_TEST(r6.err.find("has no 'loader_seed' training counter") != std::string::npos, r6.err);

  const std::string nan_scale = crafted("nan_scale.ckpt", [](io::Checkpoint& c) {
    for (auto& [name, t] : c.tensors)
      if (name == "fc1.activation_post_process.scale") t = Tensor::full(t.shape(), std::nan(""));
  });
  const Result r7 = run(mlp + "--eval-only --load " + nan_scale);
  BOOST_TEST(r7.status == 2);
  BOOST_TEST(r7.err.find("fc1.activation_post_process.scale[0] = nan: not a scale") != std::string::npos,
             r7.err);
}

BOOST_AUTO_TEST_SUITE_END()

// Distillation (--distill) and mixed precision (--budget-bits) from an fp32 checkpoint.
BOOST_FIXTURE_TEST_SUITE(cli_distill_mixed, Fixture)

BOOST_AUTO_TEST_CASE(distill_and_budget_bits_end_to_end) {
  const std::string cnn = std::string(QAT_CNN_QAT) + data + " ";
  const Result f = run(cnn + "--epochs 1 --save " + path("f.ckpt"));
  BOOST_REQUIRE_MESSAGE(f.status == 0, f.err);
  const Result d = run(cnn + "--mode qat --qconfig int4_lsq --epochs 1 --distill " + path("f.ckpt") +
                       " --kd-weight 0.7 --kd-temperature 3 --kd-features pool1,pool2 "
                       "--kd-feature-weight 0.5 --json");
  BOOST_REQUIRE_MESSAGE(d.status == 0, d.err);
  BOOST_TEST(d.out.find("\"distill\": {\"weight\": 0.7, \"temperature\": 3, \"teacher_acc\": ") !=
                 std::string::npos,
             d.out);
  BOOST_TEST(d.out.find("\"features\": \"pool1,pool2\", \"feature_weight\": 0.5}") != std::string::npos,
             d.out);
  // int8_dyn_act_int4_weight on the classifier converts (DynamicQuantizedLinear)
  const Result dyn = run(cnn + "--mode qat --rule fc=int8_dyn_act_int4_weight --epochs 1 --json");
  BOOST_REQUIRE_MESSAGE(dyn.status == 0, dyn.err);
  const std::string dj = last_line(dyn.out);
  BOOST_TEST(std::stod(field(dj, "agreement")) > 0.99, dj);
  BOOST_TEST(std::stod(field(dj, "max_logit_diff")) < 0.1, dj);
  // --load FP32 --budget-bits: sensitivity -> rules -> QAT from the float weights -> convert.
  const Result m = run(cnn + "--load " + path("f.ckpt") +
                       " --budget-bits 6 --epochs 1 --mp-calib-batches 2 "
                       "--mp-held-out 200 --mp-candidates int8_default,int4_lsq --json");
  BOOST_REQUIRE_MESSAGE(m.status == 0, m.err);
  const std::string js = last_line(m.out);
  BOOST_TEST(field(js, "mode") == "\"qat\"", js);
  BOOST_TEST(
      js.find("\"plan\": {\"budget_bits_per_weight\": 6, \"bits_per_weight\": ") != std::string::npos,
      js);
  BOOST_TEST(m.err.find("rules: --rule conv1=") != std::string::npos, m.err);
  BOOST_TEST(std::stod(field(js, "int8_acc")) > 0.3, js);
}

BOOST_AUTO_TEST_CASE(bad_distill_and_budget_flags_exit_2) {
  const std::string cnn = std::string(QAT_CNN_QAT) + data + " ";
  BOOST_REQUIRE(run(cnn + "--mode qat --epochs 0 --save " + path("q.ckpt")).status == 0);
  const Result q = run(cnn + "--mode qat --epochs 1 --distill " + path("q.ckpt"));
  BOOST_TEST(q.status == 2);
  BOOST_TEST(q.err.find("--distill: the teacher must be an fp32 checkpoint") != std::string::npos,
             q.err);
  const Result none = run(cnn + "--epochs 1 --distill " + path("nothing.ckpt"));
  BOOST_TEST(none.status == 2);
  BOOST_TEST(none.err.find("nothing.ckpt") != std::string::npos, none.err);
  BOOST_TEST(run(cnn + "--epochs 1 --kd-weight 0.5").status == 2);  // needs --distill
  BOOST_TEST(run(cnn + "--epochs 1 --distill " + path("q.ckpt") + " --kd-weight 1.5").status == 2);
  BOOST_TEST(run(cnn + "--epochs 1 --distill " + path("q.ckpt") + " --kd-temperature 0").status == 2);
  const Result nb = run(cnn + "--epochs 1 --budget-bits 5");
  BOOST_TEST(nb.status == 2);
  BOOST_TEST(nb.err.find("--budget-bits: needs --load FP32_CHECKPOINT") != std::string::npos, nb.err);
  BOOST_REQUIRE(run(cnn + "--epochs 0 --save " + path("f.ckpt")).status == 0);
  const Result low = run(cnn + "--load " + path("f.ckpt") +
                         " --budget-bits 2 --epochs 0 --mp-calib-batches 1 "
                         "--mp-held-out 64");
  BOOST_TEST(low.status == 2);
  BOOST_TEST(
      low.err.find("--budget-bits: quant::mixed_precision: budget_bits_per_weight = 2 is below the "
                   "smallest size") != std::string::npos,
      low.err);
  BOOST_TEST(run(cnn + "--load " + path("f.ckpt") + " --budget-bits 5 --mp-candidates int3").status ==
             2);
  const Result nf =
      run(cnn + "--mode qat --epochs 1 --distill " + path("f.ckpt") + " --kd-features pool1,nope");
  BOOST_TEST(nf.status == 2);
  BOOST_TEST(
      nf.err.find(
          "--kd-features: the student has no module 'nope' (its top-level modules: quant, conv1") !=
          std::string::npos,
      nf.err);
}

BOOST_AUTO_TEST_SUITE_END()
