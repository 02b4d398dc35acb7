// The blocked int8 GEMM (modules/quant/kernels/cpu/int8_gemm.cpp) against the scalar reference
// (linear_u8s8_reference / gemm_u8s8_cols_reference), bit for bit, on every CPU path: odd sizes,
// input zero points 0 / 128 / 255, the float output stage with multipliers across binades, exact
// ties (half to even), saturation both ways and large biases, a fused ReLU clamp, strided operands,
// thread counts, narrow (7-bit) inputs read as int8 quads on every path (their steps in pairs
// where the weights allow: checked at the bound), and the QuantizedConv2d /
// QuantizedLinear layers against the reference im2col.
#include <algorithm>
#include <array>
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "common/isa.h"
#include "framework/tensor/parallel.h"
#include "modules/quant/int8_kernels.h"
#include "modules/quant/kernels/cpu/int8_gemm.h"
#include "modules/quant/kernels/cpu/int8_ops.h"
#include "modules/quant/quantized_layers.h"

using namespace qat;
using namespace qat::quant;
using qat::test::for_each_int8_isa;

namespace {
using U8 = std::vector<std::uint8_t>;

struct Problem {
  std::int64_t N, K, O;
  std::int32_t zx;
  U8 x;
  std::vector<std::int8_t> w;
  std::vector<std::int32_t> sums;
  std::vector<float> scale, bias;
  int8::Requant rq;
};

// The output stage y = clamp(round((acc scale + bias) inv), lo, hi) + zp per kind. 0: scale inv
// in [2^-20, 1), biases of a few hundred codes; 1: saturation both ways (scale inv up to 2^4,
// biases of +-1000 codes); 2: extreme operands (x 255, w -128 / 127) with a tiny multiplier;
// 3: exact ties (scale inv = 1/2 or 1/4, integer biases), rounded half to even.
Problem make(std::int64_t N, std::int64_t K, std::int64_t O, std::int32_t zx, int kind, bool relu,
             std::uint32_t seed) {
  std::mt19937 gen(seed);
  auto uni = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(gen); };
  auto real = [&](double lo, double hi) { return std::uniform_real_distribution<double>(lo, hi)(gen); };
  Problem p{N, K, O, zx, U8(N * K), std::vector<std::int8_t>(O * K), {}, {}, {}, {}};
  for (auto& v : p.x) v = static_cast<std::uint8_t>(kind == 2 ? (uni(0, 3) ? 255 : 0) : uni(0, 255));
  for (auto& v : p.w)
    v = static_cast<std::int8_t>(kind == 2 ? (uni(0, 1) ? 127 : -128) : uni(-128, 127));
  const float out_scale = static_cast<float>(std::ldexp(real(0.5, 1), -uni(0, 8)));
  for (std::int64_t o = 0; o < O; ++o) {
    std::int32_t s = 0;
    for (std::int64_t k = 0; k < K; ++k) s += p.w[o * K + k];
    p.sums.push_back(s);
    double m = 0, b = 0;  // multiplier scale / out_scale and bias in output codes
    if (kind == 0) m = std::ldexp(real(0.5, 1), -uni(1, 20)), b = real(-300, 300);
    if (kind == 1) m = std::ldexp(real(0.5, 1), uni(-8, 4)), b = real(-1000, 1000);
    if (kind == 2) m = std::ldexp(real(0.5, 1), -uni(20, 24)), b = real(-5, 5);
    if (kind == 3) m = uni(0, 1) ? 0.5 : 0.25, b = uni(-50, 50);
    p.scale.push_back(static_cast<float>(m * out_scale));
    p.bias.push_back(static_cast<float>(b * out_scale));
  }
  const std::int32_t zp = uni(0, 255), hi = uni(zp, 255), lo = relu ? zp : uni(0, zp);
  p.rq = {p.scale.data(), p.bias.data(), 1.0f / out_scale, zp, lo, hi};
  return p;
}

// Weights as a trained layer's (normal, sigma codes, clipped to int8) in place of make()'s uniform
// ones: small enough that the narrow kernel takes most steps in pairs (kPairedStepBound).
void trained_weights(Problem& p, double sigma, std::uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<double> normal(0.0, sigma);
  for (auto& v : p.w) v = static_cast<std::int8_t>(std::clamp(std::lround(normal(gen)), -128L, 127L));
  for (std::int64_t o = 0; o < p.O; ++o) {
    p.sums[o] = 0;
    for (std::int64_t k = 0; k < p.K; ++k) p.sums[o] += p.w[o * p.K + k];
  }
}

U8 reference(const Problem& p) {
  U8 y(p.N * p.O);
  int8::linear_u8s8_reference(p.x.data(), p.N, p.K, p.zx, p.w.data(), p.sums.data(), p.O, p.rq,
                              y.data());
  return y;
}

// (N, A, B, C) -> (N, B, C, A) when to_last, else (N, B, C, A) -> (N, A, B, C) (dims of the
// result given as the NCHW shape s): NCHW <-> NHWC, keeping the quantization.
Tensor relayout(const Tensor& x, const Shape& s, bool to_last) {
  const std::int64_t N = s[0], C = s[1], HW = s[2] * s[3];
  Tensor y = Tensor::empty(to_last ? Shape{N, s[2], s[3], C} : s, DType::UInt8);
  for (std::int64_t n = 0; n < N; ++n)
    for (std::int64_t c = 0; c < C; ++c)
      for (std::int64_t r = 0; r < HW; ++r) {
        const std::int64_t a = (n * C + c) * HW + r, b = (n * HW + r) * C + c;
        y.data<std::uint8_t>()[to_last ? b : a] = x.data<std::uint8_t>()[to_last ? a : b];
      }
  y.set_quant_info(x.quant_info());
  return y;
}

std::int64_t mismatches(const U8& a, const U8& b) {
  std::int64_t n = 0;
  for (std::size_t i = 0; i < a.size(); ++i) n += a[i] != b[i];
  return n;
}
}  // namespace

BOOST_AUTO_TEST_SUITE(int8_kernels)

BOOST_AUTO_TEST_CASE(reference_stage_by_hand) {
  // y = clamp(round_half_even((acc scale + bias) inv), lo - zp, hi - zp) + zp, by hand
  const float scale[] = {0.5f, 1e30f}, bias[] = {0.25f, 0.0f};
  const int8::Requant rq{scale, bias, 2.0f, 100, 3, 250};
  BOOST_TEST(int(int8::requantize(3, rq, 0)) == 104);         // (1.5 + 0.25) 2 = 3.5 -> 4 (even)
  BOOST_TEST(int(int8::requantize(1, rq, 0)) == 102);         // (0.5 + 0.25) 2 = 1.5 -> 2
  BOOST_TEST(int(int8::requantize(-2, rq, 0)) == 98);         // (-1 + 0.25) 2 = -1.5 -> -2 (even)
  BOOST_TEST(int(int8::requantize(-1, rq, 0)) == 100);        // (-0.5 + 0.25) 2 = -0.5 -> 0 (even)
  BOOST_TEST(int(int8::requantize(1 << 20, rq, 1)) == 250);   // saturates at hi, never wraps
  BOOST_TEST(int(int8::requantize(-(1 << 20), rq, 1)) == 3);  // and at lo
  const float nan_bias[] = {std::nanf(""), 0.0f};
  const int8::Requant bad{scale, nan_bias, 2.0f, 100, 3, 250};
  BOOST_TEST(int(int8::requantize(5, bad, 0)) == 3);  // NaN maps to lo
  BOOST_TEST(int8::multiply_by_quantized_multiplier(3, {1 << 30, 40}) == INT32_MAX);
  BOOST_TEST(int8::multiply_by_quantized_multiplier(0, {1 << 30, 40}) == 0);
  BOOST_TEST(int8::multiply_by_quantized_multiplier(-3, {1 << 30, 40}) == INT32_MIN);
  BOOST_TEST(int8::multiply_by_quantized_multiplier(1, {1 << 30, 31}) == (1 << 30));
  BOOST_TEST(int8::multiply_by_quantized_multiplier(2, {1 << 30, 31}) == INT32_MAX);
}

BOOST_AUTO_TEST_CASE(linear_matches_reference_on_every_path) {
  // K around the groups of 4 k of Winograd's form (K % 4 = 0, 1, 2, 3), rows odd and even
  const std::int64_t sizes[][3] = {{1, 1, 1},     {3, 3, 3},    {17, 31, 33},  {33, 17, 31},
                                   {31, 33, 17},  {1, 69, 16},  {25, 784, 69}, {64, 256, 128},
                                   {7, 1568, 10}, {50, 28, 16}, {9, 5, 32},    {2, 400, 47},
                                   {5, 2, 19},    {3, 30, 40},  {27, 198, 33}, {26, 6, 16}};
  std::uint32_t seed = 1;
  for (const auto& s : sizes)
    for (const std::int32_t zx : {0, 128, 255})
      for (int kind = 0; kind < 4; ++kind) {
        const bool relu = (seed % 2) == 0;
        const Problem p = make(s[0], s[1], s[2], zx, kind, relu, seed++);
        const U8 want = reference(p);
        for_each_int8_isa([&](cpu::Isa) {
          BOOST_TEST_CONTEXT("N " << p.N << " K " << p.K << " O " << p.O << " zx " << zx << " kind "
                                  << kind) {
            U8 got(p.N * p.O);
            int8::linear_u8s8(p.x.data(), p.N, p.K, zx, p.w.data(), p.sums.data(), p.O, p.rq,
                              got.data());
            BOOST_TEST(mismatches(got, want) == 0);
          }
        });
      }
}

// On AVX2 without VNNI, pack_weights takes Winograd's form (int8_gemm.h), whose correction
// terms rho and gamma must cancel exactly: extreme operands (a in {0, 255}, w in {-128, 127},
// zero points 0 and 255) in patterns over the positions of the groups of 4 k, K % 4 = 0..3,
// one row at a time with an output stage that maps the exact sum to 100 (scale 1, bias 100 -
// sum): any error in the int32 sum moves the output. Implicit GEMMs refuse the form; packed
// weights are 64-byte aligned.
BOOST_AUTO_TEST_CASE(winograd_form_is_exact_at_the_extremes) {
  for_each_int8_isa([&](cpu::Isa isa) {
    const std::int8_t w1 = 1;
    const int8::PackedWeights one = int8::pack_weights(&w1, 1, 1);
    BOOST_TEST((one.format == static_cast<int>(int8::kernels::PackFormat::Winograd)) ==
               (isa == cpu::Isa::AVX2));
    // the kernels' weight loads stay within cache lines (AlignedVector)
    BOOST_TEST(reinterpret_cast<std::uintptr_t>(one.data.data()) % 64 == 0u);
    const std::int64_t O = 19;
    for (const std::int64_t K : {1, 2, 3, 4, 7, 8, 13, 64})
      for (const std::int32_t zx : {0, 255})
        for (int pattern = 0; pattern < 6; ++pattern) {
          U8 x(K);
          std::vector<std::int8_t> w(O * K);
          for (std::int64_t k = 0; k < K; ++k)
            x[k] = pattern == 0 || (k * 7 + pattern) % 3 != 0 ? 255 : 0;
          for (std::int64_t i = 0; i < O * K; ++i)
            w[i] = pattern == 1 || (i * 5 + pattern) % 4 != 0 ? -128 : 127;
          std::vector<float> scale(O, 1.0f), bias(O);
          for (std::int64_t o = 0; o < O; ++o) {
            std::int64_t sum = 0;
            for (std::int64_t k = 0; k < K; ++k) sum += (x[k] - zx) * w[o * K + k];
            bias[o] = static_cast<float>(100 - sum);  // |sum| <= 64 * 255 * 128: exact in float
          }
          const int8::Requant rq{scale.data(), bias.data(), 1.0f, 0, 0, 255};
          const int8::PackedWeights pw = int8::pack_weights(w.data(), O, K);
          U8 y(O, 0);
          int8::gemm_u8s8_packed(x.data(), 1, K, zx, pw, rq, y.data(), O);
          BOOST_TEST(std::count(y.begin(), y.end(), 100) == O,
                     "K " << K << " zx " << zx << " pattern " << pattern);
          if (pw.format == static_cast<int>(int8::kernels::PackFormat::Winograd)) {
            const std::int64_t off[] = {0}, rows[] = {0};
            BOOST_CHECK_THROW(int8::gemm_u8s8_implicit(x.data(), 1, rows, off, zx, pw, rq, y.data(), O),
                              Error);
          }
        }
  });
}

BOOST_AUTO_TEST_CASE(strided_operands_threads_and_no_bias) {
  Problem p = make(61, 45, 37, 3, 0, false, 77);
  p.rq.bias = nullptr;
  U8 want(p.N * p.O);
  int8::linear_u8s8_reference(p.x.data(), p.N, p.K, p.zx, p.w.data(), p.sums.data(), p.O, p.rq,
                              want.data());
  const std::int64_t ldx = p.K + 7, ldy = p.O + 5;
  U8 xs(p.N * ldx, 0xAB);
  for (std::int64_t n = 0; n < p.N; ++n) std::copy_n(&p.x[n * p.K], p.K, &xs[n * ldx]);
  const int threads = get_num_threads();
  for_each_int8_isa([&](cpu::Isa) {
    const int8::PackedWeights w = int8::pack_weights(p.w.data(), p.O, p.K);
    BOOST_TEST(w.usable());
    for (int t : {1, 2, 3}) {
      set_num_threads(t);
      for (const std::int64_t M : {p.N, std::int64_t{2}}) {  // rows split, or channel blocks split
        U8 ys(M * ldy, 0xCD);
        int8::gemm_u8s8_packed(xs.data(), M, ldx, p.zx, w, p.rq, ys.data(), ldy);
        std::int64_t bad = 0;
        for (std::int64_t n = 0; n < M; ++n) {
          for (std::int64_t o = 0; o < p.O; ++o) bad += ys[n * ldy + o] != want[n * p.O + o];
          for (std::int64_t o = p.O; o < ldy; ++o) bad += ys[n * ldy + o] != 0xCD;  // untouched
        }
        BOOST_TEST(bad == 0, "threads " << t << " rows " << M);
      }
    }
  });
  set_num_threads(threads);
}

// linear_u8s8_rows (a few rows against the weights as stored, dot products of rows) against the
// reference on every path: row counts past a tile's 4, K around each vector's 16 / 32 int8 (the
// last weight row's final vector from a padded copy), O around each tile width (8, 6, 4, 3, 2
// and 1), every output stage kind, strided x and y (y's padding untouched), thread counts.
BOOST_AUTO_TEST_CASE(rows_match_reference_on_every_path) {
  std::uint32_t seed = 500;
  const int threads = get_num_threads();
  for (const std::int64_t M : {1, 2, 3, 5})
    for (const std::int64_t K : {1, 15, 16, 17, 31, 32, 33, 63, 784})
      for (const std::int64_t O : {1, 2, 3, 5, 7, 9, 17, 70}) {
        const std::int32_t zx = std::array<std::int32_t, 3>{0, 128, 255}[seed % 3];
        const int kind = static_cast<int>(seed % 4);
        const Problem p = make(M, K, O, zx, kind, seed % 5 == 0, seed);
        ++seed;
        const U8 want = reference(p);
        const std::int64_t ldx = K + (seed % 2) * 3, ldy = O + (seed % 3);
        U8 xs(M * ldx, 0xAB);
        for (std::int64_t m = 0; m < M; ++m) std::copy_n(&p.x[m * K], K, &xs[m * ldx]);
        for_each_int8_isa([&](cpu::Isa) {
          U8 ys(M * ldy, 0xCD);
          int8::linear_u8s8_rows(xs.data(), M, ldx, zx, p.w.data(), O, K, p.rq, ys.data(), ldy);
          std::int64_t bad = 0, pad = 0;
          for (std::int64_t m = 0; m < M; ++m) {
            for (std::int64_t o = 0; o < O; ++o) bad += ys[m * ldy + o] != want[m * O + o];
            for (std::int64_t o = O; o < ldy; ++o) pad += ys[m * ldy + o] != 0xCD;
          }
          BOOST_TEST(bad == 0,
                     "M " << M << " K " << K << " O " << O << " zx " << zx << " kind " << kind);
          BOOST_TEST(pad == 0, "M " << M << " K " << K << " O " << O << ": padding written");
        });
      }
  // large enough for threads (blocks of 64 outputs), K not a multiple of any vector
  const Problem p = make(2, 1001, 1100, 7, 0, true, 99);
  const U8 want = reference(p);
  for_each_int8_isa([&](cpu::Isa) {
    for (const int t : {1, 2, 3}) {
      set_num_threads(t);
      U8 got(p.N * p.O);
      int8::linear_u8s8_rows(p.x.data(), p.N, p.K, p.zx, p.w.data(), p.O, p.K, p.rq, got.data(), p.O);
      BOOST_TEST(mismatches(got, want) == 0, "threads " << t);
    }
  });
  set_num_threads(threads);
  U8 y(1);
  BOOST_CHECK_THROW(int8::linear_u8s8_rows(p.x.data(), 1, 0, 0, p.w.data(), 1, 0, p.rq, y.data(), 1),
                    Error);
  BOOST_CHECK_THROW(int8::linear_u8s8_rows(p.x.data(), 1, 5, 256, p.w.data(), 1, 5, p.rq, y.data(), 1),
                    Error);
}

// QuantizedLinear on one or two samples (linear_u8s8_rows) gives the bytes of the same rows in a
// batch of 64 (the packed GEMM) and of the reference, also for a channels-last input, and sees
// new weights written into its buffer (as a checkpoint load does) on both paths.
BOOST_AUTO_TEST_CASE(linear_layer_small_batches_match_the_packed_gemm) {
  std::mt19937 gen(21);
  const std::int64_t C = 4, HW = 49, K = C * HW, O = 37, N = 64;
  Tensor wq = Tensor::empty(Shape{O, K}, DType::Int8);
  for (std::int64_t i = 0; i < wq.numel(); ++i)
    wq.data<std::int8_t>()[i] =
        static_cast<std::int8_t>(std::uniform_int_distribution<int>(-128, 127)(gen));
  Tensor ws = Tensor::empty(Shape{O}, DType::Float32), b = Tensor::empty(Shape{O}, DType::Float32);
  for (std::int64_t o = 0; o < O; ++o) {
    ws.data<float>()[o] = std::uniform_real_distribution<float>(0.001f, 0.004f)(gen);
    b.data<float>()[o] = std::uniform_real_distribution<float>(-2.0f, 2.0f)(gen);
  }
  const QuantInfo in{0.05, 7};
  QuantizedLinear layer(wq, ws, b, in, ActivationQuant{QuantInfo{0.2, 100}, 0, 255}, true);
  Tensor x = Tensor::empty(Shape{N, K}, DType::UInt8);
  for (std::int64_t i = 0; i < x.numel(); ++i)
    x.data<std::uint8_t>()[i] =
        static_cast<std::uint8_t>(std::uniform_int_distribution<int>(0, 255)(gen));
  x.set_quant_info(in);
  auto rows = [&](const Tensor& t, std::int64_t m) {
    Tensor r = Tensor::empty(Shape{m, K}, DType::UInt8);
    std::copy_n(t.data<std::uint8_t>(), m * K, r.data<std::uint8_t>());
    r.set_quant_info(t.quant_info());
    return r;
  };
  auto bytes = [](const Tensor& t) {
    return U8(t.data<std::uint8_t>(), t.data<std::uint8_t>() + t.numel());
  };
  for (int round = 0; round < 2; ++round) {
    for_each_int8_isa([&](cpu::Isa) {
      const U8 full = bytes(layer.forward(x));
      // the reference from the layer's buffers
      std::vector<std::int32_t> sums(O, 0);
      for (std::int64_t o = 0; o < O; ++o)
        for (std::int64_t k = 0; k < K; ++k) sums[o] += layer.weight().data<std::int8_t>()[o * K + k];
      std::vector<float> scales(O);
      for (std::int64_t o = 0; o < O; ++o)
        scales[o] = static_cast<float>(in.scale) * ws.data<float>()[o];
      const int8::Requant rq{scales.data(), b.data<float>(), 1.0f / 0.2f, 100, 100, 255};
      U8 want(N * O);
      int8::linear_u8s8_reference(x.data<std::uint8_t>(), N, K, in.zero_point,
                                  layer.weight().data<std::int8_t>(), sums.data(), O, rq, want.data());
      BOOST_TEST(mismatches(full, want) == 0, "batch 64, round " << round);
      for (const std::int64_t m : {1, 2}) {
        const U8 got = bytes(layer.forward(rows(x, m)));
        BOOST_TEST(mismatches(got, U8(want.begin(), want.begin() + m * O)) == 0,
                   "batch " << m << ", round " << round);
      }
      // channels-last input: x's (C, HW) columns as (HW, C)
      Tensor xl = Tensor::empty(Shape{N, K}, DType::UInt8);
      for (std::int64_t n = 0; n < N; ++n)
        for (std::int64_t c = 0; c < C; ++c)
          for (std::int64_t r = 0; r < HW; ++r)
            xl.data<std::uint8_t>()[n * K + r * C + c] = x.data<std::uint8_t>()[n * K + c * HW + r];
      xl.set_quant_info(in);
      layer.set_input_channels_last(C);
      BOOST_TEST(mismatches(bytes(layer.forward(xl)), want) == 0, "channels-last batch 64");
      for (const std::int64_t m : {1, 2})
        BOOST_TEST(
            mismatches(bytes(layer.forward(rows(xl, m))), U8(want.begin(), want.begin() + m * O)) == 0,
            "channels-last batch " << m);
      layer.set_input_channels_last(0);
    });
    // new values into the same buffer (-w - 1 keeps the full range), as a checkpoint load does
    Tensor buffer = layer.weight();
    for (std::int64_t i = 0; i < buffer.numel(); ++i)
      buffer.data<std::int8_t>()[i] = static_cast<std::int8_t>(~buffer.data<std::int8_t>()[i]);
  }
}

// Narrow packings (inputs in [0, 127]: int8 quads on every path, vpmaddubsw on AVX2 / AVX-512)
// at the extremes: x 127 against w -128 pairs reach -32512, one step from int16 saturation.
BOOST_AUTO_TEST_CASE(narrow_inputs_match_reference_on_every_path) {
  const std::int64_t sizes[][3] = {{1, 1, 1},   {3, 3, 3},     {17, 31, 33},   {33, 17, 31},
                                   {1, 69, 16}, {25, 784, 69}, {64, 256, 128}, {7, 1568, 10},
                                   {9, 5, 32},  {2, 400, 47}};
  std::uint32_t seed = 500;
  for (const auto& s : sizes)
    for (const std::int32_t zx : {0, 64, 127, 200})
      for (int kind = 0; kind < 4; ++kind) {
        const bool relu = (seed % 2) == 0;
        Problem p = make(s[0], s[1], s[2], zx, kind, relu, seed++);
        for (auto& v : p.x) v = static_cast<std::uint8_t>(kind == 2 ? (v ? 127 : 0) : v / 2);
        if (seed % 2 == 0) trained_weights(p, kind == 2 ? 60 : 30, seed);  // (paired steps)
        const U8 want = reference(p);
        for_each_int8_isa([&](cpu::Isa) {
          BOOST_TEST_CONTEXT("N " << p.N << " K " << p.K << " O " << p.O << " zx " << zx << " kind "
                                  << kind) {
            const int8::PackedWeights w = int8::pack_weights(p.w.data(), p.O, p.K, true);
            BOOST_TEST(w.usable());
            BOOST_TEST(w.format == static_cast<int>(int8::kernels::PackFormat::Quads));
            BOOST_TEST(int8::activation_bytes(true) == 1);
            U8 got(p.N * p.O);
            int8::gemm_u8s8_packed(p.x.data(), p.N, p.K, zx, w, p.rq, got.data(), p.O);
            BOOST_TEST(mismatches(got, want) == 0);
            U8 auto_got(p.N * p.O);  // linear_u8s8 packs narrow for this x by itself
            int8::linear_u8s8(p.x.data(), p.N, p.K, zx, p.w.data(), p.sums.data(), p.O, p.rq,
                              auto_got.data());
            BOOST_TEST(mismatches(auto_got, want) == 0);
          }
        });
      }
}

// A narrow packing reads any input: where it relies on [0, 127] (AVX2, AVX-512: vpmaddubsw
// would saturate) the kernel multiplies min(x, 127) and adds the excess of the quads with a byte
// above 127; elsewhere (VNNI, generic) quads are exact as they are. Bit for bit with the
// reference at every density of such bytes, from one to all, on odd sizes (K % 4 != 0: a
// partial last quad), with the extremes: x 255 against w -128 gives an excess pair sum of
// exactly -32768, and x 255 against w 127 the largest positive one.
BOOST_AUTO_TEST_CASE(narrow_packing_adds_the_excess_of_wide_inputs) {
  const std::int64_t sizes[][3] = {{1, 1, 1},     {3, 3, 3},  {17, 31, 33}, {33, 17, 31}, {25, 784, 69},
                                   {7, 1568, 10}, {9, 5, 32}, {2, 401, 47}, {30, 64, 16}};
  std::uint32_t seed = 900;
  std::mt19937 gen(77);
  for (const auto& s : sizes)
    for (const double density : {0.0, 0.001, 0.02, 0.3, 1.0})
      for (int kind = 0; kind < 4; ++kind) {
        const std::int32_t zx = static_cast<std::int32_t>(seed % 3) * 100;
        const bool relu = (seed % 2) == 0;
        Problem p = make(s[0], s[1], s[2], zx, kind, relu, seed++);
        std::bernoulli_distribution wide(density);
        for (auto& v : p.x) {
          const int lo = wide(gen) ? 128 : 0;
          v = static_cast<std::uint8_t>(kind == 2 ? (v ? lo + 127 : lo) : lo + v / 2);
        }
        if (density == 0.0) p.x[p.x.size() / 2] = 128;  // just one, of the smallest excess
        if (seed % 2 == 0) trained_weights(p, 30, seed);  // (paired steps)
        const U8 want = reference(p);
        for_each_int8_isa([&](cpu::Isa isa) {
          BOOST_TEST_CONTEXT("N " << p.N << " K " << p.K << " O " << p.O << " density " << density
                                  << " kind " << kind << " path " << cpu::isa_name(isa)) {
            const int8::PackedWeights w = int8::pack_weights(p.w.data(), p.O, p.K, true);
            BOOST_TEST(w.narrow == (isa == cpu::Isa::AVX2 || isa == cpu::Isa::AVX512));
            for (int t : {1, 2}) {
              const int threads = get_num_threads();
              set_num_threads(t);
              U8 got(p.N * p.O);
              int8::gemm_u8s8_packed(p.x.data(), p.N, p.K, zx, w, p.rq, got.data(), p.O);
              set_num_threads(threads);
              BOOST_TEST(mismatches(got, want) == 0, "threads " << t);
            }
            U8 auto_got(p.N * p.O);  // linear_u8s8 picks pairs or quads for this x by itself
            int8::linear_u8s8(p.x.data(), p.N, p.K, zx, p.w.data(), p.sums.data(), p.O, p.rq,
                              auto_got.data());
            BOOST_TEST(mismatches(auto_got, want) == 0);
          }
        });
      }
}

// excess_taps against a brute-force search: a 3 x 3 convolution's rows (stride 1 and 2) over a
// padded image of 5-byte pixels, one run per kernel row; every byte of the image read by row m
// through run p at place d has exactly one tap {m, p piece_steps, d - its byte in the pixel} in
// its pixel's list, and no other taps exist. Misplaced rows, and row offsets that do not repeat
// per image, are refused.
BOOST_AUTO_TEST_CASE(excess_taps_place_every_read_pixel) {
  const std::int64_t C = 5, Hp = 7, Wp = 8, img = Hp * Wp * C, k = 3, L = k * C, psteps = (L + 3) / 4;
  for (const std::int64_t stride : {1, 2}) {
    const std::int64_t Ho = (Hp - k) / stride + 1, Wo = (Wp - k) / stride + 1, rows = Ho * Wo;
    std::vector<std::int64_t> row_off, piece_off;
    for (std::int64_t oh = 0; oh < Ho; ++oh)
      for (std::int64_t ow = 0; ow < Wo; ++ow) row_off.push_back((oh * stride * Wp + ow * stride) * C);
    for (std::int64_t r = 0; r < k; ++r) piece_off.push_back(r * Wp * C);
    const int8::ExcessTaps t =
        int8::excess_taps(row_off.data(), rows, img, piece_off.data(), k, L, psteps, C);
    BOOST_TEST(t.begin.size() == static_cast<std::size_t>(Hp * Wp + 1));
    std::int64_t found = 0, most = 0;
    for (std::int64_t u = 0; u < Hp * Wp; ++u) most = std::max(most, t.begin[u + 1] - t.begin[u]);
    BOOST_TEST(t.most == most);
    for (std::int64_t q = 0; q < img; q += C)  // each pixel's first byte
      for (std::int64_t m = 0; m < rows; ++m)
        for (std::int64_t p = 0; p < k; ++p) {
          const std::int64_t d = q - row_off[m] - piece_off[p];
          if (d < 0 || d >= L) continue;
          ++found;
          std::int64_t hits = 0;
          for (std::int64_t j = t.begin[q / C]; j < t.begin[q / C + 1]; ++j)
            hits += t.tap[j].row == m && t.tap[j].step == p * psteps && t.tap[j].place == d;
          BOOST_TEST(hits == 1,
                     "stride " << stride << " pixel " << q / C << " row " << m << " run " << p);
        }
    BOOST_TEST(found == static_cast<std::int64_t>(t.tap.size()));
    BOOST_TEST(found == rows * k * k);
    // a row that starts inside a pixel, a run past the image
    std::vector<std::int64_t> bad = row_off;
    bad[1] += 1;
    BOOST_CHECK_THROW(int8::excess_taps(bad.data(), rows, img, piece_off.data(), k, L, psteps, C),
                      Error);
    BOOST_CHECK_THROW(
        int8::excess_taps(row_off.data(), rows, img - Wp * C, piece_off.data(), k, L, psteps, C), Error);
    // gemm_u8s8_implicit checks that the rows repeat per image as the taps say (on the paths
    // that read an excess: a native quads packing has none)
    for_each_int8_isa([&](cpu::Isa) {
      const std::int64_t O = 3;
      std::vector<std::int8_t> w(O * k * L);
      for (std::size_t i = 0; i < w.size(); ++i) w[i] = static_cast<std::int8_t>(i * 7 % 255 - 127);
      const int8::PackedWeights pw = int8::pack_weights_pieces(w.data(), O, k, L, true);
      if (!pw.narrow) return;
      std::vector<std::int64_t> two = row_off;
      for (std::int64_t m = 0; m < rows; ++m) two.push_back(row_off[m] + img + (m == 2 ? C : 0));
      U8 x(2 * img + 64), xn(x.size()), y(2 * rows * O);
      for (std::size_t i = 0; i < x.size(); ++i)  // a third above 127
        x[i] = static_cast<std::uint8_t>(i * 37 % 256 < 170 ? i * 37 % 128 : 128 + i % 128),
        xn[i] = std::min<std::uint8_t>(x[i], 127);
      std::vector<float> scale(O, 0.002f);
      const int8::Requant rq{scale.data(), nullptr, 1.0f, 0, 0, 255};
      BOOST_CHECK_THROW(int8::gemm_u8s8_implicit(x.data(), 2 * rows, two.data(), piece_off.data(), 0, pw,
                                                 rq, y.data(), O, xn.data(), nullptr, &t),
                        Error);
      two[rows + 2] -= C;  // now they repeat: the same bytes as without the taps
      U8 want(2 * rows * O);
      int8::gemm_u8s8_implicit(x.data(), 2 * rows, two.data(), piece_off.data(), 0, pw, rq, want.data(),
                               O, xn.data());
      int8::gemm_u8s8_implicit(x.data(), 2 * rows, two.data(), piece_off.data(), 0, pw, rq, y.data(), O,
                               xn.data(), nullptr, &t);
      BOOST_TEST(mismatches(y, want) == 0);
    });
  }
}

// The narrow kernel's step order (pair_schedule): a permutation of the steps per group of
// blocks, and every pair it takes at once within kPairedStepBound on every int16 lane, checked
// against the unpacked weights (step s, pair j of channel o: k = 4 s + 2 j, 4 s + 2 j + 1); on
// weights like a trained layer's it pairs nearly every step.
BOOST_AUTO_TEST_CASE(paired_steps_stay_within_int16) {
  std::uint32_t seed = 40;
  for_each_int8_isa([&](cpu::Isa) {
    if (!int8::narrow_is_faster()) return;
    for (const std::int64_t O : {1, 16, 17, 40})
      for (const std::int64_t K : {1, 8, 9, 401, 784})
        for (const double sigma : {0.0, 20.0, 35.0, 70.0}) {  // 0: uniform int8
          Problem p = make(1, K, O, 0, 0, false, seed++);
          if (sigma > 0) trained_weights(p, sigma, seed);
          const int8::PackedWeights w = int8::pack_weights(p.w.data(), O, K, true);
          BOOST_TEST_CONTEXT("O " << O << " K " << K << " sigma " << sigma) {
            BOOST_TEST(w.group == int8::kernels::sched_group());
            const std::int64_t blocks = (O + 15) / 16, groups = (blocks + w.group - 1) / w.group;
            BOOST_TEST(w.sched.size() == static_cast<std::size_t>(groups * w.steps));
            std::int64_t pairs = 0;
            for (std::int64_t g = 0; g < groups; ++g) {
              const std::int32_t* order = w.sched.data() + g * w.steps;
              std::vector<std::int32_t> sorted(order, order + w.steps);
              std::sort(sorted.begin(), sorted.end());
              for (std::int64_t s = 0; s < w.steps; ++s) BOOST_TEST(sorted[s] == s);
              const std::int64_t np = w.sched_pairs[g];
              BOOST_TEST(2 * np <= w.steps);
              pairs += np;
              for (std::int64_t t = 0; t < np; ++t)
                for (std::int64_t o = g * w.group * 16; o < std::min(O, (g + 1) * w.group * 16); ++o)
                  for (int j = 0; j < 2; ++j) {
                    int pos = 0, neg = 0;
                    for (const std::int32_t st : {order[2 * t], order[2 * t + 1]})
                      for (std::int64_t k = 4 * st + 2 * j;
                           k < std::min<std::int64_t>(K, 4 * st + 2 * j + 2); ++k)
                        (p.w[o * K + k] > 0 ? pos : neg) += std::abs(p.w[o * K + k]);
                    BOOST_TEST((pos <= 258 && neg <= 258), "pair " << t << " channel " << o);
                  }
            }
            if (sigma == 20.0 && w.steps >= 2) BOOST_TEST(pairs * 2 >= groups * (w.steps - 1));
          }
        }
  });
}

// The bound is tight: with every input 127, a pair reaching 127 * 258 = 32766 (or -32766) is
// taken and exact; one more unit of weight would wrap the int16 sum, so that step stays single.
// Lanes are separate (j = 0 of one step with j = 1 of the other), signs separate.
BOOST_AUTO_TEST_CASE(paired_steps_at_the_bound) {
  struct Case {
    std::vector<int> w;  // O = 1, K = 8: two steps
    std::int64_t pairs;
  };
  const Case cases[] = {{{127, 127, 0, 0, 4, 0, 0, 0}, 1},     {{127, 127, 0, 0, 5, 0, 0, 0}, 0},
                        {{-128, -128, 0, 0, -2, 0, 0, 0}, 1},  {{-128, -128, 0, 0, 0, -3, 0, 0}, 0},
                        {{127, 127, 0, 0, 0, 0, 127, 127}, 1}, {{127, 127, 0, 0, -128, -128, 0, 0}, 1},
                        {{0, 0, 100, 100, 0, 0, 30, 28}, 1},   {{0, 0, 100, 100, 0, 0, 30, 29}, 0}};
  for_each_int8_isa([&](cpu::Isa) {
    if (!int8::narrow_is_faster()) return;
    for (const Case& c : cases) {
      Problem p = make(3, 8, 1, 0, 0, false, 3);
      std::int32_t sum = 0;
      for (int k = 0; k < 8; ++k) p.w[k] = static_cast<std::int8_t>(c.w[k]), sum += c.w[k];
      p.sums = {sum};
      std::fill(p.x.begin(), p.x.end(), 127);
      const float scale = 1.0f / 512;  // y = acc / 512 + 128: a wrapped sum lands 128 codes away
      const float bias = 0.0f;
      p.rq = {&scale, &bias, 1.0f, 128, 0, 255};
      const U8 want = reference(p);
      const int8::PackedWeights w = int8::pack_weights(p.w.data(), 1, 8, true);
      BOOST_TEST_CONTEXT("case " << (&c - cases)) {
        BOOST_TEST(w.sched_pairs[0] == c.pairs);
        U8 got(3);
        int8::gemm_u8s8_packed(p.x.data(), 3, 8, 0, w, p.rq, got.data(), 1);
        BOOST_TEST(mismatches(got, want) == 0);
      }
    }
  });
}

// The choice between quads with the excess and pairs: counted bytes above 127, quads while they
// are at most 1 / ratio of the input, on the paths where quads are faster at all; the policy
// forces either.
BOOST_AUTO_TEST_CASE(quads_pay_while_wide_inputs_are_rare) {
  U8 x(1000, 5);
  BOOST_TEST(int8::count_wide(x.data(), 1000) == 0);
  x[3] = 128, x[999] = 255, x[500] = 127;
  BOOST_TEST(int8::count_wide(x.data(), 1000) == 2);
  BOOST_TEST(int8::count_wide(x.data() + 1, 998) == 1);  // (the 16-byte loop and its tail)
  BOOST_TEST(!int8::all_narrow(x.data(), 1000));
  BOOST_TEST(int8::all_narrow(x.data(), 3));
  const std::int64_t n = 100 * int8::kQuadsPayGemm, nc = 100 * int8::kQuadsPayConv;
  for_each_int8_isa([&](cpu::Isa isa) {
    const bool faster = isa == cpu::Isa::AVX2 || isa == cpu::Isa::AVX512;
    BOOST_TEST(int8::narrow_is_faster() == faster);
    BOOST_TEST(int8::quads_pay(0, n) == faster);
    BOOST_TEST(int8::quads_pay(100, n) == faster);
    BOOST_TEST(!int8::quads_pay(101, n));
    BOOST_TEST(int8::quads_pay(100, nc, int8::kQuadsPayConv) == faster);
    BOOST_TEST(!int8::quads_pay(101, nc, int8::kQuadsPayConv));
    int8::set_quads_policy(int8::QuadsPolicy::Always);
    BOOST_TEST(int8::quads_pay(n, n) == faster);
    int8::set_quads_policy(int8::QuadsPolicy::Never);
    BOOST_TEST(!int8::quads_pay(0, n));
    int8::set_quads_policy(int8::QuadsPolicy::Auto);
  });
  BOOST_TEST((int8::parse_quads_policy("never") == int8::QuadsPolicy::Never));
  BOOST_TEST((int8::parse_quads_policy("always") == int8::QuadsPolicy::Always));
  BOOST_TEST((int8::parse_quads_policy("auto") == int8::QuadsPolicy::Auto));
  try {
    int8::parse_quads_policy("sometimes");
    BOOST_TEST(false, "no error");
  } catch (const Error& e) {
    BOOST_TEST(std::string(e.what()).find("int8::parse_quads_policy") != std::string::npos, e.what());
    BOOST_TEST(std::string(e.what()).find("\"sometimes\"") != std::string::npos, e.what());
  }
}

BOOST_AUTO_TEST_CASE(packed_for_another_path_is_refused) {
  if (cpu::supported_isas().size() < 2) return;
  const Problem p = make(2, 8, 4, 0, 0, false, 5);
  int8::PackedWeights w;
  {
    cpu::IsaGuard g(cpu::Isa::AVX2);
    w = int8::pack_weights(p.w.data(), p.O, p.K);
  }
  U8 y(8);
  {
    cpu::IsaGuard g(cpu::Isa::Generic);  // quads, AVX2 packs pairs
    BOOST_CHECK_THROW(int8::gemm_u8s8_packed(p.x.data(), 2, 8, 0, w, p.rq, y.data(), 4), Error);
  }
  if (!cpu::supports(cpu::Isa::AVX2_VNNI)) return;
  {
    cpu::IsaGuard g(cpu::Isa::AVX2_VNNI);  // the same Highway target as AVX2, but quads
    BOOST_CHECK_THROW(int8::gemm_u8s8_packed(p.x.data(), 2, 8, 0, w, p.rq, y.data(), 4), Error);
    w = int8::pack_weights(p.w.data(), p.O, p.K);
    int8::gemm_u8s8_packed(p.x.data(), 2, 8, 0, w, p.rq, y.data(), 4);
  }
  cpu::IsaGuard g(cpu::Isa::AVX2);
  BOOST_CHECK_THROW(int8::gemm_u8s8_packed(p.x.data(), 2, 8, 0, w, p.rq, y.data(), 4), Error);
  if (!cpu::supports(cpu::Isa::AVX512)) return;
  // narrow quads on both, but AVX-512 orders the steps per two blocks, AVX2 per block
  w = int8::pack_weights(p.w.data(), p.O, p.K, true);
  cpu::IsaGuard g512(cpu::Isa::AVX512);
  try {
    int8::gemm_u8s8_packed(p.x.data(), 2, 8, 0, w, p.rq, y.data(), 4);
    BOOST_TEST(false, "no error");
  } catch (const Error& e) {
    BOOST_TEST(std::string(e.what()).find("step order per 1 blocks") != std::string::npos, e.what());
    BOOST_TEST(std::string(e.what()).find("avx512") != std::string::npos, e.what());
  }
}

BOOST_AUTO_TEST_CASE(cols_match_reference) {
  const Problem p = make(45, 19, 21, 128, 0, true, 9);  // N plays P: col is (K, P)
  U8 col(p.K * p.N);
  for (std::int64_t k = 0; k < p.K; ++k)
    for (std::int64_t n = 0; n < p.N; ++n) col[k * p.N + n] = p.x[n * p.K + k];
  U8 want(p.O * p.N);
  int8::gemm_u8s8_cols_reference(p.w.data(), p.sums.data(), p.O, p.K, col.data(), p.N, p.zx, p.rq,
                                 want.data());
  for_each_int8_isa([&](cpu::Isa) {
    U8 got(p.O * p.N);
    int8::gemm_u8s8_cols(p.w.data(), p.sums.data(), p.O, p.K, col.data(), p.N, p.zx, p.rq, got.data());
    BOOST_TEST(mismatches(got, want) == 0);
  });
}

// QuantizedConv2d (channels-last im2col, per-group packing, tall windows, the row Winograd and
// without it) against the reference im2col and gemm_u8s8_cols_reference; a weight loaded into the
// buffer afterwards is picked up.
BOOST_AUTO_TEST_CASE(conv_layer_matches_reference_im2col) {
  struct Case {
    std::int64_t N, C, H, W, O, k, groups;
    Conv2dParams params;
    bool relu;
    std::int64_t kw = 0;  // 0: k (square)
  };
  const Case cases[] = {
      {2, 1, 28, 28, 16, 5, 1, {.padding = {2, 2}}, true},
      {3, 16, 14, 14, 32, 5, 1, {.padding = {2, 2}}, false},
      {3, 6, 9, 7, 8, 3, 2, {.stride = {2, 1}, .padding = {1, 2}, .groups = 2}, false},
      {1, 4, 8, 8, 5, 3, 1, {.padding = {2, 2}, .dilation = {2, 2}}, true},
      {2, 3, 5, 6, 33, 1, 1, {}, false},
      {2, 17, 11, 13, 19, 3, 1, {.stride = {2, 2}, .padding = {1, 0}}, true},
      {2,
       9,
       7,
       9,
       6,
       3,
       3,
       {.stride = {1, 2}, .padding = {1, 1}, .dilation = {1, 2}, .groups = 3},
       false},
      {2, 5, 6, 7, 3, 2, 1, {.dilation = {2, 1}}, false},
      // tall windows (one run per window) on the quads paths: C 3 with 3 x 3, C 1 strided
      {2, 3, 11, 10, 7, 3, 1, {.stride = {2, 2}, .padding = {1, 1}}, true},
      {3, 1, 13, 12, 9, 5, 1, {.stride = {2, 1}}, false},
      // a 3 x 1 kernel: tall windows on the int16 pairs path too
      {2, 1, 9, 8, 5, 3, 1, {.padding = {1, 0}}, true, 1},
      {5, 20, 33, 31, 40, 3, 1, {.padding = {1, 1}}, true},  // several chunks of images
      // the row Winograd's (int16 pairs paths) odd corners: channels and outputs past the
      // vectors' multiples, output rows 2 input rows apart and kernel rows dilated, a kh x kw
      // kernel of 3 x 5, 3 outputs to a row (one partial tile)
      {2, 9, 10, 13, 19, 5, 1, {.stride = {2, 1}, .padding = {2, 1}, .dilation = {2, 1}}, true},
      {2, 8, 7, 6, 21, 3, 1, {.padding = {0, 1}}, false, 5},
      {1, 33, 6, 5, 8, 3, 1, {}, true},
      // rows of F(5, 5) tiles and an F(4, 5) one for the rest: 24 outputs (pooled too, from
      // column 20), 9 (plain only: its pooled rest would start at an odd column)
      {2, 8, 6, 24, 10, 5, 1, {.padding = {2, 2}}, true},
      {2, 8, 7, 13, 5, 5, 1, {}, false}};
  std::mt19937 gen(11);
  for (const Case& cs : cases) {
    const std::int64_t kh = cs.k, kw = cs.kw ? cs.kw : cs.k, Cg = cs.C / cs.groups, K = Cg * kh * kw;
    Tensor wq = Tensor::empty(Shape{cs.O, Cg, kh, kw}, DType::Int8);
    // uniform int8, or like a trained layer's (the narrow kernel then pairs most steps)
    const bool trained = (&cs - cases) % 4 >= 2;
    std::normal_distribution<double> normal(0.0, 30.0);
    for (std::int64_t i = 0; i < wq.numel(); ++i)
      wq.data<std::int8_t>()[i] =
          static_cast<std::int8_t>(trained ? std::clamp(std::lround(normal(gen)), -128L, 127L)
                                           : std::uniform_int_distribution<int>(-128, 127)(gen));
    Tensor ws = Tensor::empty(Shape{cs.O}, DType::Float32),
           bq = Tensor::empty(Shape{cs.O}, DType::Float32);
    for (std::int64_t o = 0; o < cs.O; ++o) {
      ws.data<float>()[o] = 0.001f * static_cast<float>(1 + o % 7);
      bq.data<float>()[o] = std::uniform_real_distribution<float>(-0.1f, 0.1f)(gen);
    }
    // an input zero point above 127 fills the borders past the narrow range (rounds 2, 3)
    const QuantInfo in{0.02, (&cs - cases) % 2 ? 200 : 7};
    const ActivationQuant out{{0.05, 100}, 0, 255};
    QuantizedConv2d layer(wq, ws, bq, in, out, cs.relu, cs.params);
    Tensor x = Tensor::empty(Shape{cs.N, cs.C, cs.H, cs.W}, DType::UInt8);
    x.set_quant_info(in);
    auto reference_conv = [&]() {
      const auto [sh, sw] = cs.params.stride;
      const auto [ph, pw] = cs.params.padding;
      const auto [dh, dw] = cs.params.dilation;
      const std::int64_t Ho = (cs.H + 2 * ph - dh * (kh - 1) - 1) / sh + 1,
                         Wo = (cs.W + 2 * pw - dw * (kw - 1) - 1) / sw + 1, P = Ho * Wo,
                         Og = cs.O / cs.groups;
      std::vector<float> m;  // s_in s_w[o] in float, as the layer
      for (std::int64_t o = 0; o < cs.O; ++o)
        m.push_back(static_cast<float>(layer.input_quant().scale) * ws.data<float>()[o]);
      const std::int8_t* w = wq.data<std::int8_t>();
      U8 y(cs.N * cs.O * P), col(K * P);
      for (std::int64_t n = 0; n < cs.N; ++n)
        for (std::int64_t g = 0; g < cs.groups; ++g) {
          for (std::int64_t c = 0; c < Cg; ++c)
            for (std::int64_t i = 0; i < kh; ++i)
              for (std::int64_t j = 0; j < kw; ++j)
                for (std::int64_t oh = 0; oh < Ho; ++oh)
                  for (std::int64_t ow = 0; ow < Wo; ++ow) {
                    const std::int64_t h = oh * sh - ph + i * dh, ww = ow * sw - pw + j * dw;
                    col[((c * kh + i) * kw + j) * P + oh * Wo + ow] =
                        (h >= 0 && h < cs.H && ww >= 0 && ww < cs.W)
                            ? x.data<std::uint8_t>()[((n * cs.C + g * Cg + c) * cs.H + h) * cs.W + ww]
                            : static_cast<std::uint8_t>(in.zero_point);
                  }
          std::vector<std::int32_t> sums(Og, 0);
          for (std::int64_t o = 0; o < Og; ++o)
            for (std::int64_t k = 0; k < K; ++k) sums[o] += w[(g * Og + o) * K + k];
          const int8::Requant rq{m.data() + g * Og,
                                 bq.data<float>() + g * Og,
                                 1.0f / static_cast<float>(out.quant.scale),
                                 out.quant.zero_point,
                                 cs.relu ? out.quant.zero_point : 0,
                                 255};
          int8::gemm_u8s8_cols_reference(w + g * Og * K, sums.data(), Og, K, col.data(), P,
                                         in.zero_point, rq, y.data() + (n * cs.O + g * Og) * P);
        }
      return y;
    };
    // rounds 0, 1: inputs in [0, 255]; 2: in [0, 127] (narrow, int8 quads on every path);
    // 3: 0 or 127 only; 4: in [0, 127] but for 1% in [128, 255] (narrow with the excess added,
    // when the zero point is in [0, 127]), 5: the same with those at 255
    for (int round = 0; round < 6; ++round) {
      for (std::int64_t i = 0; i < x.numel(); ++i)
        x.data<std::uint8_t>()[i] = static_cast<std::uint8_t>(
            round == 3 ? 127 * std::uniform_int_distribution<int>(0, 1)(gen)
                       : std::uniform_int_distribution<int>(0, round >= 2 ? 127 : 255)(gen));
      if (round >= 4)
        for (std::int64_t i = 0; i < x.numel(); ++i)
          if (std::bernoulli_distribution(0.01)(gen))
            x.data<std::uint8_t>()[i] = static_cast<std::uint8_t>(
                round == 5 ? 255 : std::uniform_int_distribution<int>(128, 255)(gen));
      const U8 want = reference_conv();
      // the 2 x 2 max pool (stride 2, floor) of the reference: forward_max_pooled's bytes
      const auto [sh, sw] = cs.params.stride;
      const auto [dh, dw] = cs.params.dilation;
      const std::int64_t Ho = (cs.H + 2 * cs.params.padding[0] - dh * (kh - 1) - 1) / sh + 1,
                         Wo = (cs.W + 2 * cs.params.padding[1] - dw * (kw - 1) - 1) / sw + 1;
      U8 want_pooled;
      for (std::int64_t pl = 0; pl < cs.N * cs.O; ++pl)
        for (std::int64_t qh = 0; qh < Ho / 2; ++qh)
          for (std::int64_t qw = 0; qw < Wo / 2; ++qw) {
            const std::uint8_t* t = want.data() + (pl * Ho + 2 * qh) * Wo + 2 * qw;
            want_pooled.push_back(std::max({t[0], t[1], t[Wo], t[Wo + 1]}));
          }
      const int threads = get_num_threads();
      for_each_int8_isa([&](cpu::Isa) {
        // Always: quads with the excess for every input (dense, and a border zero point above
        // 127) where pairs would be chosen; Never: pairs
        // (row Winograd: on, the default, where the path and the layer have it; then off)
        for (const auto& [t, policy, wino] : {std::tuple{1, int8::QuadsPolicy::Auto, true},
                                              {3, int8::QuadsPolicy::Auto, true},
                                              {1, int8::QuadsPolicy::Auto, false},
                                              {3, int8::QuadsPolicy::Auto, false},
                                              {1, int8::QuadsPolicy::Always, false},
                                              {3, int8::QuadsPolicy::Always, false},
                                              {1, int8::QuadsPolicy::Never, false}}) {
          int8::set_quads_policy(policy);
          int8::set_row_winograd(wino);
          set_num_threads(t);
          const Tensor y = layer.forward(x);
          const U8 got(y.data<std::uint8_t>(), y.data<std::uint8_t>() + y.numel());
          BOOST_TEST(mismatches(got, want) == 0,
                     "conv C " << cs.C << " O " << cs.O << " groups " << cs.groups << " round " << round
                               << " threads " << t << " policy " << static_cast<int>(policy)
                               << " winograd " << wino);
          // with the pool in the output stage, on every layout
          const Shape pooled{cs.N, cs.O, Ho / 2, Wo / 2};
          for (const auto& [li, lo] :
               {std::pair{false, false}, {true, false}, {false, true}, {true, true}}) {
            layer.set_layout(li, lo);
            Tensor yp = layer.forward_max_pooled(li ? relayout(x, x.shape(), true) : x, Pool2dParams{});
            layer.set_layout(false, false);
            BOOST_REQUIRE(yp.defined());
            if (lo) yp = relayout(yp, pooled, false);
            BOOST_TEST(yp.shape() == pooled);
            const U8 gp(yp.data<std::uint8_t>(), yp.data<std::uint8_t>() + yp.numel());
            BOOST_TEST(mismatches(gp, want_pooled) == 0,
                       "pooled conv C " << cs.C << " O " << cs.O << " round " << round << " threads "
                                        << t << " policy " << static_cast<int>(policy) << " winograd "
                                        << wino << " layout " << li << lo);
          }
          // channels-last input and / or output (convert's layouts): the same bytes
          const Tensor xl = relayout(x, x.shape(), true);
          for (const auto& [li, lo] : {std::pair{true, false}, {false, true}, {true, true}}) {
            layer.set_layout(li, lo);
            Tensor yl = layer.forward(li ? xl : x);
            if (lo) yl = relayout(yl, y.shape(), false);
            layer.set_layout(false, false);
            const U8 gl(yl.data<std::uint8_t>(), yl.data<std::uint8_t>() + yl.numel());
            BOOST_TEST(mismatches(gl, want) == 0, "conv C " << cs.C << " layout " << li << lo);
          }
        }
        int8::set_quads_policy(int8::QuadsPolicy::Auto);
        int8::set_row_winograd(true);
      });
      set_num_threads(threads);
      // as a checkpoint load does: new values into the same buffer (-w - 1: the full range kept)
      Tensor w2 = layer.weight().clone();
      for (std::int64_t i = 0; i < w2.numel(); ++i)
        w2.data<std::int8_t>()[i] = static_cast<std::int8_t>(~w2.data<std::int8_t>()[i]);
      Tensor buffer = layer.weight();
      buffer.copy_(w2);
    }
  }
}

// The row Winograd (int8::conv_u8s8_row_winograd) at the bound of its int32 sums: the largest
// convolution pack_row_winograd accepts (128 * 128 * C kh kw < 2^28 with every weight -128, or
// +-127 / -128 at random), inputs all 0 (the centred sums' extreme), all 255, or either at random,
// against the reference, plain and pooled, for each table; the columns past the image hold bytes
// that must not matter; one channel more and the packing is refused.
BOOST_AUTO_TEST_CASE(row_winograd_exact_at_its_bound) {
  std::mt19937 gen(5);
  for (const auto& mk : {std::pair<std::int64_t, std::int64_t>{4, 3}, {4, 5}, {5, 5}}) {
    const std::int64_t m = mk.first, k = mk.second;  // (not a structured binding: clang 14
                                                     // cannot capture one in the lambda below)
    const std::int64_t C = k == 3 ? 1820 : 655, O = 3, Ho = 2, Wo = m + 1, K = C * k * k;
    const std::int64_t Hp = Ho + k - 1, W = Wo + k - 1, Wx = 2 * m + k - 1, P = Ho * Wo;
    std::vector<std::int8_t> w(O * K);
    for (std::int64_t i = 0; i < O * K; ++i)
      w[i] =
          static_cast<std::int8_t>(i < K || std::uniform_int_distribution<int>(0, 1)(gen) ? -128 : 127);
    std::vector<std::int8_t> more(O * (C + 1) * k * k, -128);
    BOOST_TEST(!int8::pack_row_winograd(more.data(), O, C + 1, k, k, m).has_value());
    std::vector<std::int32_t> sums(O, 0);
    for (std::int64_t o = 0; o < O; ++o)
      for (std::int64_t i = 0; i < K; ++i) sums[o] += w[o * K + i];
    // |acc| up to 255 * 128 * K ~ 2^29: scale 2^-23 keeps a wrong multiple of 2^29 in sight
    const std::vector<float> scale(O, std::ldexp(1.0f, -23)), bias(O, 128.0f);
    const int8::Requant rq{scale.data(), bias.data(), 1.0f, 0, 0, 255};
    for (const int fill : {0, 255, -1}) {
      U8 x(Hp * Wx * C);  // (Hp, Wx, C): the image, then anything past its W columns
      for (std::int64_t h = 0; h < Hp; ++h)
        for (std::int64_t c = 0; c < Wx * C; ++c)
          x[h * Wx * C + c] = static_cast<std::uint8_t>(
              c >= W * C  ? gen()
              : fill >= 0 ? fill
                          : std::uniform_int_distribution<int>(0, 1)(gen) * 255);
      for (const std::int32_t zx : {0, 3}) {
        U8 col(K * P), want(O * P);
        for (std::int64_t c = 0; c < C; ++c)
          for (std::int64_t i = 0; i < k; ++i)
            for (std::int64_t j = 0; j < k; ++j)
              for (std::int64_t oh = 0; oh < Ho; ++oh)
                for (std::int64_t ow = 0; ow < Wo; ++ow)
                  col[((c * k + i) * k + j) * P + oh * Wo + ow] = x[((oh + i) * Wx + ow + j) * C + c];
        int8::gemm_u8s8_cols_reference(w.data(), sums.data(), O, K, col.data(), P, zx, rq, want.data());
        for_each_int8_isa([&](cpu::Isa) {
          const auto rw = int8::pack_row_winograd(w.data(), O, C, k, k, m);
          BOOST_REQUIRE(rw.has_value());
          U8 got(P * O), pooled(Wo / 2 * O);  // pooled: (1, Wo / 2, O)
          if (!rw->usable()) {                // a VNNI or generic path: refused, naming the function
            BOOST_CHECK_THROW(int8::conv_u8s8_row_winograd(x.data(), 1, Hp, Wx, Ho, Wo, 1, 1, zx, *rw,
                                                           rq, false, got.data()),
                              Error);
            return;
          }
          int8::conv_u8s8_row_winograd(x.data(), 1, Hp, Wx, Ho, Wo, 1, 1, zx, *rw, rq, false,
                                       got.data());
          int8::conv_u8s8_row_winograd(x.data(), 1, Hp, Wx, Ho, Wo, 1, 1, zx, *rw, rq, true,
                                       pooled.data());
          for (std::int64_t o = 0; o < O; ++o) {
            for (std::int64_t p = 0; p < P; ++p)
              BOOST_TEST(got[p * O + o] == want[o * P + p], "F(" << m << ", " << k << ") fill " << fill
                                                                 << " zx " << zx << " o " << o << " p "
                                                                 << p);
            for (std::int64_t q = 0; q < Wo / 2; ++q) {
              const std::uint8_t* r = want.data() + o * P + 2 * q;  // rows 0 and 1, columns 2q, 2q + 1
              BOOST_TEST(
                  pooled[q * O + o] == std::max({r[0], r[1], r[Wo], r[Wo + 1]}),
                  "pooled F(" << m << ", " << k << ") fill " << fill << " zx " << zx << " o " << o);
            }
          }
        });
      }
    }
  }
}

// QuantizedMaxPool2d (vectorised without padding) against plain loops: 2 x 2 stride 2 on even
// and odd widths, overlapping and strided windows, more rows than one block, padding.
BOOST_AUTO_TEST_CASE(max_pool_matches_reference) {
  struct Case {
    std::int64_t N, C, H, W;
    Pool2dParams p;
  };
  const Case cases[] = {{64, 16, 28, 28, {}},
                        {3, 5, 7, 9, {}},
                        {2, 3, 33, 70, {}},
                        {2, 3, 2, 2, {}},
                        {2, 7, 9, 11, {.kernel = {3, 3}, .stride = {2, 2}}},
                        {1, 70, 5, 40, {.kernel = {2, 2}, .stride = {1, 1}}},
                        {2, 3, 8, 5, {.kernel = {1, 3}, .stride = {2, 1}}},
                        {2, 3, 7, 7, {.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1}}}};
  std::mt19937 gen(13);
  for (const Case& cs : cases) {
    Tensor x = Tensor::empty(Shape{cs.N, cs.C, cs.H, cs.W}, DType::UInt8);
    for (std::int64_t i = 0; i < x.numel(); ++i)
      x.data<std::uint8_t>()[i] =
          static_cast<std::uint8_t>(std::uniform_int_distribution<int>(0, 255)(gen));
    x.set_quant_info({0.1, 3});
    const auto k = cs.p.kernel, pad = cs.p.padding;
    const auto s = cs.p.stride == Pair{0, 0} ? k : cs.p.stride;
    const std::int64_t Ho = (cs.H + 2 * pad[0] - k[0]) / s[0] + 1,
                       Wo = (cs.W + 2 * pad[1] - k[1]) / s[1] + 1;
    U8 want(cs.N * cs.C * Ho * Wo);
    for (std::int64_t pl = 0; pl < cs.N * cs.C; ++pl)
      for (std::int64_t oh = 0; oh < Ho; ++oh)
        for (std::int64_t ow = 0; ow < Wo; ++ow) {
          int best = 0;
          for (std::int64_t i = 0; i < k[0]; ++i)
            for (std::int64_t j = 0; j < k[1]; ++j) {
              const std::int64_t h = oh * s[0] - pad[0] + i, w = ow * s[1] - pad[1] + j;
              if (h >= 0 && h < cs.H && w >= 0 && w < cs.W)
                best = std::max<int>(best, x.data<std::uint8_t>()[(pl * cs.H + h) * cs.W + w]);
            }
          want[(pl * Ho + oh) * Wo + ow] = static_cast<std::uint8_t>(best);
        }
    QuantizedMaxPool2d pool(cs.p);
    for_each_int8_isa([&](cpu::Isa) {
      const Tensor y = pool.forward(x);
      BOOST_TEST(y.shape() == (Shape{cs.N, cs.C, Ho, Wo}));
      const U8 got(y.data<std::uint8_t>(), y.data<std::uint8_t>() + y.numel());
      BOOST_TEST(mismatches(got, want) == 0, "pool " << x.shape() << " k " << k[0] << "x" << k[1]);
      QuantizedMaxPool2d last(cs.p);  // channels-last
      last.set_channels_last(true);
      const Tensor yl = relayout(last.forward(relayout(x, x.shape(), true)), y.shape(), false);
      const U8 gl(yl.data<std::uint8_t>(), yl.data<std::uint8_t>() + yl.numel());
      BOOST_TEST(mismatches(gl, want) == 0, "channels-last pool " << x.shape());
    });
  }
}

BOOST_AUTO_TEST_CASE(transpose_and_dequantize_match_plain_loops) {
  std::mt19937 gen(17);
  for (const auto& [rows, cols] : {std::pair{1, 1}, {16, 16}, {17, 3}, {33, 31}, {784, 16}, {3, 1000}}) {
    const std::int64_t lds = cols + 5, ldd = rows + 3;
    U8 src(rows * lds);
    for (auto& v : src) v = static_cast<std::uint8_t>(gen());
    U8 want(cols * ldd, 0xEE);
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t c = 0; c < cols; ++c) want[c * ldd + r] = src[r * lds + c];
    for_each_int8_isa([&, rows = rows, cols = cols](cpu::Isa) {  // (clang 14 captures no binding)
      U8 got(cols * ldd, 0xEE);
      int8::kernels::transpose_u8(src.data(), rows, cols, lds, got.data(), ldd);
      BOOST_TEST(mismatches(got, want) == 0, "transpose " << rows << " x " << cols);
    });
  }
  Tensor q = Tensor::empty(Shape{3, 1007}, DType::UInt8);
  for (std::int64_t i = 0; i < q.numel(); ++i)
    q.data<std::uint8_t>()[i] = static_cast<std::uint8_t>(gen());
  q.set_quant_info({0.0371, 77});
  std::vector<float> want(q.numel());
  for (std::int64_t i = 0; i < q.numel(); ++i)
    want[i] = static_cast<float>(q.data<std::uint8_t>()[i] - 77) * 0.0371f;
  for_each_int8_isa([&](cpu::Isa) {
    const Tensor y = Dequantize().forward(q);
    std::int64_t bad = 0;
    for (std::int64_t i = 0; i < q.numel(); ++i) bad += y.data<float>()[i] != want[i];
    BOOST_TEST(bad == 0);
  });
}

BOOST_AUTO_TEST_SUITE_END()
