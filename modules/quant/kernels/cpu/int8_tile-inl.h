// The int8 GEMM's tiles and row loops (kernels/cpu/int8_gemm.cpp), included in that file's x86
// section once per Highway target, and on AVX2 once more inside `avx_vnni` (AVX-VNNI). No include
// guard: each inclusion defines them in the namespace it is included in, from the names the
// includer declares there or around it: Vec, VecF, kVecs, kLanes, kMR, kMR7, kNB, kNative, load,
// bcast, dot, dot7, dot7x2, ones16, max32, set32, setf, requant, store_bytes, store32.

// What a tile's output stage writes (template argument kOut): requantized bytes, the same with
// the 2 x 2 max pool (GemmArgs::pool), or the raw int32 sums (GemmArgs::y32; instantiated on the
// int16-pairs paths only, for the row Winograd: a branch for it in the VNNI tiles cost their
// register allocation, measured 33% on AVX512_VNNI's int8 CNN).
constexpr int kOutBytes = 0, kOutPool = 1, kOutRaw = 2;

// The output stage of a tile: its accumulators (MR rows x NB blocks from b) requantized into y
// from GEMM row `row`, rows [0, rows_valid) (kPool: each kPoolWindow rows one output row; raw:
// the sums into y32).
template <int NB, std::int64_t MR, int kOut>
HWY_INLINE void store_tile(const GemmArgs& g, const Vec (&acc)[MR][NB * kVecs], std::int64_t b,
                           std::int64_t row, std::int64_t rows_valid) {
  constexpr bool kPool = kOut == kOutPool;
  if constexpr (kOut == kOutRaw) {
#pragma GCC unroll 8
    for (std::int64_t i = 0; i < MR; ++i) {
      if (i >= rows_valid) break;
      for (int v = 0; v < NB * kVecs; ++v)
        store32(g.y32 + (row + i) * g.ldy + b * kBlock + v * kLanes, acc[i][v]);
    }
    return;
  }
  for (int j = 0; j < NB; ++j) {
    const std::int64_t c0 = (b + j) * kBlock, n = g.O - c0 < kBlock ? g.O - c0 : kBlock;
    const VecF inv = setf(g.inv_scale), lo = setf(g.lo), hi = setf(g.hi);
    const Vec zp = set32(g.zp);
    // a constant trip count with an exit keeps the accumulators in registers (a loop bound
    // by rows_valid indexes them at run time, which puts them on the stack)
    constexpr std::int64_t kStep = kPool ? kPoolWindow : 1;
    static_assert(MR % kStep == 0);
#pragma GCC unroll 8
    for (std::int64_t i = 0; i < MR; i += kStep) {
      if (i >= rows_valid) break;
      Vec out[kVecs];
      for (int u = 0; u < kVecs; ++u) {
        const std::int64_t c = c0 + u * kLanes;
        Vec sum = acc[i][j * kVecs + u];
        if constexpr (kPool)
          sum = max32(max32(sum, acc[i + 1][j * kVecs + u]),
                      max32(acc[i + 2][j * kVecs + u], acc[i + 3][j * kVecs + u]));
        out[u] = requant(sum, g.scale + c, g.bias + c, inv, lo, hi, zp);
      }
      store_bytes(g.y + (row + i) / kStep * g.ldy + c0, out, n);
    }
  }
}

// One tile: the MR rows at ap[0..MR) times blocks b..b+NB-1, K as pieces x psteps steps; kNarrow:
// quads of inputs in [0, 127] on a target whose native format is pairs, the steps in the order of
// g.sched, its pairs two at a time (dot7x2), step s at aoff[s] bytes into a row; kExcess: then
// the excess quads of row i, ex[i][0..nex[i]); kPool: each kPoolWindow rows one output
// (GemmArgs::pool).
template <int NB, std::int64_t MR, bool kNarrow, bool kExcess, int kOut>
HWY_INLINE QAT_TILE_TARGET void tile(const GemmArgs& g, const std::uint8_t* const* ap,
                                     const std::int64_t* poff, std::int64_t pieces, std::int64_t psteps,
                                     const std::int32_t* aoff, std::int64_t b, std::int64_t row,
                                     std::int64_t rows_valid, const Excess* const* ex,
                                     const std::int64_t* nex) {
  constexpr int V = NB * kVecs;
  const Vec ones = ones16();
  Vec acc[MR][V];
  for (int v = 0; v < V; ++v) {
    const Vec init = load(g.acc0 + b * kBlock + v * kLanes);
    for (int i = 0; i < MR; ++i) acc[i][v] = init;
  }
  const std::uint8_t* const w0 = g.w + b * g.steps * kStepBytes;
  const std::int64_t wstride = g.steps * kStepBytes;  // between blocks
  if constexpr (kNarrow) {  // the steps in the group's order: its pairs, then single steps
    const std::int32_t* order = g.sched + b / kNB * g.steps;  // this block's group
    const std::int64_t pairs = g.sched_pairs[b / kNB];
#pragma GCC unroll 2
    for (std::int64_t t = 0; t < pairs; ++t) {
      const std::int64_t s0 = order[2 * t], s1 = order[2 * t + 1], o0 = aoff[s0], o1 = aoff[s1];
      Vec b0[V], b1[V];
      for (int j = 0; j < NB; ++j)
        for (int u = 0; u < kVecs; ++u) {
          const std::uint8_t* wj = w0 + j * wstride + u * (kStepBytes / kVecs);
          b0[j * kVecs + u] = load(wj + s0 * kStepBytes);
          b1[j * kVecs + u] = load(wj + s1 * kStepBytes);
        }
      for (int i = 0; i < MR; ++i) {
        const Vec a0 = bcast(ap[i] + o0), a1 = bcast(ap[i] + o1);
        for (int v = 0; v < V; ++v) acc[i][v] = dot7x2(acc[i][v], a0, b0[v], a1, b1[v], ones);
      }
    }
#pragma GCC unroll 4
    for (std::int64_t t = 2 * pairs; t < g.steps; ++t) {
      const std::int64_t s = order[t], o = aoff[s];
      Vec bv[V];
      for (int j = 0; j < NB; ++j)
        for (int u = 0; u < kVecs; ++u)
          bv[j * kVecs + u] = load(w0 + j * wstride + s * kStepBytes + u * (kStepBytes / kVecs));
      for (int i = 0; i < MR; ++i) {
        const Vec av = bcast(ap[i] + o);
        for (int v = 0; v < V; ++v) acc[i][v] = dot7(acc[i][v], av, bv[v], ones);
      }
    }
  } else {  // the steps in order, piece by piece
    const std::uint8_t* __restrict w = w0;
    for (std::int64_t p = 0; p < pieces; ++p, w += psteps * kStepBytes) {
      const std::int64_t off = poff[p];
      const std::uint8_t* a[MR];
      for (int i = 0; i < MR; ++i) a[i] = ap[i] + off;
#pragma GCC unroll 4
      for (std::int64_t s = 0; s < psteps; ++s) {
        Vec bv[V];
        for (int j = 0; j < NB; ++j)
          for (int u = 0; u < kVecs; ++u)
            bv[j * kVecs + u] = load(w + j * wstride + s * kStepBytes + u * (kStepBytes / kVecs));
        for (int i = 0; i < MR; ++i) {
          const Vec av = bcast(a[i] + s * 4);
          for (int v = 0; v < V; ++v) acc[i][v] = dot(acc[i][v], av, bv[v]);
        }
      }
    }
  }
  if constexpr (kExcess) {  // + e . w for each quad with a byte above 127 (int8_gemm.h)
#pragma GCC unroll 8
    for (std::int64_t i = 0; i < MR; ++i)
      for (std::int64_t e = 0; e < nex[i]; ++e) {
        const Vec av = set32(static_cast<std::int32_t>(ex[i][e].quad));
        const std::uint8_t* ws = w0 + ex[i][e].step * kStepBytes;
        for (int j = 0; j < NB; ++j)
          for (int u = 0; u < kVecs; ++u)
            acc[i][j * kVecs + u] =
                dot7(acc[i][j * kVecs + u], av, load(ws + j * wstride + u * (kStepBytes / kVecs)), ones);
      }
  }
  store_tile<NB, MR, kOut>(g, acc, b, row, rows_valid);
}

// One row of tiles: their rows (ap[0..], from GEMM row `row`, `valid` of them real) times
// blocks [b0, b1), with the tile's other arguments.
struct TileRow {
  const GemmArgs& g;
  const std::uint8_t* const* ap;
  const std::int64_t* poff;
  std::int64_t pieces, psteps;
  const std::int32_t* aoff;
  std::int64_t b0, b1, row, valid;
  const Excess* const* ex;
  const std::int64_t* nex;
};

// A row of tiles of MR rows: kNB blocks at a time, a last one alone. Not inlined: gemm_rows
// holding the tiles of every height allocates their registers worse (AVX3: the broadcast of a
// row reloaded for every block, 37% slower).
template <std::int64_t MR, bool kNarrow, bool kExcess, int kOut>
HWY_NOINLINE QAT_TILE_TARGET void tile_row(const TileRow& t) {
  for (std::int64_t b = t.b0; b < t.b1; b += kNB) {
    if (b + kNB <= t.b1)
      tile<kNB, MR, kNarrow, kExcess, kOut>(t.g, t.ap, t.poff, t.pieces, t.psteps, t.aoff, b, t.row,
                                            t.valid, t.ex, t.nex);
    else
      tile<1, MR, kNarrow, kExcess, kOut>(t.g, t.ap, t.poff, t.pieces, t.psteps, t.aoff, b, t.row,
                                          t.valid, t.ex, t.nex);
  }
}

template <PackFormat kFormat, bool kExcess, int kOut>
void gemm_rows(const GemmArgs& g, std::int64_t r0, std::int64_t r1, std::int64_t b0, std::int64_t b1,
               void* scratch) {
  constexpr bool kNarrow = kFormat != kNative, kPool = kOut == kOutPool;
  static_assert(kNarrow || !kExcess);
  // pooled: whole windows per tile (AVX2's 6-row pairs tile becomes 4 rows)
  constexpr std::int64_t kMRFree = kNarrow ? kMR7 : kMR;
  constexpr std::int64_t MR = kPool && kMRFree % kPoolWindow != 0 ? kPoolWindow : kMRFree;
  static_assert(kRowBlock % MR == 0);
  // Row tiles of MR, and for the rows left over (< MR) one of 1 or 2 rows (a batch of one, as
  // when decoding, multiplies one row instead of MR) or of kPoolWindow, or else MR with rows to
  // pad: 6 divides no power of two, and a row block of 16 becomes 6 + 6 + 4. Pooled: whole
  // windows only.
  constexpr std::int64_t MRt = MR > kPoolWindow ? kPoolWindow : MR;
  const auto height = [](std::int64_t left) -> std::int64_t {
    if (left >= MR) return MR;
    if (!kPool && left <= 2) return left;
    return left <= MRt ? MRt : MR;
  };
  auto* s = static_cast<std::uint8_t*>(scratch);
  const std::int64_t astride = g.steps * 4;
  const std::int64_t zero = 0;
  const std::int64_t* poff = g.row_off ? g.piece_off : &zero;
  const std::int64_t pieces = g.row_off ? g.pieces : 1, psteps = g.row_off ? g.piece_steps : g.steps;
  // implicit: A from the clamped copy with kExcess
  const std::uint8_t* const xa = kExcess && g.row_off ? g.x_narrow : g.x;
  const std::uint8_t* ap[kRowBlock];
  const Excess* ex[kRowBlock];
  std::int64_t nex[kRowBlock] = {};
  // kNarrow: each step's offset in a row of A (after the rows' copy in the scratch)
  std::int32_t* const aoff = reinterpret_cast<std::int32_t*>(s + kRowBlock * astride + 64);
  if constexpr (kNarrow)
    for (std::int64_t p = 0, st = 0; p < pieces; ++p)
      for (std::int64_t q = 0; q < psteps; ++q, ++st)
        aoff[st] = static_cast<std::int32_t>(poff[p] + 4 * q);
  for (std::int64_t r = r0; r < r1; r += kRowBlock) {
    const std::int64_t rows = r1 - r < kRowBlock ? r1 - r : kRowBlock;
    std::int64_t rows_pad = 0;  // at most the next multiple of MR, <= kRowBlock
    for (std::int64_t left = rows; left > 0; left -= height(left)) rows_pad += height(left);
    const auto src = [&](std::int64_t i) {  // the convolution row of tile row i (kPool: mapped)
      const std::int64_t m = r + (i < rows ? i : rows - 1);
      return g.row_map ? g.row_map[m] : m;
    };
    if (g.row_off) {  // rows past the end repeat the last one (their outputs are not stored)
      for (std::int64_t i = 0; i < rows_pad; ++i) ap[i] = xa + g.row_off[src(i)];
    } else {
      fill_rows<kFormat, kExcess>(g, r, rows, rows_pad, s);
      for (std::int64_t i = 0; i < rows_pad; ++i) ap[i] = s + i * astride;
    }
    if constexpr (kExcess) {
      for (std::int64_t i = 0; i < rows_pad; ++i) {
        const std::int64_t m = src(i);
        ex[i] = g.ex + (i < rows ? g.ex_row[m] : 0);
        nex[i] = i < rows ? g.ex_row[m + 1] - g.ex_row[m] : 0;
      }
    }
    // a tile's rows stay in L1 while the weight blocks stream past them
    for (std::int64_t t = 0, h = 0; t < rows; t += h) {
      h = height(rows - t);
      const std::int64_t valid = rows - t < h ? rows - t : h;
      const TileRow tr{g, ap + t, poff, pieces, psteps, aoff, b0, b1, r + t, valid, ex + t, nex + t};
      if (h == MR)
        tile_row<MR, kNarrow, kExcess, kOut>(tr);
      else if (h == MRt)
        tile_row<MRt, kNarrow, kExcess, kOut>(tr);
      else if constexpr (!kPool)  // 1 or 2 rows
        h == 1 ? tile_row<1, kNarrow, kExcess, kOut>(tr) : tile_row<2, kNarrow, kExcess, kOut>(tr);
    }
  }
}

template <int kOut>
void gemm_rows_of_format(const GemmArgs& g, std::int64_t r0, std::int64_t r1, std::int64_t b0,
                         std::int64_t b1, void* scratch) {
  if constexpr (kNative == PackFormat::Pairs && kOut != kOutRaw) {
    if (g.format == PackFormat::Quads) {
      if (g.ex_row) return gemm_rows<PackFormat::Quads, true, kOut>(g, r0, r1, b0, b1, scratch);
      return gemm_rows<PackFormat::Quads, false, kOut>(g, r0, r1, b0, b1, scratch);
    }
  }
  gemm_rows<kNative, false, kOut>(g, r0, r1, b0, b1, scratch);
}
