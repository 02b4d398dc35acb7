// The tiles and row loop of int8::linear_u8s8_rows (kernels/cpu/int8_rows.cpp), included in that
// file's namespace once per Highway target, and on AVX2 once more inside `avx_vnni` (AVX-VNNI).
// No include guard: each inclusion defines them in the namespace it is included in, from the
// names the includer declares there or around it: Vec, kStep, kRowsW, tile_rows, zero, load_x,
// load_w, dot, lanes_sum (x86), or the plain loops (other targets).

// out[r * O + q] = sum_k xs(i0 + r, k) w(q, k) for a tile of RA rows of x by RW rows of w (K
// apart). The last vector of a row reads up to kStep - 1 bytes past it, times the zeros that pad
// xs: the caller keeps them readable (the next rows, or a zero-padded copy of the last ones).
template <int RA, int RW>
HWY_NOINLINE QAT_TILE_TARGET void dot_tile(const RowsArgs& a, std::int64_t i0, const std::int8_t* w,
                                           std::int32_t* out) {
  const std::int16_t* xs = a.xs + i0 * a.xs_ld;
  const std::int64_t K = a.K;
#if QAT_INT8_X86
  Vec acc[RA][RW];
#pragma GCC unroll 4
  for (int r = 0; r < RA; ++r)
#pragma GCC unroll 8
    for (int q = 0; q < RW; ++q) acc[r][q] = zero();
  for (std::int64_t k = 0; k < K; k += kStep) {
    Vec x[RA];
#pragma GCC unroll 4
    for (int r = 0; r < RA; ++r) x[r] = load_x(xs + r * a.xs_ld + k);
#pragma GCC unroll 8
    for (int q = 0; q < RW; ++q) {
      Vec wv = load_w(w + q * K + k);
      // each weight vector loaded where it is used: hoisting them all ahead spills accumulators
      asm volatile("" : "+v"(wv));
#pragma GCC unroll 4
      for (int r = 0; r < RA; ++r) acc[r][q] = dot(acc[r][q], x[r], wv);
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < RA; ++r)
#pragma GCC unroll 8
    for (int q = 0; q < RW; ++q) out[r * a.O + q] = lanes_sum(acc[r][q]);
#else
  for (int r = 0; r < RA; ++r)
    for (int q = 0; q < RW; ++q) {
      std::int32_t s = 0;
      for (std::int64_t k = 0; k < K; ++k) s += xs[r * a.xs_ld + k] * w[q * K + k];
      out[r * a.O + q] = s;
    }
#endif
}

// The tiles of rows [i0, i0 + RA) and outputs [o0, o1), w the weight row of o0: int32 sums
// into acc (rows O apart).
template <int RA>
void sweep(const RowsArgs& a, std::int64_t i0, const std::int8_t* w, std::int64_t o0, std::int64_t o1,
           std::int32_t* acc) {
  for (std::int64_t o = o0; o < o1;) {
    const std::int64_t rw = tile_rows(RA, o1 - o);
    const std::int8_t* wo = w + (o - o0) * a.K;
    std::int32_t* out = acc + i0 * a.O + o;
    if (rw == kRowsW[RA])
      dot_tile<RA, kRowsW[RA]>(a, i0, wo, out);
    else if (rw == 4)
      dot_tile<RA, 4>(a, i0, wo, out);
    else if (rw == 2)
      dot_tile<RA, 2>(a, i0, wo, out);
    else
      dot_tile<RA, 1>(a, i0, wo, out);
    o += rw;
  }
}

// Every row of x in groups of up to 4, outputs [o0, o1) (w: the weight row of o0).
inline void sweep_rows(const RowsArgs& a, const std::int8_t* w, std::int64_t o0, std::int64_t o1,
                       std::int32_t* acc) {
  for (std::int64_t i = 0; i < a.M; i += 4) {
    const std::int64_t ra = a.M - i < 4 ? a.M - i : 4;
    if (ra == 4)
      sweep<4>(a, i, w, o0, o1, acc);
    else if (ra == 3)
      sweep<3>(a, i, w, o0, o1, acc);
    else if (ra == 2)
      sweep<2>(a, i, w, o0, o1, acc);
    else
      sweep<1>(a, i, w, o0, o1, acc);
  }
}
