// Writes the seed corpora: valid checkpoints (file images) and their bare payloads (the fuzzers
// wrap those in a valid header), in binary and XML.
//   fuzz_make_corpus <directory>                  fuzz_checkpoint: the fuzz model, odd dtypes
//   fuzz_make_corpus --load-forward <directory>   fuzz_load_forward: trained QAT, LSQ, int8 models
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>

#include "framework/io/io.h"
#include "framework/optim/sgd.h"
#include "fuzz_model.h"
#include "io/hostile_cases.h"

using namespace qat;

namespace {

void write(const std::filesystem::path& dir, const std::string& name, const std::string& bytes) {
  std::ofstream f(dir / name, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!f) throw std::runtime_error("cannot write " + (dir / name).string());
}

void write_both(const std::filesystem::path& dir, const std::string& stem, const io::Checkpoint& c) {
  for (io::ArchiveKind kind : {io::ArchiveKind::Binary, io::ArchiveKind::Xml}) {
    const std::string bytes = io::to_bytes(c, {.archive = kind});
    const std::string suffix(io::archive_kind_name(kind));
    write(dir, stem + "_" + suffix + ".qat", bytes);
    write(dir, stem + "_" + suffix + ".payload", bytes.substr(io::FileHeader::kSize));
  }
}

}  // namespace

int main(int argc, char** argv) {
  const bool load_forward = argc == 3 && std::string(argv[1]) == "--load-forward";
  if (argc != 2 && !load_forward) {
    std::cerr << "usage: fuzz_make_corpus [--load-forward] <directory>\n";
    return 2;
  }
  const std::filesystem::path dir = argv[argc - 1];
  std::filesystem::create_directories(dir);
  if (load_forward) {
    using test::hostile::Kind;
    write_both(dir, "qat", test::hostile::trained(Kind::Qat));
    write_both(dir, "lsq", test::hostile::trained(Kind::Lsq));
    write_both(dir, "int8", test::hostile::trained(Kind::Int8));
    std::cout << "fuzz_make_corpus: wrote 12 seeds to " << dir.string() << "\n";
    return 0;
  }
  manual_seed(0);  // the same seeds every time

  const auto model = fuzz::make_model();
  optim::SGD opt(model->named_parameters(), {.lr = 0.1, .momentum = 0.9});
  for (auto& [name, p] : model->named_parameters()) p.set_grad(Tensor::ones(p.shape(), p.dtype()));
  opt.step();  // creates the momentum buffers

  io::Checkpoint full = io::capture(*model);
  full.metadata = {{"0.qspec", "bits=8 symmetric per_channel axis=0"}, {"note", "seed"}};
  full.optimizer = io::capture(opt);
  full.training = io::TrainingState{2, 40, {{"default", Generator(1).state()}}, {{"seen", 80}}};
  write_both(dir, "model_full", full);
  write_both(dir, "model_only", io::capture(*model));
  write_both(dir, "empty", io::Checkpoint{});

  io::Checkpoint dtypes;
  dtypes.tensors = {{"f64", Tensor::full(Shape{2}, -0.5, DType::Float64)},
                    {"i8", Tensor::full(Shape{3}, -7, DType::Int8)},
                    {"u8", Tensor::full(Shape{1, 2}, 200, DType::UInt8)},
                    {"i16", Tensor::full(Shape{2}, 300, DType::Int16)},
                    {"i32", Tensor::full(Shape{2}, -70000, DType::Int32)},
                    {"i64", Tensor::scalar(1e12, DType::Int64)},
                    {"none", Tensor::zeros(Shape{0, 4})}};
  write_both(dir, "dtypes", dtypes);
  std::cout << "fuzz_make_corpus: wrote 16 seeds to " << dir.string() << "\n";
  return 0;
}
