// The excess lists of a narrow packing (kernels/cpu/int8_gemm.h): for each GEMM row, the quads
// of its input bytes above 127, which the narrow tile adds after multiplying min(a, 127).
#include "modules/quant/detail/int8_excess.h"

#include <algorithm>
#include <bit>
#include <limits>
#include <vector>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "framework/tensor/error.h"

namespace qat::quant::int8 {
namespace {

// The offsets of the bytes of x[0, n) above 127, in order (16 at a time: their high bits).
void find_wide(const std::uint8_t* x, std::int64_t n, std::vector<std::int64_t>& at) {
  std::int64_t i = 0;
#if defined(__SSE2__)
  for (; i + 16 <= n; i += 16) {
    auto bits = static_cast<unsigned>(
        _mm_movemask_epi8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x + i))));
    for (; bits != 0; bits &= bits - 1) at.push_back(i + __builtin_ctz(bits));
  }
#endif
  for (; i < n; ++i)
    if (x[i] > 127) at.push_back(i);
}

// What the byte a > 127 at place d of a row adds: {step d / 4, (a - 127) at byte d % 4}
kernels::Excess excess_at(std::int64_t d, std::uint8_t a) {
  return {static_cast<std::int32_t>(d / 4), static_cast<std::uint32_t>(a - 127) << (8 * (d % 4))};
}

// The entries l.placed[0 .. end) (made in the order of the bytes, l.row[m + 1] counting row m's)
// into ex by row, each row's in that order: a counting sort.
void place_by_row(detail::ExcessLists& l, std::int64_t M, const detail::ExcessLists::Placed* end) {
  std::int64_t* const row = l.row.data();
  for (std::int64_t m = 0; m < M; ++m) row[m + 1] += row[m];
  l.ex.resize(row[M]);
  l.next.assign(l.row.begin(), l.row.end() - 1);
  std::int64_t* const next = l.next.data();
  kernels::Excess* const ex = l.ex.data();
  for (const detail::ExcessLists::Placed* p = l.placed.data(); p < end; ++p) ex[next[p->m]++] = p->e;
}

}  // namespace

namespace detail {

void rows_excess(const std::uint8_t* x, std::int64_t M, std::int64_t K, std::int64_t ldx,
                 ExcessLists& l) {
  l.row.assign(M + 1, 0);
  l.ex.clear();
  std::vector<std::int64_t>& at = l.at;
  for (std::int64_t m = 0; m < M; ++m) {
    at.clear();
    find_wide(x + m * ldx, K, at);
    for (const std::int64_t k : at) l.ex.push_back(excess_at(k, x[m * ldx + k]));
    l.row[m + 1] = static_cast<std::int64_t>(l.ex.size());
  }
}

// The implicit GEMM's rows overlap (a convolution's windows share pixels), so its bytes above
// 127 are found once in the buffer and given to every row that reads them: byte q is read by
// row m through piece p at place d = q - piece_off[p] - row_off[m] when 0 <= d < len (the
// bytes the kernel reads per run). row_off is non-decreasing, so the rows of (q, p) are one
// range, [upper(t - len), upper(t)) for t = q - piece_off[p], upper(v) the first row with
// row_off > v: a table of it every G bytes, then a step or two.
void implicit_excess(const std::uint8_t* x, std::int64_t M, const std::int64_t* row_off,
                     const std::int64_t* piece_off, std::int64_t pieces, std::int64_t psteps,
                     ExcessLists& l) {
  QAT_REQUIRE(std::is_sorted(row_off, row_off + M), "int8::gemm_u8s8_implicit",
              "row_off must be non-decreasing when x_narrow is given");
  const std::int64_t len = psteps * 4;
  const std::int64_t pmin = *std::min_element(piece_off, piece_off + pieces),
                     pmax = *std::max_element(piece_off, piece_off + pieces);
  const std::int64_t lo = row_off[0] + pmin, hi = row_off[M - 1] + pmax + len;
  std::vector<std::int64_t>& at = l.at;
  at.clear();
  find_wide(x + lo, hi - lo, at);
  const std::int64_t base = row_off[0], span = row_off[M - 1] - base + 1;
  // G = 2^g bytes, about half the mean distance of the rows
  const int g =
      std::bit_width(static_cast<std::uint64_t>(std::max<std::int64_t>(1, span / (2 * M)))) - 1;
  std::vector<std::int64_t>& table = l.table;  // table[b]: first m, row_off[m] >= base + b G
  table.resize(((span - 1) >> g) + 1);
  for (std::int64_t b = 0, m = 0; b < static_cast<std::int64_t>(table.size()); ++b) {
    while (row_off[m] < base + (b << g)) ++m;  // (base + b G <= base + span - 1 = row_off[M - 1])
    table[b] = m;
  }
  auto upper = [&](std::int64_t v) {
    if (v < base) return std::int64_t{0};
    if (v >= row_off[M - 1]) return M;
    std::int64_t m = table[(v - base) >> g];
    while (row_off[m] <= v) ++m;
    return m;
  };
  l.row.assign(M + 1, 0);
  l.placed.clear();
  for (const std::int64_t off : at) {
    const std::int64_t q = lo + off;
    for (std::int64_t p = 0; p < pieces; ++p) {
      const std::int64_t t = q - piece_off[p];
      for (std::int64_t m = upper(t - len), m1 = upper(t); m < m1; ++m) {
        kernels::Excess e = excess_at(t - row_off[m], x[q]);
        e.step += static_cast<std::int32_t>(p * psteps);
        l.placed.push_back({m, e});
        ++l.row[m + 1];
      }
    }
  }
  place_by_row(l, M, l.placed.data() + l.placed.size());
}

// implicit_excess from the taps of each pixel (ExcessTaps): byte q of image i, pixel u, byte c
// of the pixel, is read by row i rows + tap.row at place tap.place + c of the run that starts at
// step tap.step.
void taps_excess(const std::uint8_t* x, std::int64_t M, const ExcessTaps& t, ExcessLists& l) {
  std::vector<std::int64_t>& at = l.at;
  at.clear();
  find_wide(x, M / t.rows * t.img, at);
  l.row.assign(M + 1, 0);
  l.placed.resize(static_cast<std::int64_t>(at.size()) * t.most);
  std::int64_t* const row = l.row.data();
  ExcessLists::Placed* out = l.placed.data();
  for (const std::int64_t q : at) {
    const std::int64_t i = q / t.img, u = q - i * t.img, px = u / t.unit, c = u - px * t.unit;
    const std::int64_t m0 = i * t.rows;
    const auto e = static_cast<std::uint32_t>(x[q] - 127);
    for (const ExcessTaps::Tap *tap = t.tap.data() + t.begin[px], *end = t.tap.data() + t.begin[px + 1];
         tap < end; ++tap) {
      const std::int64_t m = m0 + tap->row, d = tap->place + c;
      *out++ = {m, {tap->step + static_cast<std::int32_t>(d >> 2), e << (8 * (d & 3))}};
      ++row[m + 1];
    }
  }
  place_by_row(l, M, out);
}

}  // namespace detail

ExcessTaps excess_taps(const std::int64_t* row_off, std::int64_t rows, std::int64_t img,
                       const std::int64_t* piece_off, std::int64_t pieces, std::int64_t piece_bytes,
                       std::int64_t piece_steps, std::int64_t unit) {
  const char* fn = "int8::excess_taps";
  constexpr std::int64_t kMost = std::numeric_limits<std::int32_t>::max();  // (a tap's fields)
  QAT_REQUIRE(unit > 0 && rows > 0 && pieces > 0 && img % unit == 0 && piece_bytes % unit == 0 &&
                  piece_bytes <= 4 * piece_steps && rows <= kMost && pieces * piece_steps <= kMost,
              fn, "needs whole pixels: unit ", unit, ", rows ", rows, ", img ", img, ", pieces ", pieces,
              ", piece_bytes ", piece_bytes, ", piece_steps ", piece_steps);
  ExcessTaps t;
  t.unit = unit;
  t.img = img;
  t.rows = rows;
  const std::int64_t pixels = img / unit;
  t.begin.assign(pixels + 1, 0);
  // each (row, run, pixel of the run): counted per pixel, then placed in the same order
  for (int pass = 0; pass < 2; ++pass) {
    std::vector<std::int64_t> next(t.begin.begin(), t.begin.end() - 1);
    if (pass == 1) t.tap.resize(t.begin[pixels]);
    for (std::int64_t m = 0; m < rows; ++m)
      for (std::int64_t p = 0; p < pieces; ++p) {
        const std::int64_t start = row_off[m] + piece_off[p];
        QAT_REQUIRE(start >= 0 && start % unit == 0 && start + piece_bytes <= img, fn, "row ", m,
                    " run ", p, " at byte ", start, " is not whole pixels of image of ", img, " bytes");
        for (std::int64_t d = 0; d < piece_bytes; d += unit) {
          const std::int64_t u = (start + d) / unit;
          if (pass == 0)
            ++t.begin[u + 1];
          else
            t.tap[next[u]++] = {static_cast<std::int32_t>(m), static_cast<std::int32_t>(p * piece_steps),
                                static_cast<std::int32_t>(d)};
        }
      }
    if (pass == 0)
      for (std::int64_t u = 0; u < pixels; ++u) {
        t.most = std::max(t.most, t.begin[u + 1]);
        t.begin[u + 1] += t.begin[u];
      }
  }
  return t;
}

}  // namespace qat::quant::int8
