#pragma once
// Internal: the excess lists of a narrow packing (int8_excess.cpp), which run_gemm
// (int8_kernels.cpp) builds before the tiles run.
#include <cstdint>
#include <vector>

#include "modules/quant/int8_kernels.h"
#include "modules/quant/kernels/cpu/int8_gemm.h"

namespace qat::quant::int8::detail {

// Row m's entries are ex[row[m] .. row[m + 1]) (at, table, next, placed: scratch of the search;
// placed: the entries in the order of the bytes, before they go to their rows).
// Kept per thread between calls (no allocation in steady state).
struct ExcessLists {
  struct Placed {
    std::int64_t m;
    kernels::Excess e;
  };
  std::vector<std::int64_t> row, at, table, next;
  std::vector<Placed> placed;
  std::vector<kernels::Excess> ex;
};

// Rows of x (M, K), ldx apart: each row's own bytes above 127.
void rows_excess(const std::uint8_t* x, std::int64_t M, std::int64_t K, std::int64_t ldx,
                 ExcessLists& l);
// An implicit GEMM's rows (row_off non-decreasing; int8::gemm_u8s8_implicit): the bytes above 127
// found once and handed to every row that reads them, by a search of the row offsets.
void implicit_excess(const std::uint8_t* x, std::int64_t M, const std::int64_t* row_off,
                     const std::int64_t* piece_off, std::int64_t pieces, std::int64_t psteps,
                     ExcessLists& l);
// The same from each pixel's taps (ExcessTaps), without a search.
void taps_excess(const std::uint8_t* x, std::int64_t M, const ExcessTaps& t, ExcessLists& l);

}  // namespace qat::quant::int8::detail
