// Writes the crafted checkpoints of hostile_cases.h into a directory (tests/io/hostile/ in the
// tree, where the bytes are committed as test data):
//   make_hostile_checkpoints <directory>
// Each starts from trained(kind) and changes one value; io::save writes a valid header and CRC
// around it.
#include <filesystem>
#include <iostream>

#include "io/hostile_cases.h"

using namespace qat;
using namespace qat::test::hostile;

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: make_hostile_checkpoints <directory> | --list\n";
    return 2;
  }
  if (std::string(argv[1]) == "--list") {  // the tensors a case can change, per model kind
    for (Kind kind : {Kind::Qat, Kind::Lsq, Kind::Int8}) {
      std::cout << (kind == Kind::Qat ? "qat" : kind == Kind::Lsq ? "lsq" : "int8") << ":\n";
      for (const auto& [name, t] : trained(kind).tensors)
        std::cout << "  " << name << " " << dtype_name(t.dtype()) << t.shape() << "\n";
    }
    return 0;
  }
  const std::filesystem::path dir = argv[1];
  std::filesystem::create_directories(dir);
  int n = 0;
  for (const Case& c : cases()) {
    io::Checkpoint ckpt = trained(c.kind);
    c.mutate(ckpt);
    io::save(ckpt, (dir / c.file).string());
    ++n;
  }
  std::cout << "make_hostile_checkpoints: wrote " << n << " files to " << dir.string() << "\n";
  return 0;
}
