// libFuzzer target for the whole path a user's checkpoint takes: decode -> load_into (strict and
// not) -> forward. The models are those of the crafted-checkpoint tests (tests/io/hostile_cases.h):
// a tiny QAT CNN with int8_default, the same with LSQ, and its int8 conversion. Each input is
// tried as a file image and as a payload wrapped in a valid header (binary and XML). A load may
// only fail with io::CheckpointError; once a load succeeded, the forward passes (eval; QAT
// models also a training step with backward) must not throw at all, since every value was
// checked on load. One documented exception: load checks each module's values, not how int8
// layers chain, so an int8 file whose layer expects another input quantization than its
// predecessor produces loads, and the layer's forward refuses the input ("input is quantized
// with ... but the layer was converted for ..."); and finite but huge values may overflow in a
// training step, which the observers / quantizers refuse as non-finite (divergence detection). Crashes
// and sanitizer reports (ASan, UBSan incl. float-cast-overflow) are findings. Each model is reset to its
// pristine state before each input, so runs repeat.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <string>
#include <string_view>

#include "framework/autograd/grad_mode.h"
#include "framework/autograd/ops.h"
#include "framework/io/archive.h"
#include "framework/tensor/storage.h"
#include "io/hostile_cases.h"

namespace {

using namespace qat;
using namespace qat::test::hostile;

struct Subject {
  Kind kind;
  nn::ModulePtr model;
  io::Checkpoint pristine;
};

std::vector<Subject>& subjects() {
  static std::vector<Subject> s = [] {
    std::vector<Subject> out;
    for (Kind k : {Kind::Qat, Kind::Lsq, Kind::Int8}) {
      nn::ModulePtr m = model(k);
      io::Checkpoint c = trained(k);
      io::load_into(*m, c);
      out.push_back({k, m, std::move(c)});
    }
    return out;
  }();
  return s;
}

std::string wrap(std::string_view payload, io::ArchiveKind kind) {
  io::FileHeader h;
  h.archive = kind;
  h.archive_version = io::detail::archive_version();
  h.payload_bytes = payload.size();
  h.payload_crc32 = io::crc32(payload.data(), payload.size());
  const auto header = io::encode_header(h);
  return std::string(header.data(), header.size()) + std::string(payload);
}

[[noreturn]] void finding(const char* what, const std::exception& e) {
  std::cerr << "fuzz_load_forward: " << what << " threw after a successful load: " << e.what() << "\n";
  std::abort();
}

void run(Subject& s) {
  const Tensor x = Tensor::full(Shape{2, 1, 4, 4}, 0.5);
  try {
    NoGradGuard ng;
    s.model->eval();
    (void)(*s.model)(x);
  } catch (const Error& e) {
    if (s.kind != Kind::Int8 ||
        std::string_view(e.what()).find("but the layer was converted for") == std::string_view::npos)
      finding("eval forward", e);
  } catch (const std::exception& e) {
    finding("eval forward", e);
  }
  if (s.kind == Kind::Int8) return;
  try {
    s.model->train();
    const Tensor y = Tensor::from_vector<std::int64_t>({0, 2}, Shape{2});
    Tensor loss = cross_entropy((*s.model)(x), y);
    loss.backward();
    s.model->zero_grad();
  } catch (const Error& e) {
    // Finite but huge values (a weight of 1e30 is a valid value) can overflow to inf in a
    // training forward; the observers and quantizers then refuse it, naming themselves: the
    // divergence detection working, not a finding.
    const std::string_view w = e.what();
    if (w.find("NaN or Inf") == w.npos && w.find("not finite") == w.npos &&
        w.find("too wide for float32") == w.npos)
      finding("training step", e);
  } catch (const std::exception& e) {
    finding("training step", e);
  }
}

void check(std::string_view image) {
  io::Checkpoint ckpt;
  try {
    ckpt = io::from_bytes(image, "<fuzz>");
  } catch (const io::CheckpointError&) {
    return;
  }
  for (Subject& s : subjects()) {
    for (bool strict : {true, false}) {
      io::load_into(*s.model, s.pristine);
      bool loaded = true;
      try {
        io::load_into(*s.model, ckpt, {.strict = strict});
      } catch (const io::CheckpointError&) {
        loaded = false;
      }
      if (loaded) run(s);
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  check(input);
  check(wrap(input, io::ArchiveKind::Binary));
  check(wrap(input, io::ArchiveKind::Xml));
  CachingAllocator::cpu().empty_cache();
  return 0;
}
