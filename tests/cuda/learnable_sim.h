#pragma once
// Helpers of the learnable-quantizer and FP8 CUDA tests: inputs with ties, clamped values and
// specials, the CPU ops run with autograd, and the host simulation of what the CUDA kernels do
// (learnable_math.h per element, summed in the CPU's order and in the device's order).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "cuda_test_util.h"
#include "framework/tensor/random.h"
#include "framework/tensor/tensor.h"
#include "modules/quant/detail/layout.h"
#include "modules/quant/fake_quant.h"
#include "modules/quant/kernels/cuda/fp8_math.h"
#include "modules/quant/kernels/cuda/learnable_math.h"
#include "modules/quant/spec.h"

namespace qat::test {

namespace lm = quant::kernels::cuda::learnable;
constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
using quant::detail::Layout;

inline bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof(float)) == 0; }
/// Same bits, or both NaN (CUDA arithmetic returns the canonical NaN, x86 keeps the payload).
inline bool same_bits_or_nan(float a, float b) { return same_bits(a, b) || (a != a && b != b); }

inline Layout layout_of(const Shape& s, int axis) {
  return axis < 0 ? Layout::per_tensor(s) : Layout::per_channel(s, axis);
}
/// The parameter of element i.
inline std::int64_t param_of(const Layout& l, std::int64_t i) { return (i / l.inner) % l.len; }

/// x of `shape` for quantizer parameter p's grid step step[p] and representable range
/// [lo[p], hi[p]]: uniform over 1.4 times the range, every 8th value on a half step (a tie
/// when the step is a power of two), every 29th exactly at an end of the range, every 31st
/// -0; with `specials`, a few NaN and +-inf.
inline Tensor quant_input(const Shape& shape, int axis, std::uint64_t seed,
                          const std::vector<float>& step, const std::vector<float>& lo,
                          const std::vector<float>& hi, bool specials) {
  const Layout l = layout_of(shape, axis);
  Generator gen(seed);
  std::vector<float> v(static_cast<std::size_t>(shape.numel()));
  for (std::size_t i = 0; i < v.size(); ++i) {
    const std::int64_t p = param_of(l, static_cast<std::int64_t>(i));
    const double span = hi[p] - lo[p], u = gen.uniform();
    v[i] = static_cast<float>(lo[p] - 0.2 * span + 1.4 * span * u);
    if (i % 8 == 3) v[i] = (std::floor(v[i] / step[p]) + 0.5f) * step[p];
    if (i % 29 == 7) v[i] = (i % 2) ? lo[p] : hi[p];
    if (i % 31 == 11) v[i] = -0.0f;
  }
  if (specials && v.size() >= 40) {
    v[5] = std::numeric_limits<float>::quiet_NaN();
    v[17] = std::numeric_limits<float>::infinity();
    v[37] = -std::numeric_limits<float>::infinity();
  }
  return Tensor::from_vector(v, shape);
}

/// Upstream gradient: uniform in [-1, 1), every 23rd 0.
inline Tensor grad_input(const Shape& shape, std::uint64_t seed) {
  Generator gen(seed);
  std::vector<float> g(static_cast<std::size_t>(shape.numel()));
  for (std::size_t i = 0; i < g.size(); ++i)
    g[i] = i % 23 == 4 ? 0.0f : static_cast<float>(gen.uniform() * 2 - 1);
  return Tensor::from_vector(g, shape);
}

/// chunk256 (kernels/cpu/kernels.h) of the n terms at off, off + 1, ...: per 256-term chunk,
/// term j of each 16-term block added in float32 to lane j, each chunk's lanes to double lanes,
/// the 16 lanes folded l[j] += l[j + w] for w = 8, 4, 2, 1. With `factors`, the terms are the
/// products factors[i] terms[i], each added as fma(factors[i], terms[i], lane) (LSQ's A).
inline double chunk256(const std::vector<float>& terms, std::int64_t off, std::int64_t n,
                       const std::vector<float>* factors = nullptr) {
  double l[16] = {};
  for (std::int64_t c = 0; c < n; c += 256) {
    float f[16] = {};
    for (std::int64_t i = c; i < std::min(n, c + 256); ++i) {
      const std::size_t e = static_cast<std::size_t>(off + i);
      float& lane = f[(i - c) % 16];
      lane = factors != nullptr ? std::fma((*factors)[e], terms[e], lane) : lane + terms[e];
    }
    for (int j = 0; j < 16; ++j) l[j] += static_cast<double>(f[j]);
  }
  for (int w = 8; w >= 1; w /= 2)
    for (int j = 0; j < w; ++j) l[j] += l[j + w];
  return l[0];
}

/// Per-element float32 terms summed per parameter as the CPU sums amax's: chunk256 over each run
/// of Layout::for_each_run, the runs added in order; then rounded to float.
inline std::vector<float> sum_cpu_order(const std::vector<float>& terms, const Layout& l) {
  std::vector<double> acc(static_cast<std::size_t>(l.num_params), 0.0);
  l.for_each_run(
      [&](std::int64_t off, std::int64_t n, std::int64_t p) { acc[p] += chunk256(terms, off, n); });
  return std::vector<float>(acc.begin(), acc.end());
}

/// The CPU's float32 partial sums in the device's order (learnable.cu): per range, the run's
/// slots (at run position p with p % (S G) < S: the terms at p, p + S, ... (G of them, those
/// before the run's end) summed in float32 from +0), reduce_splits blocks of contiguous chunks of
/// slots, thread t summing slots t, t + 256, ... in double, the 256 sums folded as a tree; then
/// the range's partials folded the same way. Returns the per-range double sums. With `factors`,
/// products added by fma as in chunk256.
inline std::vector<double> device_sums(const std::vector<float>& terms, const Layout& l, std::int64_t S,
                                       std::int64_t G, const std::vector<float>* factors = nullptr) {
  constexpr int kThreads = 256;
  auto tree = [](double* s) {
    for (int w = kThreads / 2; w > 0; w /= 2)
      for (int t = 0; t < w; ++t) s[t] += s[t + w];
    return s[0];
  };
  const std::int64_t m = l.outer * l.inner, splits = lm::reduce_splits(m, l.len);
  const std::int64_t run_slots = (l.inner + S * G - 1) / (S * G) * S, slots = l.outer * run_slots;
  const std::int64_t chunk = (slots + splits - 1) / splits;
  auto slot = [&](std::int64_t c, std::int64_t j, float* sum) {
    const std::int64_t row = j / run_slots, q = j % run_slots, p = q / S * S * G + q % S;
    if (p >= l.inner) return false;
    *sum = 0.0f;
    for (std::int64_t k = p; k < std::min(l.inner, p + S * G); k += S) {
      const std::size_t e = static_cast<std::size_t>((row * l.len + c) * l.inner + k);
      *sum = factors != nullptr ? std::fma((*factors)[e], terms[e], *sum) : *sum + terms[e];
    }
    return true;
  };
  std::vector<double> out(static_cast<std::size_t>(l.len));
  for (std::int64_t c = 0; c < l.len; ++c) {
    std::vector<double> part(static_cast<std::size_t>(splits));
    for (std::int64_t s = 0; s < splits; ++s) {
      double acc[kThreads] = {};
      const std::int64_t begin = s * chunk, end = std::min(slots, begin + chunk);
      float sum = 0;
      for (int t = 0; t < kThreads; ++t)
        for (std::int64_t j = begin + t; j < end; j += kThreads)
          if (slot(c, j, &sum)) acc[t] += sum;
      part[s] = tree(acc);
    }
    double acc[kThreads] = {};
    for (int t = 0; t < kThreads; ++t)
      for (std::int64_t k = t; k < splits; k += kThreads) acc[t] += part[k];
    out[c] = tree(acc);
  }
  return out;
}

/// The amax gradient's terms (chunk256: S = 16, G = 16) in the device's order, as floats.
inline std::vector<float> sum_device_order(const std::vector<float>& terms, const Layout& l) {
  const std::vector<double> d = device_sums(terms, l, 16, 16);
  return std::vector<float>(d.begin(), d.end());
}

/// The CUDA LSQ kernels' results, computed on the host with learnable_math.h, and the CPU's sums
/// of the same terms (kernels/cpu/kernels.h lsq_backward): per run of Layout::for_each_run,
/// chunk256 of the inside products dx a (by fma; PyTorch's terms without their factor (1/s) gf),
/// and of the device's outside
/// terms (PyTorch's, which the CPU sums as they are); dscale += gf ((1/s) A) + B, dzp += Z.
struct LsqSim {
  std::vector<float> y, dx, ds_cpu, dz_cpu, ds_dev, dz_dev;
  double ds_abs = 0, dz_abs = 0;  // sum of |terms|: the scale of the rounding in the sums
  std::int64_t terms_differ = 0;  // a, b, z not PyTorch's terms (inside: ((a (1/s)) gf))
};

inline LsqSim simulate_lsq(const Tensor& x, const Tensor& dy, const Layout& l,
                           const std::vector<float>& scale, const std::vector<float>& zero_point,
                           std::int64_t qmin, std::int64_t qmax, double grad_factor,
                           bool truncated_zero_point) {
  const float lo = static_cast<float>(qmin), hi = static_cast<float>(qmax);
  const std::vector<float> xv = x.to_vector<float>(), g = dy.to_vector<float>();
  LsqSim r;
  r.y.resize(xv.size());
  r.dx.resize(xv.size());
  std::vector<float> a(xv.size()), b(xv.size()), z(xv.size());
  std::vector<lm::LsqGrad> consts(static_cast<std::size_t>(l.num_params));
  for (std::size_t i = 0; i < xv.size(); ++i) {
    const std::int64_t p = param_of(l, static_cast<std::int64_t>(i));
    r.y[i] = lm::lsq_forward_one(xv[i], scale[p], lm::forward_zero_point(zero_point[p], lo, hi), lo, hi);
    const float zb = truncated_zero_point ? lm::truncated_zero_point(zero_point[p], lo, hi)
                                          : lm::rounded_zero_point(zero_point[p], lo, hi);
    const lm::LsqGrad k = lm::lsq_grad_consts(scale[p], zb, lo, hi, static_cast<float>(grad_factor));
    consts[p] = k;
    r.dx[i] = lm::lsq_grad_terms(xv[i], g[i], k, &a[i], &b[i], &z[i]);
    // PyTorch's per-element terms: the scale of the rounding in the sums, and the link to a, b, z
    float ts, tz;
    const float dx = lm::lsq_grad_one(xv[i], g[i], k, &ts, &tz);
    r.ds_abs += std::fabs(ts);
    r.dz_abs += std::fabs(tz);
    const float q = std::nearbyint(std::fma(xv[i], k.inv, k.zp));
    const bool inside = q >= lo && q <= hi;
    const bool linked = inside
                            ? same_bits(ts, g[i] * a[i] * k.inv * k.gf) && b[i] == 0.0f && z[i] == 0.0f
                            : a[i] == 0.0f && same_bits(ts, b[i]) && same_bits(tz, z[i]);
    if (!same_bits(dx, r.dx[i]) || !linked) ++r.terms_differ;
  }
  std::vector<double> ds(static_cast<std::size_t>(l.num_params)), dz(ds.size());
  l.for_each_run([&](std::int64_t off, std::int64_t n, std::int64_t p) {  // lsq_combine per run
    const lm::LsqGrad& k = consts[p];
    ds[p] += static_cast<double>(k.gf) * (static_cast<double>(k.inv) * chunk256(a, off, n, &r.dx)) +
             chunk256(b, off, n);
    dz[p] += chunk256(z, off, n);
  });
  r.ds_cpu.assign(ds.begin(), ds.end());
  r.dz_cpu.assign(dz.begin(), dz.end());
  const std::vector<double> A = device_sums(a, l, 16, 16, &r.dx), B = device_sums(b, l, 16, 16),
                            Z = device_sums(z, l, 16, 16);
  for (std::int64_t c = 0; c < l.len; ++c) {  // learnable.cu LsqGradOp::finish
    const lm::LsqGrad& k = consts[c];
    r.ds_dev.push_back(
        static_cast<float>(static_cast<double>(k.gf) * (static_cast<double>(k.inv) * A[c]) + B[c]));
    r.dz_dev.push_back(static_cast<float>(Z[c]));
  }
  return r;
}

/// |a - b| within 1e-6 of |a| (the tolerance for the reduced gradients), plus 1e-12 of
/// the terms' absolute sum for sums that cancel to near zero.
inline bool grad_close(float a, float b, double abs_terms) {
  return std::fabs(static_cast<double>(a) - b) <= 1e-6 * std::fabs(a) + 1e-12 * abs_terms;
}

/// An LSQ configuration: per tensor (axis -1, the per-tensor op) or per channel along `axis`.
struct LsqCase {
  const char* name;
  Shape shape;
  int axis;
  std::int64_t qmin, qmax;
  double grad_factor;
  bool specials;                 ///< NaN and +-inf among the inputs
  std::int64_t first_param = 0;  ///< parameter p uses lsq_scale / lsq_zero_point(first_param + p)
};

/// Odd sizes, 3 and 17 channels on the first, a middle and the last axis (the CPU's row path),
/// per-channel ranges long enough for several device blocks; `large` adds 1000003 elements.
inline std::vector<LsqCase> lsq_cases(bool large) {
  std::vector<LsqCase> c{
      {"per tensor, 1 element", Shape{1}, -1, 0, 255, 1.0, false},
      {"per tensor, 7", Shape{7}, -1, 0, 255, 0.5, false},
      {"per tensor int8, 10x100, specials", Shape{10, 100}, -1, -128, 127, 1 / std::sqrt(1000.0 * 127),
       true, 1},
      {"per tensor int4, 100003, specials", Shape{100003}, -1, 0, 15, 1.0, true, 2},
      {"per channel axis 0, 3 channels", Shape{3, 11, 13}, 0, -128, 127, 0.01, false},
      {"per channel axis 1, 17 channels", Shape{5, 17, 9}, 1, 0, 255, 1.0, true},
      {"per channel last axis, 17 channels", Shape{7, 17}, 1, -8, 7, 1.0, false},
      {"per channel axis 0, 17 x 5005", Shape{17, 5, 1001}, 0, 0, 255, 0.003, true},
  };
  if (large)
    c.push_back({"per tensor, 1000003, specials", Shape{1000003}, -1, -128, 127, 1e-3, true, 6});
  return c;
}

/// Parameter p's scale: a power of two (ties exact) for even p, else an odd value.
inline float lsq_scale(std::int64_t p) {
  return p % 2 == 0 ? std::ldexp(1.0f, -2 - static_cast<int>(p % 5)) : 0.0371f * (1 + 0.13f * p);
}
/// Parameter p's zero point: halves (where round-half-even and trunc(zp + 0.5) differ), -0.4
/// (rounds to -0), out of range and fractional values.
inline float lsq_zero_point(std::int64_t p, std::int64_t qmin) {
  static const float zps[] = {2.5f, -0.4f, 3.5f, 0.0f, 7.3f, 300.0f, -2.5f, 1.5f, -130.0f};
  const float z = zps[p % 9];
  return qmin == 0 && z < 0 ? -z : z;
}

struct LsqData {
  Tensor x, dy, scale, zero_point;
  std::vector<float> s, z;
};
inline LsqData lsq_data(const LsqCase& c, std::uint64_t seed) {
  const Layout l = layout_of(c.shape, c.axis);
  LsqData d;
  std::vector<float> lo, hi;
  for (std::int64_t p = 0; p < l.num_params; ++p) {
    d.s.push_back(lsq_scale(c.first_param + p));
    d.z.push_back(lsq_zero_point(c.first_param + p, c.qmin));
    const float zr =
        std::clamp(std::nearbyint(d.z[p]), static_cast<float>(c.qmin), static_cast<float>(c.qmax));
    lo.push_back((c.qmin - zr) * d.s[p]);
    hi.push_back((c.qmax - zr) * d.s[p]);
  }
  d.x = quant_input(c.shape, c.axis, seed, d.s, lo, hi, c.specials);
  d.dy = grad_input(c.shape, seed + 1);
  d.scale = Tensor::from_vector(d.s, Shape{l.num_params});
  d.zero_point = Tensor::from_vector(d.z, Shape{l.num_params});
  return d;
}

/// The op's output and the gradients of x, scale, zero point, run on `device`.
struct Run {
  Tensor y, dx, ds, dz;
};
inline Run run_lsq(const LsqCase& c, const LsqData& d, Device device) {
  const Tensor x = leaf(d.x.to(device)), s = leaf(d.scale.to(device)), z = leaf(d.zero_point.to(device));
  const Tensor y = c.axis < 0 ? quant::fake_quantize_learnable_per_tensor_affine(x, s, z, c.qmin, c.qmax,
                                                                                 c.grad_factor)
                              : quant::fake_quantize_learnable_per_channel_affine(
                                    x, s, z, c.axis, c.qmin, c.qmax, c.grad_factor);
  y.backward(d.dy.to(device));
  return {y, x.grad(), s.grad(), z.grad()};
}

inline int axis_of(const quant::QuantSpec& spec) {
  return spec.granularity == quant::Granularity::PerChannel ? spec.axis : -1;
}

/// Learnable-amax inputs: amax per parameter a power-of-two multiple of qmax (ties exact) or an
/// odd value; x over 1.4 times [lo, amax] with ties, the ends and specials.
struct AmaxData {
  Tensor x, dy, amax;
  std::vector<float> a;
};
inline AmaxData amax_data(const quant::QuantSpec& spec, const Shape& shape, std::uint64_t seed) {
  const Layout l = Layout::of(spec, shape);
  const float qmax = static_cast<float>(spec.quant_max());
  AmaxData d;
  std::vector<float> step, lo, hi;
  for (std::int64_t p = 0; p < l.num_params; ++p) {
    d.a.push_back(p % 2 ? 1.37f + 0.21f * p : qmax * std::ldexp(1.0f, -3 - static_cast<int>(p % 3)));
    step.push_back(d.a[p] / qmax);
    lo.push_back(spec.is_signed ? -d.a[p] : 0.0f);
    hi.push_back(d.a[p]);
  }
  d.x = quant_input(shape, axis_of(spec), seed, step, lo, hi, true);
  d.dy = grad_input(shape, seed + 1);
  d.amax = Tensor::from_vector(d.a, Shape{l.num_params});
  return d;
}

/// FP8 inputs: scale per parameter a power of two or an odd value; x over 1.4 times
/// [-max s, max s] (saturating beyond), ties of the binade [s, 2 s), specials.
struct Fp8Data {
  Tensor x, scale;
  std::vector<float> s;
};
inline Fp8Data fp8_data(const quant::QuantSpec& spec, const Shape& shape, std::uint64_t seed) {
  const quant::ElementFormat f = quant::element_format(spec.format);
  const float max = static_cast<float>(f.max);
  const Layout l = Layout::of(spec, shape);
  Fp8Data d;
  std::vector<float> step, lo, hi;
  for (std::int64_t p = 0; p < l.num_params; ++p) {
    d.s.push_back(p % 2 ? 0.0131f * (1 + p) : std::ldexp(1.0f, -3 - static_cast<int>(p % 4)));
    step.push_back(d.s[p] * std::ldexp(1.0f, -f.mantissa_bits));
    lo.push_back(-max * d.s[p]);
    hi.push_back(max * d.s[p]);
  }
  d.x = quant_input(shape, axis_of(spec), seed, step, lo, hi, true);
  d.scale = Tensor::from_vector(d.s, Shape{l.num_params});
  return d;
}

// Every finite value of an FP8 format, the midpoints between neighbours and one float ulp either
// side, float32 subnormals, specials, the saturation boundary, and every 65521st bit pattern.
inline std::vector<float> fp8_probe_values(quant::Format format) {
  const quant::ElementFormat f = quant::element_format(format);
  const float max = static_cast<float>(f.max);
  std::vector<float> grid{0.0f};
  for (int e = f.min_exponent; e <= f.emax; ++e)
    for (int m = 0; m < (1 << f.mantissa_bits); ++m) {
      const float sub = std::ldexp(static_cast<float>(m), f.min_exponent - f.mantissa_bits);
      const float v = std::ldexp(1.0f + std::ldexp(static_cast<float>(m), -f.mantissa_bits), e);
      if (e == f.min_exponent) grid.push_back(sub);
      if (v <= max) grid.push_back(v);
    }
  grid.push_back(max + std::ldexp(1.0f, f.emax - f.mantissa_bits));  // one step above max
  std::vector<float> v;
  for (std::size_t i = 0; i < grid.size(); ++i) {
    v.push_back(grid[i]);
    if (i + 1 < grid.size()) {
      const float mid = 0.5f * (grid[i] + grid[i + 1]);
      v.insert(v.end(), {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, kInf)});
    }
  }
  for (float s : {std::numeric_limits<float>::denorm_min(), std::numeric_limits<float>::min(),
                  std::nextafter(std::numeric_limits<float>::min(), 0.0f),
                  std::numeric_limits<float>::max(), max, std::nextafter(max, kInf), kInf, kNaN})
    v.push_back(s);
  for (std::uint64_t b = 0; b < (std::uint64_t{1} << 32); b += 65521)
    v.push_back(quant::kernels::cuda::fp8::float_of(static_cast<std::uint32_t>(b)));
  const std::size_t n = v.size();
  for (std::size_t i = 0; i < n; ++i) v.push_back(-v[i]);
  return v;
}

}  // namespace qat::test
