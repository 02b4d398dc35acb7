#pragma once
// Internal: min / max of a float run in one vectorised pass (GCC/Clang vector extensions, 16
// lanes), also reporting NaN or infinite values -- what every observer does per batch.
#include <cstdint>
#include <cstring>
#include <limits>

namespace qat::quant::detail {

/// mn = min(x), mx = max(x) over n > 0 floats; sets `bad` if any value is NaN or infinite.
inline void min_max_run(const float* __restrict x, std::int64_t n, float& mn, float& mx, bool& bad) {
  typedef float V __attribute__((vector_size(64)));
  typedef std::int32_t VI __attribute__((vector_size(64)));
  constexpr float inf = std::numeric_limits<float>::infinity();
  V lo = V{} + inf, hi = V{} - inf;
  VI nan = VI{};
  std::int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    V v;
    std::memcpy(&v, x + i, sizeof v);
    lo = v < lo ? v : lo;
    hi = v > hi ? v : hi;
    nan |= v != v;
  }
  float a = inf, b = -inf;
  int any = 0;
  for (int l = 0; l < 16; ++l) {
    a = lo[l] < a ? lo[l] : a;
    b = hi[l] > b ? hi[l] : b;
    any |= nan[l];
  }
  for (; i < n; ++i) {
    const float v = x[i];
    a = v < a ? v : a;
    b = v > b ? v : b;
    any |= v != v;
  }
  mn = a;
  mx = b;
  bad = bad || any != 0 || a == -inf || b == inf;
}

}  // namespace qat::quant::detail
