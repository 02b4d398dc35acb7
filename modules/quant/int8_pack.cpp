// Packing of int8 weights for the GEMM micro-kernels (kernels/cpu/int8_gemm.h): the layouts of
// each path's format, Winograd's form on AVX2, the narrow step schedules.
#include <algorithm>
#include <cstring>
#include <vector>

#include "framework/tensor/error.h"
#include "modules/quant/int8_kernels.h"
#include "modules/quant/kernels/cpu/int8_gemm.h"

namespace qat::quant::int8 {

bool PackedWeights::usable() const {
  if (format == static_cast<int>(kernels::PackFormat::Winograd))
    return kernels::winograd() && pieces == 1;
  return format == static_cast<int>(kernels::pack_format(narrow)) &&
         (!narrow || group == kernels::sched_group());
}

// quads: data[(b S + s) 64 + c 4 + j] = w[16 b + c][4 s + j]; pairs: the same with 2 int16 per
// channel, k = 2 s + j; zero beyond O and K. With pieces, k = p L + l sits at step
// p piece_steps + l / kps.
PackedWeights pack_weights_pieces(const std::int8_t* w, std::int64_t O, std::int64_t pieces,
                                  std::int64_t L, bool narrow) {
  QAT_REQUIRE(O > 0 && pieces > 0 && L > 0, "int8::pack_weights", "needs O, K > 0, got O ", O,
              ", pieces ", pieces, ", K / pieces ", L);
  using namespace kernels;
  PackedWeights p;
  const PackFormat f = pack_format(narrow);
  const std::int64_t kps = k_per_step(f), blocks = (O + kBlock - 1) / kBlock, K = pieces * L;
  p.O = O;
  p.K = K;
  p.format = static_cast<int>(f);
  p.narrow = narrow && narrow_is_faster();  // only where it changes the kernel
  p.pieces = pieces;
  p.piece_steps = (L + kps - 1) / kps;
  p.steps = pieces * p.piece_steps;
  p.data.assign(blocks * p.steps * kStepBytes, 0);
  p.sums.assign(O, 0);
  for (std::int64_t o = 0; o < O; ++o) {
    const std::int64_t b = o / kBlock, c = o % kBlock;
    for (std::int64_t k = 0; k < K; ++k) {
      const std::int8_t v = w[o * K + k];
      const std::int64_t pc = k / L, l = k % L;
      p.sums[o] += v;
      std::uint8_t* step = p.data.data() + (b * p.steps + pc * p.piece_steps + l / kps) * kStepBytes;
      if (f == PackFormat::Quads) {
        step[c * 4 + l % 4] = static_cast<std::uint8_t>(v);
      } else {
        const auto v16 = static_cast<std::uint16_t>(static_cast<std::int16_t>(v));
        std::memcpy(step + c * 4 + (l % 2) * 2, &v16, 2);
      }
    }
  }
  if (p.narrow) {  // the step order of the vpmaddubsw tile, per group of the blocks it takes at once
    p.group = sched_group();
    const std::int64_t groups = (blocks + p.group - 1) / p.group;
    p.sched.resize(groups * p.steps);
    for (std::int64_t g = 0; g < groups; ++g)
      p.sched_pairs.push_back(static_cast<std::int32_t>(
          pair_schedule(p.data.data(), p.steps, g * p.group, std::min(p.group, blocks - g * p.group),
                        p.sched.data() + g * p.steps)));
  }
  return p;
}

PackedWeights pack_weights(const std::int8_t* w, std::int64_t O, std::int64_t K, bool narrow) {
  if (narrow || !kernels::winograd()) return pack_weights_pieces(w, O, 1, K, narrow);
  // Winograd: the pairs packing of whole groups of 4 k, zero weights past K (their terms
  // (a + 0)(a' + 0) cancel against rho, which the kernel sums over the same zero-padded rows)
  QAT_REQUIRE(O > 0 && K > 0, "int8::pack_weights", "needs O, K > 0, got O ", O, ", K ", K);
  const std::int64_t K4 = (K + 3) / 4 * 4;
  std::vector<std::int8_t> padded;
  const std::int8_t* src = w;
  if (K4 != K) {
    padded.assign(O * K4, 0);
    for (std::int64_t o = 0; o < O; ++o) std::copy_n(w + o * K, K, padded.data() + o * K4);
    src = padded.data();
  }
  PackedWeights p = pack_weights_pieces(src, O, 1, K4, false);
  p.K = K;
  p.format = static_cast<int>(kernels::PackFormat::Winograd);
  p.gamma.assign(O, 0);
  for (std::int64_t o = 0; o < O; ++o) {
    std::uint32_t g = 0;  // wraps as the kernel's int32 sums do
    for (std::int64_t k = 0; k < K4; k += 4)
      for (std::int64_t h = 0; h < 2; ++h)
        g += static_cast<std::uint32_t>(src[o * K4 + k + h] * src[o * K4 + k + h + 2]);
    p.gamma[o] = static_cast<std::int32_t>(g);
  }
  return p;
}

int activation_bytes(bool narrow) {
  return kernels::pack_format(narrow) == kernels::PackFormat::Quads ? 1 : 2;
}

}  // namespace qat::quant::int8
