// The int8 row Winograd (int8_kernels.h, kernels/cpu/int8_winograd.h): weights transformed and
// packed once, then per image the input transform, one int16-pairs GEMM per point (the implicit
// GEMM of int8_gemm.h with raw int32 sums) and the output transform with the output stage.
#include "modules/quant/kernels/cpu/int8_winograd.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include "framework/tensor/cpu.h"
#include "framework/tensor/error.h"
#include "framework/tensor/parallel.h"
#include "modules/quant/int8_kernels.h"
#include "modules/quant/kernels/cpu/int8_gemm.h"

namespace qat::quant::int8 {

namespace {
// QAT_INT8_WINOGRAD at first use: "0" turns it off, "1" (or unset) leaves it on; anything else is
// reported and ignored, as QAT_CPU's
std::atomic<bool>& row_mode() {
  static std::atomic<bool> on{[] {
    const char* env = std::getenv("QAT_INT8_WINOGRAD");
    if (env == nullptr || *env == '\0' || std::string(env) == "1") return true;
    if (std::string(env) == "0") return false;
    std::cerr << "qat: ignoring QAT_INT8_WINOGRAD=" << env << " (expected 0 or 1)\n";
    return true;
  }()};
  return on;
}

bool pairs_path() { return kernels::pack_format(false) == kernels::PackFormat::Pairs; }
}  // namespace

void set_row_winograd(bool on) { row_mode() = on; }
bool row_winograd_enabled() { return row_mode(); }

bool RowWinogradWeights::usable() const {
  return pairs_path() && !points.empty() &&
         std::all_of(points.begin(), points.end(), [](const PackedWeights& p) {
           return p.format == static_cast<int>(kernels::PackFormat::Pairs) && !p.narrow;
         });
}

std::int64_t row_winograd_tile(std::int64_t kw, std::int64_t Wo) {
  if ((kw != 3 && kw != 5) || Wo <= 0 || !row_winograd_enabled() || !pairs_path()) return 0;
  // multiplies per row (x 10): n per tile, against kw per output for the direct kernel
  std::int64_t best = 0, fewest = 7 * kw * Wo;  // at most 0.7x the direct kernel's
  for (const std::int64_t m : {4, 5}) {
    const kernels::RowTransform* tr = kernels::row_transform(static_cast<int>(m), static_cast<int>(kw));
    if (tr == nullptr) continue;
    const std::int64_t cost = 10 * tr->n * ((Wo + m - 1) / m);
    if (cost < fewest || (best == 0 && cost == fewest)) best = m, fewest = cost;
  }
  return best;
}

std::optional<RowWinogradWeights> pack_row_winograd(const std::int8_t* w, std::int64_t O, std::int64_t C,
                                                    std::int64_t kh, std::int64_t kw, std::int64_t m) {
  QAT_REQUIRE(O > 0 && C > 0 && kh > 0 && kw > 0, "int8::pack_row_winograd",
              "needs a weight (O, C, kh, kw) with every size > 0, got (", O, ", ", C, ", ", kh, ", ", kw,
              ")");
  const kernels::RowTransform* tr =
      (kw == 3 || kw == 5) && (m == 4 || m == 5)
          ? kernels::row_transform(static_cast<int>(m), static_cast<int>(kw))
          : nullptr;
  if (tr == nullptr) return std::nullopt;
  const std::int64_t K = C * kh * kw;
  RowWinogradWeights rw;
  rw.O = O;
  rw.C = C;
  rw.kh = kh;
  rw.kw = kw;
  rw.m = m;
  rw.sums.assign(O, 0);
  for (std::int64_t o = 0; o < O; ++o) {
    std::int64_t bound = 0;  // sum |w|: |y| <= 128 bound (centred inputs) must stay below 2^(31 - e)
    for (std::int64_t k = 0; k < K; ++k) {
      rw.sums[o] += w[o * K + k];
      bound += std::abs(static_cast<std::int64_t>(w[o * K + k]));
    }
    if (128 * bound >= (std::int64_t{1} << (31 - tr->shift))) return std::nullopt;
  }
  using kernels::kBlock;
  using kernels::kStepBytes;
  const std::int64_t Cp = (C + 1) / 2 * 2, blocks = (O + kBlock - 1) / kBlock;
  for (int xi = 0; xi < tr->n; ++xi) {
    PackedWeights p;
    p.O = O;
    p.K = kh * Cp;
    p.format = static_cast<int>(kernels::PackFormat::Pairs);
    p.pieces = kh;
    p.piece_steps = Cp / 2;
    p.steps = kh * p.piece_steps;
    p.data.assign(blocks * p.steps * kStepBytes, 0);
    p.sums = rw.sums;
    // pairs layout (int8_pack.cpp): k = r Cp + c at step k / 2, half k % 2 of channel o % 16
    for (std::int64_t o = 0; o < O; ++o)
      for (std::int64_t r = 0; r < kh; ++r)
        for (std::int64_t c = 0; c < C; ++c) {
          int u = 0;  // U_xi = sum_s G[xi][s] w(o, c, r, s), |U| <= 121 * 128
          for (std::int64_t s = 0; s < kw; ++s) u += tr->G[xi][s] * w[((o * C + c) * kh + r) * kw + s];
          const std::int64_t k = r * Cp + c;
          const auto u16 = static_cast<std::uint16_t>(static_cast<std::int16_t>(u));
          std::memcpy(p.data.data() + ((o / kBlock) * p.steps + k / 2) * kStepBytes + (o % kBlock) * 4 +
                          (k % 2) * 2,
                      &u16, 2);
        }
    rw.points.push_back(std::move(p));
  }
  return rw;
}

void conv_u8s8_row_winograd(const std::uint8_t* x, std::int64_t n, std::int64_t Hp, std::int64_t Wx,
                            std::int64_t Ho, std::int64_t Wo, std::int64_t sh, std::int64_t dh,
                            std::int32_t zx, const RowWinogradWeights& w, const Requant& rq, bool pool,
                            std::uint8_t* y, std::int64_t col0, std::int64_t y_row,
                            std::int64_t y_image) {
  using namespace kernels;
  const char* fn = "int8::conv_u8s8_row_winograd";
  QAT_REQUIRE(w.usable(), fn, "the weights were packed for another CPU path (",
              cpu::isa_name(cpu::isa()), " now): pack them again");
  const RowTransform* tr = row_transform(static_cast<int>(w.m), static_cast<int>(w.kw));
  QAT_REQUIRE(tr != nullptr && Ho > 0 && Wo > 0 && sh > 0 && dh > 0, fn,
              "needs Ho, Wo, sh, dh > 0, got ", Ho, ", ", Wo, ", ", sh, ", ", dh);
  const std::int64_t C = w.C, kh = w.kh, O = w.O, m = w.m, tiles = (Wo + m - 1) / m;
  QAT_REQUIRE(col0 >= 0 && Wx >= col0 + m * tiles + w.kw - 1, fn, "rows of ", Wx,
              " columns are too short for ", tiles, " tiles of ", m, " outputs from column ", col0, " (",
              col0 + m * tiles + w.kw - 1, " needed)");
  QAT_REQUIRE(!pool || col0 % 2 == 0, fn, "a pooled slice must start at an even column, got ", col0);
  QAT_REQUIRE(Hp >= (Ho - 1) * sh + (kh - 1) * dh + 1, fn, Ho, " output rows need ",
              (Ho - 1) * sh + (kh - 1) * dh + 1, " input rows, got ", Hp);
  if (pool)
    QAT_REQUIRE(rq.inv_scale > 0 && std::all_of(rq.scale, rq.scale + O, [](float s) { return s >= 0; }),
                fn, "a pooled output stage needs scales >= 0");
  if (n <= 0 || (pool && (Ho < 2 || Wo < 2))) return;
  const std::int64_t Cp = (C + 1) / 2 * 2, blocks = (O + kBlock - 1) / kBlock, Op = blocks * kBlock;
  const std::int64_t vimg = Hp * tiles * Cp, rows = Ho * tiles;  // V and GEMM rows per image
  const std::int64_t row_px = y_row > 0 ? y_row : pool ? Wo / 2 : Wo;  // y's pixels per output row
  const std::int64_t y_img = y_image > 0 ? y_image : (pool ? Ho / 2 : Ho) * row_px * O;
  // images per GEMM: their V and M within ~256 KiB (L2), more rows per call than one image's
  const std::int64_t per_image = tr->n * (vimg * 2 + rows * Op * 4);
  const std::int64_t batch = std::clamp<std::int64_t>((std::int64_t{1} << 18) / per_image, 1, 8);
  const std::int64_t vplane = batch * vimg, mplane = batch * rows * Op;
  // the centred sums: sum (x - zx) w = sum (x - 128) w + (128 - zx) rowsum(w)
  std::vector<std::int32_t> acc0(Op, 0), zeros(Op, 0);
  std::vector<float> scale(O), bias(O);
  for (std::int64_t o = 0; o < O; ++o) {
    acc0[o] = static_cast<std::int32_t>(static_cast<std::uint32_t>(128 - zx) *
                                        static_cast<std::uint32_t>(w.sums[o]));
    scale[o] = rq.scale[o];
    bias[o] = rq.bias ? rq.bias[o] : 0.0f;
  }
  // GEMM row (i, oh, t) reads V rows oh sh + r dh of image i at tile t: kh runs of Cp int16,
  // one run of kh Cp where dh = 1 (row_input: a tile's rows are next to each other)
  const std::int64_t runs = dh == 1 ? 1 : kh;
  std::vector<std::int64_t> row_off(batch * rows), piece_off(runs);
  for (std::int64_t i = 0; i < batch; ++i)
    for (std::int64_t oh = 0; oh < Ho; ++oh)
      for (std::int64_t t = 0; t < tiles; ++t)
        row_off[(i * Ho + oh) * tiles + t] = (i * vimg + (t * Hp + oh * sh) * Cp) * 2;
  for (std::int64_t r = 0; r < runs; ++r) piece_off[r] = r * dh * Cp * 2;
  GemmArgs a{};
  a.K = kh * Cp;
  a.steps = w.points[0].steps;
  a.O = O;
  a.acc0 = zeros.data();
  a.row_off = row_off.data();
  a.piece_off = piece_off.data();
  a.pieces = runs;
  a.piece_steps = kh / runs * Cp / 2;
  a.format = PackFormat::Pairs;
  a.ldy = Op;
  const RowOutput out{nullptr,
                      mplane,
                      Op,
                      Ho,
                      Wo,
                      tiles,
                      O,
                      row_px,
                      acc0.data(),
                      scale.data(),
                      bias.data(),
                      rq.inv_scale,
                      static_cast<float>(rq.lo - rq.zero_point),
                      static_cast<float>(rq.hi - rq.zero_point),
                      rq.zero_point,
                      pool,
                      nullptr,
                      nullptr};
  const std::int64_t groups = (n + batch - 1) / batch;
  parallel_for(groups, 1, [&](std::int64_t g0, std::int64_t g1) {
    thread_local std::vector<std::int16_t> v;
    thread_local std::vector<std::int32_t> mv;
    thread_local std::vector<std::uint8_t> scratch;
    thread_local std::vector<std::int32_t> oscratch;  // row_output's
    oscratch.resize(row_output_scratch(tiles, m, O));
    v.resize(tr->n * vplane + 64);  // (+ 64: reads past a run stay inside)
    mv.resize(tr->n * mplane);
    scratch.resize(scratch_bytes(a.steps));
    GemmArgs g = a;
    RowOutput go = out;
    go.scratch = oscratch.data();
    for (std::int64_t grp = g0; grp < g1; ++grp) {
      const std::int64_t i0 = grp * batch, nb = std::min(batch, n - i0);
      for (std::int64_t i = 0; i < nb; ++i)
        row_input(*tr, x + (i0 + i) * Hp * Wx * C + col0 * C, Hp, Wx * C, C, tiles, v.data() + i * vimg,
                  vplane);
      for (int xi = 0; xi < tr->n; ++xi) {
        g.x = reinterpret_cast<const std::uint8_t*>(v.data() + xi * vplane);
        g.w = w.points[xi].data.data();
        g.y32 = mv.data() + xi * mplane;
        g.M = nb * rows;
        gemm_range(g, 0, nb * rows, 0, blocks, scratch.data());
      }
      for (std::int64_t i = 0; i < nb; ++i) {
        go.m = mv.data() + i * rows * Op;
        go.out = y + (i0 + i) * y_img + (pool ? col0 / 2 : col0) * O;
        row_output(*tr, go);
      }
    }
  });
}

}  // namespace qat::quant::int8
