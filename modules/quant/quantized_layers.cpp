#include "modules/quant/quantized_layers.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "framework/autograd/grad_mode.h"
#include "framework/nn/state_check.h"
#include "framework/tensor/parallel.h"
#include "modules/quant/detail/output_quant.h"
#include "modules/quant/int8_kernels.h"
#include "modules/quant/kernels/cpu/int8_gemm.h"
#include "modules/quant/kernels/cpu/int8_ops.h"

namespace qat::quant {

// ---- state checks shared by the int8 modules (detail/output_quant.h) --------------------------

void detail::check_input_state(const nn::Module::StateView& state, const std::string& scale,
                               const std::string& zero_point, std::vector<std::string>& problems) {
  nn::check::scale(problems, state, scale);
  nn::check::in_range(problems, state, zero_point, 0, 255, "a uint8 zero point");
}

void detail::check_output_state(const nn::Module::StateView& state, std::vector<std::string>& problems) {
  nn::check::scale(problems, state, "scale");
  const Tensor* zp = nn::check::find(state, "zero_point");
  const Tensor* range = nn::check::find(state, "output_range");
  if (zp == nullptr || range == nullptr || zp->numel() != 1 || range->numel() != 2) return;
  const std::int64_t z = zp->data<std::int32_t>()[0], lo = range->data<std::int32_t>()[0],
                     hi = range->data<std::int32_t>()[1];
  if (!(0 <= lo && lo <= z && z <= hi && hi <= 255))
    problems.push_back(::qat::detail::concat("output_range = [", lo, ", ", hi, "], zero_point = ", z,
                                             ": needs 0 <= lo <= zero_point <= hi <= 255"));
}

void detail::require_valid_state(const nn::Module& m) {
  std::vector<std::string> problems;
  m.check_current_state(problems);
  if (problems.empty()) return;
  std::string msg = m.type_name() + ":";
  for (const auto& p : problems) msg += " " + p + ";";
  msg.pop_back();
  throw Error(msg);
}

using detail::quant_str;
using detail::range_of;
using detail::scalar_f;
using detail::scalar_i;

// ---- Quantize / Dequantize ------------------------------------------------------------------

Quantize::Quantize(const ActivationQuant& output) : nn::Module("Quantize") {
  output_range_ = register_buffer("output_range", range_of(output, "Quantize"));
  scale_ = register_buffer("scale", scalar_f(static_cast<float>(output.quant.scale)));
  zero_point_ = register_buffer("zero_point", scalar_i(output.quant.zero_point));
  detail::require_valid_state(*this);
}

void Quantize::check_state(const StateView& state, std::vector<std::string>& problems) const {
  detail::check_output_state(state, problems);
}

QuantInfo Quantize::output_quant() const {
  return {static_cast<double>(scale_.data<float>()[0]), zero_point_.data<std::int32_t>()[0]};
}

// q = clamp(round_half_even(x * (1/scale)) + zero_point, 0, 255), as the fake quantizer computes q
Tensor Quantize::forward(const Tensor& x) {
  require_dtype(x, DType::Float32, "Quantize::forward", "x");
  const float s = scale_.data<float>()[0], inv = 1.0f / s;
  const auto zp = static_cast<float>(zero_point_.data<std::int32_t>()[0]);
  const auto lo = static_cast<float>(output_range_.data<std::int32_t>()[0]);
  const auto hi = static_cast<float>(output_range_.data<std::int32_t>()[1]);
  Tensor q = Tensor::empty(x.shape(), DType::UInt8);
  const float* px = x.data<float>();
  std::uint8_t* pq = q.data<std::uint8_t>();
  int8::kernels::quantize_u8(px, x.numel(), inv, zp, lo, hi, pq);
  q.set_quant_info(output_quant());
  return q;
}

std::string Quantize::extra_repr() const { return quant_str(output_quant()); }

// x = scale (q - zero_point)
Tensor Dequantize::forward(const Tensor& x) {
  if (!x.is_quantized()) return x;
  require_dtype(x, DType::UInt8, "Dequantize::forward", "x");
  const QuantInfo q = x.quant_info();
  QAT_REQUIRE(q.zero_point >= 0 && q.zero_point <= 255 && std::isfinite(q.scale), "Dequantize::forward",
              "a uint8 input needs a zero point in [0, 255] and a finite scale, got ", quant_str(q));
  Tensor y = Tensor::empty(x.shape(), DType::Float32);
  const std::uint8_t* p = x.data<std::uint8_t>();
  float* py = y.data<float>();
  const auto s = static_cast<float>(q.scale);
  int8::kernels::dequantize_u8(p, x.numel(), s, q.zero_point, py);
  return y;
}

// ---- layers with int8 weights ---------------------------------------------------------------

QuantizedWeightLayer::QuantizedWeightLayer(std::string type, const Tensor& weight_q,
                                           const Tensor& weight_scale, const Tensor& bias_q,
                                           QuantInfo input, const ActivationQuant& output,
                                           bool fused_relu)
    : nn::Module(std::move(type)), fused_relu_(fused_relu) {
  require_dtype(weight_q, DType::Int8, type_name().c_str(), "weight");
  require_dtype(weight_scale, DType::Float32, type_name().c_str(), "weight_scale");
  QAT_REQUIRE(weight_scale.numel() == weight_q.size(0), type_name(), "expected ", weight_q.size(0),
              " weight scales, got ", weight_scale.numel());
  weight_ = register_buffer("weight", weight_q);
  weight_scale_ = register_buffer("weight_scale", weight_scale);
  if (bias_q.defined()) {
    require_dtype(bias_q, DType::Float32, type_name().c_str(), "bias");
    bias_ = register_buffer("bias", bias_q);
  }
  input_scale_ = register_buffer("input_scale", scalar_f(static_cast<float>(input.scale)));
  input_zero_point_ = register_buffer("input_zero_point", scalar_i(input.zero_point));
  scale_ = register_buffer("scale", scalar_f(static_cast<float>(output.quant.scale)));
  zero_point_ = register_buffer("zero_point", scalar_i(output.quant.zero_point));
  output_range_ = register_buffer("output_range", range_of(output, type_name().c_str()));
  detail::require_valid_state(*this);
}

// Partial sums start at -zx rowsum(w) and add products x w: with x, zx in [0, 255] and
// |w| <= 128 every partial sum is within 2 * 255 * 128 * K of zero. The float bias, added in the
// output stage, must be finite and, in accumulator units b / (s_in s_w[o]), within the int32 room
// left by K products: what an integer-only backend (ONNX QLinear*) holds, and what convert makes.
void QuantizedWeightLayer::check_state(const StateView& state,
                                       std::vector<std::string>& problems) const {
  detail::check_output_state(state, problems);
  detail::check_input_state(state, "input_scale", "input_zero_point", problems);
  nn::check::scale(problems, state, "weight_scale");
  nn::check::finite(problems, state, "bias");
  const Tensor* w = nn::check::find(state, "weight");
  if (w == nullptr || w->dim() < 1 || w->size(0) == 0) return;
  const double K = static_cast<double>(w->numel() / w->size(0));
  const double room = 2147483647.0 - 2.0 * 255 * 128 * K;
  if (room < 0) {
    problems.push_back(::qat::detail::concat("weight ", w->shape(), ": ", K,
                                             " products per output overflow int32 accumulation"));
    return;
  }
  const Tensor *b = nn::check::find(state, "bias"), *s_in = nn::check::find(state, "input_scale"),
               *s_w = nn::check::find(state, "weight_scale");
  if (b == nullptr || s_in == nullptr || s_w == nullptr || b->dtype() != DType::Float32 ||
      s_in->dtype() != DType::Float32 || s_in->numel() != 1 || s_w->dtype() != DType::Float32 ||
      s_w->numel() != b->numel())
    return;  // shapes and dtypes are load_into's to report
  std::int64_t bad = 0, first = -1;
  double units = 0;
  for (std::int64_t o = 0; o < b->numel(); ++o) {
    const double u = static_cast<double>(b->data<float>()[o]) /
                     (static_cast<double>(s_in->data<float>()[0]) * s_w->data<float>()[o]);
    if (std::isfinite(b->data<float>()[o]) && !(std::fabs(u) <= room)) {
      if (bad++ == 0) first = o, units = u;
    }
  }
  if (bad > 0)
    problems.push_back(::qat::detail::concat(
        "bias[", first, "] = ", nn::check::value_text(b->data<float>()[first]), ": ",
        nn::check::value_text(units), " accumulator units (bias / (input_scale x weight_scale[", first,
        "])), beyond the int32 room of ", room, " for ", K, " products (", bad, " of ", b->numel(),
        " values)"));
}

QuantInfo QuantizedWeightLayer::input_quant() const {
  return {input_scale_.data<float>()[0], input_zero_point_.data<std::int32_t>()[0]};
}

QuantInfo QuantizedWeightLayer::output_quant() const {
  return {scale_.data<float>()[0], zero_point_.data<std::int32_t>()[0]};
}

void QuantizedWeightLayer::check_input(const Tensor& x) const {
  QAT_REQUIRE(x.defined() && x.dtype() == DType::UInt8 && x.is_quantized(), type_name(),
              "expects a quantized uint8 input, got ", x.defined() ? x.str() : "an undefined tensor");
  const QuantInfo got = x.quant_info(), want = input_quant();
  QAT_REQUIRE(static_cast<float>(got.scale) == static_cast<float>(want.scale) &&
                  got.zero_point == want.zero_point,
              type_name(), "input is quantized with ", quant_str(got),
              " but the layer was converted for ", quant_str(want));
}

// Per output channel: the accumulator's scale s_in s_w[o] and the float bias, 1 / s_out and the
// clamp range (a fused ReLU clamps at the zero point); the weights packed per group.
struct QuantizedWeightLayer::Prepared {
  std::vector<std::uint8_t> key;  // the buffers and settings it was built from
  std::vector<int8::PackedWeights> packed;
  std::vector<float> scales, bias;
  int8::Requant requant{};
};

namespace {
struct Bytes {
  const void* p;
  std::size_t n;
};
bool same_bytes(const std::vector<std::uint8_t>& key, std::initializer_list<Bytes> parts) {
  std::size_t at = 0;
  for (const Bytes& b : parts) {
    if (at + b.n > key.size() || std::memcmp(key.data() + at, b.p, b.n) != 0) return false;
    at += b.n;
  }
  return at == key.size();
}
}  // namespace

const QuantizedWeightLayer::Prepared& QuantizedWeightLayer::prepared(std::int64_t groups, KOrder order,
                                                                     std::int64_t pieces, bool narrow) {
  std::shared_ptr<const Prepared>& cached = prepared_[narrow];
  const std::int32_t settings[] = {static_cast<std::int32_t>(int8::kernels::pack_format(narrow)),
                                   static_cast<std::int32_t>(int8::kernels::pack_format(false)),
                                   static_cast<std::int32_t>(groups),
                                   static_cast<std::int32_t>(order),
                                   fused_relu_,
                                   static_cast<std::int32_t>(pieces),
                                   static_cast<std::int32_t>(hwc_channels_)};
  auto raw = [](const Tensor& t) {
    return t.defined() ? Bytes{t.raw_data(), t.nbytes()} : Bytes{nullptr, 0};
  };
  const std::initializer_list<Bytes> parts = {
      {settings, sizeof settings}, raw(weight_),           raw(weight_scale_), raw(bias_),
      raw(input_scale_),           raw(input_zero_point_), raw(scale_),        raw(zero_point_),
      raw(output_range_)};
  if (cached && same_bytes(cached->key, parts)) return *cached;

  auto st = std::make_shared<Prepared>();
  for (const Bytes& b : parts)
    st->key.insert(st->key.end(), static_cast<const std::uint8_t*>(b.p),
                   static_cast<const std::uint8_t*>(b.p) + b.n);
  const QuantInfo in = input_quant(), out = output_quant();
  const std::int64_t O = weight_.size(0), K = weight_.numel() / O, Og = O / groups;
  for (std::int64_t o = 0; o < O; ++o) {
    st->scales.push_back(static_cast<float>(in.scale) * weight_scale_.data<float>()[o]);
    st->bias.push_back(bias_.defined() ? bias_.data<float>()[o] : 0.0f);
  }
  // a conv's rows (Cg, kh, kw) -> (kh, kw, Cg), the order of the channels-last im2col, or
  // (kw, kh, Cg), the tall windows'
  const std::int8_t* w = weight_.data<std::int8_t>();
  std::vector<std::int8_t> reordered;
  if (order != KOrder::Stored && weight_.dim() == 4) {
    const std::int64_t Cg = weight_.size(1), kh = weight_.size(2), kw = weight_.size(3);
    reordered.resize(O * K);
    for (std::int64_t o = 0; o < O; ++o)
      for (std::int64_t c = 0; c < Cg; ++c)
        for (std::int64_t i = 0; i < kh; ++i)
          for (std::int64_t j = 0; j < kw; ++j) {
            const std::int64_t at =
                order == KOrder::KhKwC ? (i * kw + j) * Cg + c : (j * kh + i) * Cg + c;
            reordered[o * K + at] = w[o * K + (c * kh + i) * kw + j];
          }
    w = reordered.data();
  } else if (hwc_channels_ > 0 && weight_.dim() == 2) {  // columns (C, HW) -> (HW, C)
    const std::int64_t C = hwc_channels_, HW = K / C;
    QAT_REQUIRE(K % C == 0, type_name(), "in_features ", K, " is not a multiple of the ", C,
                " channels of its channels-last input");
    reordered.resize(O * K);
    for (std::int64_t o = 0; o < O; ++o)
      for (std::int64_t c = 0; c < C; ++c)
        for (std::int64_t r = 0; r < HW; ++r) reordered[o * K + r * C + c] = w[o * K + c * HW + r];
    w = reordered.data();
  }
  for (std::int64_t g = 0; g < groups; ++g)
    st->packed.push_back(int8::pack_weights_pieces(w + g * Og * K, Og, pieces, K / pieces, narrow));
  const std::int32_t lo = output_range_.data<std::int32_t>()[0],
                     hi = output_range_.data<std::int32_t>()[1];
  st->requant = {st->scales.data(),
                 st->bias.data(),
                 1.0f / static_cast<float>(out.scale),
                 out.zero_point,
                 fused_relu_ ? std::max(lo, out.zero_point) : lo,
                 hi};
  cached = std::move(st);
  return *cached;
}

QuantizedLinear::QuantizedLinear(const Tensor& weight_q, const Tensor& weight_scale,
                                 const Tensor& bias_q, QuantInfo input, const ActivationQuant& output,
                                 bool fused_relu)
    : QuantizedWeightLayer("QuantizedLinear", weight_q, weight_scale, bias_q, input, output,
                           fused_relu) {
  QAT_REQUIRE(weight_q.dim() == 2, "QuantizedLinear", "weight must be (out, in), got ",
              weight_q.shape());
}

// y = requant(sum_k (x - zx) w)
Tensor QuantizedLinear::forward(const Tensor& x) {
  check_input(x);
  const std::int64_t O = weight_.size(0), K = weight_.size(1);
  QAT_REQUIRE(x.dim() >= 1 && x.size(-1) == K, type_name(), "input of shape ", x.shape(),
              " does not match in_features ", K);
  // inputs in [0, 127] but for a few: int8 quads through vpmaddubsw, plus the excess of those
  // few, where that is faster
  const std::int64_t above = int8::count_wide(x.data<std::uint8_t>(), x.numel());
  const bool narrow = int8::quads_pay(above, x.numel());
  const Prepared& st = prepared(1, KOrder::Stored, 1, narrow);
  Shape os = x.shape();
  os[os.rank() - 1] = O;
  Tensor y = Tensor::empty(os, DType::UInt8);
  int8::gemm_u8s8_packed(x.data<std::uint8_t>(), x.numel() / K, K, input_quant().zero_point,
                         st.packed[0], st.requant, y.data<std::uint8_t>(), O, above == 0);
  y.set_quant_info(output_quant());
  return y;
}

std::string QuantizedLinear::extra_repr() const {
  return qat::detail::concat("in_features=", weight_.size(1), ", out_features=", weight_.size(0),
                             fused_relu_ ? ", relu" : "", ", output ", quant_str(output_quant()));
}

QuantizedConv2d::QuantizedConv2d(const Tensor& weight_q, const Tensor& weight_scale,
                                 const Tensor& bias_q, QuantInfo input, const ActivationQuant& output,
                                 bool fused_relu, const Conv2dParams& params)
    : QuantizedWeightLayer("QuantizedConv2d", weight_q, weight_scale, bias_q, input, output, fused_relu),
      params_(params) {
  QAT_REQUIRE(weight_q.dim() == 4, "QuantizedConv2d", "weight must be (O, C/groups, kh, kw), got ",
              weight_q.shape());
}

// Implicit GEMM per group, for a chunk of images: the input channels-last inside a border of
// the input zero point (real 0), xp (n, Hp, Wp, C) (widened to uint16 on the int16-pairs paths),
// then output pixel m = (n, oh, ow) reads its kernel window in place, one run per kernel row
// (kw C contiguous elements when dw = 1 and there is one group; else one run of Cg per tap):
// y^T (P, O) = requant(A . W_g^T - zx rowsum(W_g) + bias), transposed into (O, P) per image
// (kept as is when convert chose a channels-last output; a channels-last input skips the
// transpose in).
Tensor QuantizedConv2d::forward(const Tensor& x) { return run(x, false); }

// A 2 x 2 max pool with stride 2 and no padding (max_pool2d's floor: an odd last row or column
// of the convolution's output is dropped) in the GEMM's output stage (int8::PooledRows).
Tensor QuantizedConv2d::forward_max_pooled(const Tensor& x, const Pool2dParams& pool) {
  const bool two_by_two = pool.kernel == Pair{2, 2} &&
                          (pool.stride == Pair{0, 0} || pool.stride == Pair{2, 2}) &&
                          pool.padding == Pair{0, 0};
  return two_by_two ? run(x, true) : Tensor();
}

Tensor QuantizedConv2d::run(const Tensor& x, bool pool) {
  check_input(x);
  QAT_REQUIRE(x.dim() == 4, type_name(), "expects (N, C, H, W), got ", x.shape());
  const std::int64_t N = x.size(0), C = x.size(in_nhwc_ ? 3 : 1), H = x.size(in_nhwc_ ? 1 : 2),
                     W = x.size(in_nhwc_ ? 2 : 3);
  const std::int64_t O = weight_.size(0), Cg = weight_.size(1), kh = weight_.size(2),
                     kw = weight_.size(3);
  const std::int64_t G = params_.groups, Og = O / G;
  QAT_REQUIRE(Cg * G == C, type_name(), "input has ", C, " channels, the weight expects ", Cg * G);
  const auto [sh, sw] = params_.stride;
  const std::int64_t ph = params_.padding[0], pw = params_.padding[1];  // (lambdas below use them)
  const auto [dh, dw] = params_.dilation;
  const std::int64_t Ho = (H + 2 * ph - dh * (kh - 1) - 1) / sh + 1,
                     Wo = (W + 2 * pw - dw * (kw - 1) - 1) / sw + 1;
  QAT_REQUIRE(Ho > 0 && Wo > 0, type_name(), "input ", x.shape(), " is smaller than the kernel");
  // output pixels per image: the convolution's, or the pooled ones (Hq, Wq)
  const std::int64_t Hq = pool ? Ho / 2 : Ho, Wq = pool ? Wo / 2 : Wo, P = Hq * Wq;
  if (pool && P == 0) return Tensor();  // (max_pool2d refuses such an input)
  const std::int32_t zx = input_quant().zero_point;
  const std::uint8_t* px = x.data<std::uint8_t>();
  const bool runs = dw == 1 && G == 1;  // a kernel row is kw C contiguous elements
  // an input (and border, the input zero point) in [0, 127] but for a few: int8 quads through
  // vpmaddubsw where that is faster, read from a copy clamped to 127 (xnarrow) when some are
  // above, whose excess the GEMM adds from the image itself
  // (a border zero point above 127 counts as if every input were)
  const std::int64_t above = int8::count_wide(px, x.numel()) + (zx > 127 ? x.numel() : 0);
  const bool narrow = int8::quads_pay(above, x.numel(), int8::kQuadsPayConv),
             clamp = narrow && above > 0;
  // Tall windows: each kernel row's run is padded to whole K steps, which wastes multiplies when
  // kw C is short (conv1: 5 of 8 bytes). Laying each output row's kh input rows side by side,
  // xt (n, oh, w, (r, c)) = xp (n, oh sh + r, w, c), turns the window into one run of kw kh C
  // elements, K ordered (kw, kh, C). Taken where it saves at least a fifth of the steps.
  const std::int64_t kps = int8::kernels::k_per_step(int8::kernels::pack_format(narrow));
  const auto steps = [kps](std::int64_t n) { return (n + kps - 1) / kps; };
  const bool tall =
      runs && dh == 1 && kh > 1 && kh * C <= 64 && 5 * steps(kh * kw * C) <= 4 * kh * steps(kw * C);
  const std::int64_t pieces = tall ? 1 : runs ? kh : kh * kw;
  const Prepared& st = prepared(G, tall ? KOrder::KwKhC : KOrder::KhKwC, pieces, narrow);
  // pooling before requantizing is exact where the output stage is monotone in the sum
  if (pool && !(st.requant.inv_scale > 0 &&
                std::all_of(st.scales.begin(), st.scales.end(), [](float v) { return v >= 0; })))
    return Tensor();
  Tensor y = Tensor::empty(out_nhwc_ ? Shape{N, Hq, Wq, O} : Shape{N, O, Hq, Wq}, DType::UInt8);
  std::uint8_t* py = y.data<std::uint8_t>();
  const std::int64_t eb = int8::activation_bytes(narrow);
  const std::int64_t Hp = H + 2 * ph, Wp = W + 2 * pw, img = Hp * Wp * C;
  // what the GEMM reads per image: the padded image, or its tall windows (+ 8: the last run's
  // 8-byte copies spill into it)
  const std::int64_t run = kh * C, timg = tall ? Ho * Wp * run + 8 : 0, aimg = tall ? timg : img;
  // images per chunk: padded input and output of about 256 KiB
  const std::int64_t chunk =
      std::clamp<std::int64_t>((std::int64_t{1} << 18) / (aimg * eb + P * O), 1, N);
  // The calling thread's buffers, kept between forwards (no allocation in steady state).
  struct Scratch {
    std::vector<std::uint8_t> xpad, xtall, yt, xnarrow;
    std::vector<std::uint16_t> xwide;
    std::vector<std::int64_t> row_off, piece_off, pool_map;
  };
  thread_local Scratch scratch;
  Scratch& sc = scratch;  // captured by the parallel lambdas: this thread's instance
  auto& xpad = sc.xpad;
  auto& xtall = sc.xtall;
  auto& yt = sc.yt;
  auto& xwide = sc.xwide;
  auto& xnarrow = sc.xnarrow;
  auto& row_off = sc.row_off;
  auto& piece_off = sc.piece_off;
  auto& pool_map = sc.pool_map;
  // + 64: the implicit GEMM reads a few elements past a run; zx fills the borders (the
  // interiors are overwritten)
  xpad.assign(chunk * img + 64, static_cast<std::uint8_t>(zx));
  xtall.resize(tall ? chunk * timg + 64 : 0);
  yt.resize(out_nhwc_ ? 0 : chunk * P * O);
  xwide.resize(eb == 2 ? chunk * aimg + 32 : 0);
  xnarrow.resize(clamp ? chunk * aimg + 64 : 0);
  const auto clamp127 = [](const std::uint8_t* from, std::int64_t n, std::uint8_t* to) {
    for (std::int64_t j = 0; j < n; ++j) to[j] = std::min<std::uint8_t>(from[j], 127);
  };
  const std::uint8_t* a8 = tall ? xtall.data() : xpad.data();  // (the u8 activations)
  const std::uint8_t* base = eb == 2 ? reinterpret_cast<const std::uint8_t*>(xwide.data()) : a8;
  row_off.resize(chunk * Ho * Wo);
  piece_off.resize(pieces);
  for (std::int64_t i = 0; i < chunk; ++i)
    for (std::int64_t oh = 0; oh < Ho; ++oh)
      for (std::int64_t ow = 0; ow < Wo; ++ow)
        row_off[(i * Ho + oh) * Wo + ow] =
            (tall ? i * timg + (oh * Wp + ow * sw) * run : i * img + (oh * sh * Wp + ow * sw) * C) * eb;
  for (std::int64_t r = 0; r < (tall ? 1 : kh); ++r)
    for (std::int64_t j = 0; j < (runs ? 1 : kw); ++j)
      piece_off[runs ? r : r * kw + j] = (r * dh * Wp + j * dw) * C * eb;
  // pooled: the GEMM visits each window's 4 convolution rows in a row
  pool_map.resize(pool ? chunk * P * int8::kernels::kPoolWindow : 0);
  for (std::int64_t i = 0, m = 0; pool && i < chunk; ++i)
    for (std::int64_t qh = 0; qh < Hq; ++qh)
      for (std::int64_t qw = 0; qw < Wq; ++qw)
        for (std::int64_t dy = 0; dy < 2; ++dy)
          for (std::int64_t dx = 0; dx < 2; ++dx)
            pool_map[m++] = (i * Ho + 2 * qh + dy) * Wo + 2 * qw + dx;
  for (std::int64_t n0 = 0; n0 < N; n0 += chunk) {
    const std::int64_t nc = std::min(chunk, N - n0);
    parallel_for(nc, 2, [&](std::int64_t i0, std::int64_t i1) {
      thread_local std::vector<std::uint8_t> hwc, wh;  // the executing thread's image (C, H, W)^T
      hwc.resize(in_nhwc_ ? 0 : C * H * W);
      wh.resize(tall ? img + 8 : 0);            // tall windows: the padded image as (Wp, Hp, C)
      for (std::int64_t i = i0; i < i1; ++i) {  // xi[(h + ph, w + pw, c)] = x[n, c, h, w]
        const std::uint8_t* src = px + (n0 + i) * C * H * W;
        if (!in_nhwc_) int8::kernels::transpose_u8(src, C, H * W, H * W, hwc.data(), C);
        const std::uint8_t* rows = in_nhwc_ ? src : hwc.data();
        std::uint8_t* xi = xpad.data() + i * img;
        for (std::int64_t h = 0; h < H; ++h)
          std::memcpy(xi + ((h + ph) * Wp + pw) * C, rows + h * W * C, W * C);
        if (tall) {
          if (C == 1) {
            int8::kernels::transpose_u8(xi, Hp, Wp, Wp, wh.data(), Hp);
          } else {
            for (std::int64_t h = 0; h < Hp; ++h)
              for (std::int64_t w = 0; w < Wp; ++w)
                std::memcpy(wh.data() + (w * Hp + h) * C, xi + (h * Wp + w) * C, C);
          }
          // xt (oh, w) = the kh C bytes wh (w, oh sh .. oh sh + kh), in 8-byte copies whose
          // spill the next one overwrites
          std::uint8_t* __restrict to = xtall.data() + i * timg;
          const std::uint8_t* __restrict t = wh.data();
          const std::int64_t n = run, col = Hp * C, down = sh * C;
          for (std::int64_t oh = 0; oh < Ho; ++oh)
            for (std::int64_t w = 0; w < Wp; ++w, to += n) {
              const std::uint8_t* from = t + w * col + oh * down;
              for (std::int64_t k = 0; k < n; k += 8) std::memcpy(to + k, from + k, 8);
            }
        }
        if (eb == 2) int8::kernels::widen_u8_u16(a8 + i * aimg, aimg, xwide.data() + i * aimg);
        if (clamp) clamp127(a8 + i * aimg, aimg, xnarrow.data() + i * aimg);
      }
    });
    if (eb == 2) int8::kernels::widen_u8_u16(a8 + nc * aimg, 32, xwide.data() + nc * aimg);
    if (clamp) clamp127(a8 + nc * aimg, 64, xnarrow.data() + nc * aimg);
    std::uint8_t* yc = out_nhwc_ ? py + n0 * P * O : yt.data();  // (nc P, O) rows
    for (std::int64_t g = 0; g < G; ++g) {
      int8::Requant rq = st.requant;
      rq.scale = st.scales.data() + g * Og;
      rq.bias = st.bias.data() + g * Og;
      const int8::PooledRows rows{pool_map.data(), nc * P * int8::kernels::kPoolWindow};
      int8::gemm_u8s8_implicit(base + g * Cg * eb, nc * Ho * Wo, row_off.data(), piece_off.data(), zx,
                               st.packed[g], rq, yc + g * Og, O,
                               clamp ? xnarrow.data() + g * Cg : nullptr, pool ? &rows : nullptr);
    }
    if (out_nhwc_) continue;
    parallel_for(nc, 2, [&](std::int64_t i0, std::int64_t i1) {
      for (std::int64_t i = i0; i < i1; ++i)
        int8::kernels::transpose_u8(yt.data() + i * P * O, P, O, O, py + (n0 + i) * O * P, P);
    });
  }
  y.set_quant_info(output_quant());
  return y;
}

std::string QuantizedConv2d::extra_repr() const {
  return "weight " + weight_.shape().str() + (fused_relu_ ? ", relu" : "") + ", output " +
         quant_str(output_quant());
}

}  // namespace qat::quant
