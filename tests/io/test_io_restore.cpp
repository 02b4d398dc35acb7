// framework/io: putting checkpoints back into models, optimizers and generators; atomic saves.
#include <boost/test/unit_test.hpp>

#include "framework/optim/sgd.h"
#include "io/io_test_util.h"

using namespace qat;
using namespace qat::test;
using io::ArchiveKind;

namespace {

/// Trains `net` for `steps` SGD steps on a fixed batch drawn from `gen`.
void train(SmallNet& net, optim::Optimizer& opt, Generator& gen, int steps) {
  for (int i = 0; i < steps; ++i) {
    const Tensor x = Tensor::normal(Shape{2, 1, 4, 4}, 0, 1, gen);
    const Tensor y = Tensor::normal(Shape{2, 3}, 0, 1, gen);
    opt.zero_grad();
    mse_loss(net(x), y).backward();
    opt.step();
  }
}

optim::SGD::Options sgd_options() { return {.lr = 0.05, .momentum = 0.9, .weight_decay = 1e-4}; }

}  // namespace

BOOST_AUTO_TEST_SUITE(restore)

BOOST_AUTO_TEST_CASE(model_with_conv_bn_linear_and_buffers) {
  TempDir dir;
  manual_seed(1);
  SmallNet src;
  Generator gen(3);
  optim::SGD opt(src.named_parameters(), sgd_options());
  train(src, opt, gen, 2);  // moves the BatchNorm running stats and num_batches_tracked
  const NamedTensors names = src.named_state();
  BOOST_TEST(names.size() == 9u);  // conv w/b, bn w/b, fc w/b, bn running_mean/var/num_batches_tracked
  for (ArchiveKind kind : {ArchiveKind::Binary, ArchiveKind::Xml}) {
    const std::string path = dir.file("net");
    io::save(io::capture(src), path, {.archive = kind});
    manual_seed(99);
    SmallNet dst;
    const Tensor weight_handle = dst.fc->weight();
    const io::LoadReport r = io::load_into(dst, path);
    BOOST_TEST(r.complete());
    BOOST_TEST(r.loaded.size() == 9u);
    BOOST_TEST(bit_equal(state_copy(dst), state_copy(src)));
    BOOST_TEST(weight_handle.is_same(dst.fc->weight()));  // copied in place
    src.eval();
    dst.eval();
    const Tensor x = Tensor::normal(Shape{1, 1, 4, 4}, 0, 1, gen);
    BOOST_TEST(bit_equal(src(x), dst(x)));
    src.train();
  }
}

BOOST_AUTO_TEST_CASE(strict_mismatch_lists_every_problem_and_changes_nothing) {
  SmallNet src(3, 64);
  io::Checkpoint c = io::capture(src);
  c.tensors.erase(c.tensors.begin() + 1);                             // conv.bias missing
  c.tensors.emplace_back("head.weight", Tensor::zeros(Shape{2, 2}));  // unexpected
  for (auto& [n, t] : c.tensors)
    if (n == "bn.num_batches_tracked") t = Tensor::zeros(Shape{}, DType::Int32);  // dtype
  c.info.source = "runs/epoch3.qat";
  SmallNet dst(10, 64);  // fc: [10, 64] vs [3, 64]
  const NamedTensors before = state_copy(dst);
  BOOST_TEST(error_of<io::CheckpointError>([&] { io::load_into(dst, c); }) ==
             "checkpoint 'runs/epoch3.qat': does not match the model (5 problems; nothing was loaded):\n"
             "  missing from checkpoint: conv.bias\n"
             "  fc.weight: checkpoint [3, 64] vs model [10, 64]\n"
             "  fc.bias: checkpoint [3] vs model [10]\n"
             "  bn.num_batches_tracked: checkpoint int32 vs model int64\n"
             "  unexpected in checkpoint: head.weight\n");
  BOOST_TEST(bit_equal(state_copy(dst), before));

  // strict = false loads the intersection and reports the rest.
  const io::LoadReport r = io::load_into(dst, c, {.strict = false});
  BOOST_TEST(r.loaded == (std::vector<std::string>{"conv.weight", "bn.weight", "bn.bias",
                                                   "bn.running_mean", "bn.running_var"}));
  BOOST_TEST(r.missing == std::vector<std::string>{"conv.bias"});
  BOOST_TEST(r.unexpected == std::vector<std::string>{"head.weight"});
  BOOST_TEST(r.mismatched.size() == 3u);
  BOOST_TEST(r.mismatched[0].name == "fc.weight");
  BOOST_TEST(r.mismatched[0].reason == "checkpoint [3, 64] vs model [10, 64]");
  BOOST_TEST(bit_equal(dst.conv->weight(), src.conv->weight()));
  BOOST_TEST(bit_equal(dst.conv->bias(), before[1].second));
  BOOST_TEST(bit_equal(dst.fc->weight(), before[4].second));
}

BOOST_AUTO_TEST_CASE(bad_file_leaves_model_unchanged) {
  TempDir dir;
  SmallNet net;
  const std::string path = dir.file("x.qat");
  io::save(io::capture(SmallNet()), path);
  std::string bytes = read_file(path);
  bytes.back() ^= 1;
  write_file(path, bytes);
  const NamedTensors before = state_copy(net);
  BOOST_CHECK_THROW(io::load_into(net, path), io::CheckpointError);
  BOOST_TEST(bit_equal(state_copy(net), before));
}

BOOST_AUTO_TEST_CASE(exact_resume_with_sgd_momentum_and_generators) {
  TempDir dir;
  const std::string path = dir.file("resume.qat");
  manual_seed(11);
  SmallNet a;
  optim::SGD opt_a(a.named_parameters(), sgd_options());
  Generator data(5);
  train(a, opt_a, data, 3);
  opt_a.set_lr(0.02);  // as a schedule would
  {
    io::Checkpoint c = io::capture(a);
    c.optimizer = io::capture(opt_a);
    c.training = io::TrainingState{
        1, 3, {{"data", data.state()}, {"default", default_generator().state()}}, {{"seen", 6}}};
    io::save(c, path);
  }
  train(a, opt_a, data, 2);  // the uninterrupted run

  manual_seed(12);
  SmallNet b;
  optim::SGD opt_b(b.named_parameters(), sgd_options());
  Generator data_b(0);
  const io::Checkpoint c = io::load(path);
  io::load_into(b, c);
  io::restore_optimizer(opt_b, c);
  io::restore_generators(c, {{"data", &data_b}});
  BOOST_TEST(opt_b.lr() == 0.02);
  BOOST_TEST(c.training->counters.at("seen") == 6);
  train(b, opt_b, data_b, 2);
  BOOST_TEST(bit_equal(state_copy(a), state_copy(b)));
  BOOST_TEST(bit_equal(opt_a.state(), opt_b.state()));
}

BOOST_AUTO_TEST_CASE(optimizer_and_generator_errors) {
  SmallNet net;
  optim::SGD opt(net.named_parameters(), sgd_options());
  io::Checkpoint c = io::capture(net);
  c.info.source = "f.qat";
  BOOST_TEST(error_of([&] { io::restore_optimizer(opt, c); }) ==
             "checkpoint 'f.qat': holds no optimizer state");
  c.optimizer = io::OptimizerState{"adam", {}, {}};
  BOOST_TEST(error_of([&] { io::restore_optimizer(opt, c); }) ==
             "checkpoint 'f.qat': holds state of a 'adam' optimizer, not 'sgd'");
  c.optimizer = io::capture(opt);
  c.optimizer->hyperparameters["momentum"] = 0.5;
  c.optimizer->hyperparameters["beta1"] = 0.9;
  c.optimizer->hyperparameters.erase("nesterov");
  BOOST_TEST(error_of([&] { io::restore_optimizer(opt, c); }) ==
             "checkpoint 'f.qat': optimizer does not match (3 problems; nothing was restored):\n"
             "  hyperparameter momentum: checkpoint 0.5 vs optimizer 0.9\n"
             "  hyperparameter nesterov is missing from the checkpoint\n"
             "  hyperparameter beta1 is unknown to sgd\n");
  c.optimizer = io::capture(opt);
  c.optimizer->state = {{"fc.weight.momentum_buffer", Tensor::zeros(Shape{2})}};
  BOOST_TEST(error_of([&] { io::restore_optimizer(opt, c); })
                 .find("checkpoint 'f.qat': optimizer state does not fit: Optimizer::load_state: entry "
                       "'fc.weight.momentum_buffer' is float32[2], expected float32") == 0u);

  Generator g(1);
  BOOST_TEST(error_of([&] {
               io::restore_generators(c, {{"default", &g}});
             }) == "checkpoint 'f.qat': holds no training state");
  c.training = io::TrainingState{};
  c.training->generators["default"] = Generator(2).state();
  const auto before = g.state().s;
  BOOST_TEST(error_of([&] {
               io::restore_generators(c, {{"default", &g}, {"loader", &g}});
             }) == "checkpoint 'f.qat': holds no state for generator(s) loader");
  BOOST_TEST((g.state().s == before));
  c.training->generators["loader"] = Generator::State{};
  BOOST_TEST(
      error_of([&] {
        io::restore_generators(c, {{"loader", &g}});
      }) ==
      "checkpoint 'f.qat': generator 'loader' has an all-zero state, which xoshiro256** never reaches");
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(atomic_save)

BOOST_AUTO_TEST_CASE(interrupted_save_keeps_the_old_checkpoint) {
  TempDir dir;
  const std::string path = dir.file("model.qat");
  SmallNet old_net;
  io::save(io::capture(old_net), path);
  const std::string old_bytes = read_file(path);

  SmallNet new_net(3);
  const std::string new_bytes = io::to_bytes(io::capture(new_net));
  // A crash half-way: the temporary file stays behind, as after a real crash.
  io::detail::WriteFault crash{new_bytes.size() / 2, true};
  BOOST_CHECK_THROW(io::detail::write_file_atomic(path, new_bytes, &crash), io::detail::SimulatedCrash);
  BOOST_TEST(read_file(path) == old_bytes);
  const auto entries = dir.entries();
  BOOST_TEST(entries.size() == 2u);
  BOOST_TEST(entries[0].rfind(".model.qat.tmp-", 0) == 0u);
  BOOST_CHECK_THROW(io::load(dir.file(entries[0])), io::CheckpointError);  // the partial file
}

BOOST_AUTO_TEST_CASE(errors_remove_the_temporary_file) {
  TempDir dir;
  const std::string path = dir.file("model.qat");
  io::save(io::capture(SmallNet()), path);
  const std::string old_bytes = read_file(path);
  io::detail::WriteFault fail{100, false};
  BOOST_CHECK_THROW(io::detail::write_file_atomic(path, "new contents", &fail),
                    io::detail::SimulatedCrash);
  BOOST_TEST(dir.entries() == std::vector<std::string>{"model.qat"});
  BOOST_TEST(read_file(path) == old_bytes);
  BOOST_TEST(io::load(path).tensors.size() == 9u);

  // rename over a directory fails: a CheckpointError, and nothing left behind.
  std::filesystem::create_directory(dir.file("sub"));
  const std::string msg =
      error_of<io::CheckpointError>([&] { io::save(io::Checkpoint{}, dir.file("sub")); });
  BOOST_TEST(msg.find("checkpoint '" + dir.file("sub") + "': cannot save: rename of '") == 0u, msg);
  BOOST_TEST(dir.entries() == (std::vector<std::string>{"model.qat", "sub"}));
  const std::string nodir = dir.file("missing/x.qat");
  BOOST_TEST(error_of([&] { io::save(io::Checkpoint{}, nodir); }) ==
             "checkpoint '" + nodir + "': cannot save: cannot create a temporary file in '" +
                 dir.file("missing") + "': No such file or directory");
}

BOOST_AUTO_TEST_SUITE_END()
