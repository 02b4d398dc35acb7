// The grouped int8 GEMM's tile and row loop (kernels/cpu/int8_dynamic.cpp), included in that
// file's namespace once per Highway target, and on AVX2 once more inside `avx_vnni` (AVX-VNNI). No
// include guard: each inclusion defines them in the namespace it is included in, from the names
// the includer declares there or around it: Vec, kVecs, kMR, kNB, kWeightBytes, zero, load_w,
// bcast, dot, store, add_group, store_tile (x86), or the plain loops (other targets).
// One tile of MR rows: rows [r, r + rows) (their int16 values in s, zeros up to MR) x NB blocks
// from block b. Each row's sums are its own, so the bits do not depend on MR.
template <int NB, std::int64_t MR>
HWY_INLINE QAT_TILE_TARGET void tile(const DynArgs& a, std::int64_t r, std::int64_t rows, std::int64_t b,
                                     const std::int16_t* __restrict s) {
  constexpr std::int64_t W = NB * kBlock;
  alignas(64) std::int32_t acc_mem[MR * W];
  alignas(64) float sum[MR * W] = {};
  alignas(64) float ws[W];
  const std::int64_t stride = a.groups * a.steps * 2, block_pairs = a.groups * a.steps * kBlock;
  for (std::int64_t g = 0; g < a.groups; ++g) {
#if QAT_INT8_X86
    Vec acc[MR][NB * kVecs];
    for (std::int64_t i = 0; i < MR; ++i)
      for (int j = 0; j < NB * kVecs; ++j) acc[i][j] = zero();
    for (std::int64_t st = 0; st < a.steps; ++st) {
      Vec w[NB * kVecs];
      for (int nb = 0; nb < NB; ++nb)
        for (int v = 0; v < kVecs; ++v)
          w[nb * kVecs + v] = load_w(a.w + ((b + nb) * block_pairs + (g * a.steps + st) * kBlock) * 2 +
                                     v * kWeightBytes);
      for (std::int64_t i = 0; i < MR; ++i) {
        const Vec x = bcast(s + i * stride + (g * a.steps + st) * 2);
        for (int j = 0; j < NB * kVecs; ++j) acc[i][j] = dot(acc[i][j], x, w[j]);
      }
    }
    for (std::int64_t i = 0; i < MR; ++i)
      for (int j = 0; j < NB * kVecs; ++j) store(acc_mem + i * W + j * (kBlock / kVecs), acc[i][j]);
#else
    for (std::int64_t i = 0; i < MR * W; ++i) acc_mem[i] = 0;
    for (std::int64_t st = 0; st < a.steps; ++st)
      for (std::int64_t i = 0; i < MR; ++i) {
        const std::int16_t* x = s + i * stride + (g * a.steps + st) * 2;
        for (int nb = 0; nb < NB; ++nb) {
          const std::int8_t* w = a.w + ((b + nb) * block_pairs + (g * a.steps + st) * kBlock) * 2;
          for (std::int64_t c = 0; c < kBlock; ++c)
            acc_mem[i * W + nb * kBlock + c] += x[0] * w[2 * c] + x[1] * w[2 * c + 1];
        }
      }
#endif
    for (int nb = 0; nb < NB; ++nb)
      for (std::int64_t c = 0; c < kBlock; ++c)
        ws[nb * kBlock + c] = a.ws[((b + nb) * a.groups + g) * kBlock + c];
    add_group(acc_mem, ws, MR, W, sum);
  }
  store_tile(a, r, rows, b * kBlock, W, sum);
}

// The blocks of one tile height's rows: kNB blocks at a time, then one by one.
template <std::int64_t MR>
HWY_NOINLINE QAT_TILE_TARGET void tile_row(const DynArgs& a, std::int64_t r, std::int64_t rows,
                                           const std::int16_t* s) {
  const std::int64_t blocks = (a.O + kBlock - 1) / kBlock;
  std::int64_t b = 0;
  for (; b + kNB <= blocks; b += kNB) tile<kNB, MR>(a, r, rows, b, s);
  for (; b < blocks; ++b) tile<1, MR>(a, r, rows, b, s);
}

// Rows in tiles of kMR; the last one of 1, 2 or 4 rows where it has that few (a batch of one,
// as when decoding, multiplies one row instead of kMR).
void dyn_range(const DynArgs& a, std::int64_t r0, std::int64_t r1, std::int16_t* scratch) {
  for (std::int64_t r = r0; r < r1; r += kMR) {
    const std::int64_t rows = std::min(kMR, r1 - r);
    const std::int64_t height = rows <= 2 ? rows : rows <= 4 && kMR > 4 ? 4 : kMR;
    fill_rows(a, r, rows, height, scratch);
    if (height == 1)
      tile_row<1>(a, r, rows, scratch);
    else if (height == 2)
      tile_row<2>(a, r, rows, scratch);
    else if (height == 4)
      tile_row<4>(a, r, rows, scratch);
    else
      tile_row<kMR>(a, r, rows, scratch);
  }
}
