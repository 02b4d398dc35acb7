#include "modules/quant/quantized_layers.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "framework/autograd/grad_mode.h"
#include "framework/nn/state_check.h"
#include "modules/quant/detail/output_quant.h"
#include "modules/quant/detail/prepared.h"
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

template <class T>
std::vector<T> QuantizedWeightLayer::hwc_columns(const T* src, std::int64_t rows, std::int64_t K,
                                                 bool to_last) const {
  const std::int64_t C = hwc_channels_, HW = K / C;
  QAT_REQUIRE(K % C == 0, type_name(), "in_features ", K, " is not a multiple of the ", C,
              " channels of its channels-last input");
  std::vector<T> dst(static_cast<std::size_t>(rows * K));
  for (std::int64_t i = 0; i < rows; ++i)
    for (std::int64_t c = 0; c < C; ++c)
      for (std::int64_t r = 0; r < HW; ++r) {
        const std::int64_t first = i * K + c * HW + r, last = i * K + r * C + c;
        dst[to_last ? last : first] = src[to_last ? first : last];
      }
  return dst;
}

const QuantizedWeightLayer::Prepared& QuantizedWeightLayer::prepared(std::int64_t groups, KOrder order,
                                                                     std::int64_t pieces, bool narrow) {
  std::shared_ptr<const Prepared>& cached =
      prepared_[order == KOrder::RowWinograd ? (pieces == 5 ? 3 : 2) : narrow];
  const std::int32_t settings[] = {static_cast<std::int32_t>(int8::kernels::pack_format(narrow)),
                                   static_cast<std::int32_t>(int8::kernels::pack_format(false)),
                                   static_cast<std::int32_t>(int8::kernels::sched_group()),
                                   static_cast<std::int32_t>(int8::kernels::winograd()),
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
  const std::int64_t O = weight_.size(0), K = weight_.numel() / O, Og = O / groups;
  st->requant = output_stage(st->scales, st->bias);
  // a conv's rows (Cg, kh, kw) -> (kh, kw, Cg), the order of the channels-last im2col, or
  // (kw, kh, Cg), the tall windows'
  const std::int8_t* w = weight_.data<std::int8_t>();
  if (order == KOrder::RowWinograd) {  // (O, C, kh, kw) as stored; `pieces` is the tile's m
    st->row = int8::pack_row_winograd(w, O, weight_.size(1), weight_.size(2), weight_.size(3), pieces);
    cached = std::move(st);
    return *cached;
  }
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
    reordered = hwc_columns(w, O, K, true);
    w = reordered.data();
  }
  if (order == KOrder::Stored && groups == 1 && pieces == 1)  // a linear layer: gemm_u8s8_packed
    st->packed.push_back(int8::pack_weights(w, O, K, narrow));
  else
    for (std::int64_t g = 0; g < groups; ++g)
      st->packed.push_back(int8::pack_weights_pieces(w + g * Og * K, Og, pieces, K / pieces, narrow));
  cached = std::move(st);
  return *cached;
}

int8::Requant QuantizedWeightLayer::output_stage(std::vector<float>& scales,
                                                 std::vector<float>& bias) const {
  const QuantInfo in = input_quant(), out = output_quant();
  const std::int64_t O = weight_.size(0);
  const float* ws = weight_scale_.data<float>();
  const float* b = bias_.defined() ? bias_.data<float>() : nullptr;
  scales.resize(static_cast<std::size_t>(O));
  bias.assign(static_cast<std::size_t>(O), 0.0f);
  for (std::int64_t o = 0; o < O; ++o) {
    scales[o] = static_cast<float>(in.scale) * ws[o];
    if (b != nullptr) bias[o] = b[o];
  }
  const std::int32_t lo = output_range_.data<std::int32_t>()[0],
                     hi = output_range_.data<std::int32_t>()[1];
  return {scales.data(),
          bias.data(),
          1.0f / static_cast<float>(out.scale),
          out.zero_point,
          fused_relu_ ? std::max(lo, out.zero_point) : lo,
          hi};
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
  Shape os = x.shape();
  os[os.rank() - 1] = O;
  Tensor y = Tensor::empty(os, DType::UInt8);
  y.set_quant_info(output_quant());
  const std::int64_t M = x.numel() / K;
  if (M <= int8::kRowsMax) {  // a sample or two: dot products with the weights as stored
    const std::uint8_t* px = x.data<std::uint8_t>();
    std::vector<std::uint8_t> nchw;
    if (hwc_channels_ > 0) {  // the input's (HW, C) columns into the weights' (C, HW) order
      nchw = hwc_columns(px, M, K, false);
      px = nchw.data();
    }
    std::vector<float> scales, bias;
    const int8::Requant rq = output_stage(scales, bias);
    int8::linear_u8s8_rows(px, M, K, input_quant().zero_point, weight_.data<std::int8_t>(), O, K, rq,
                           y.data<std::uint8_t>(), O);
    return y;
  }
  // inputs in [0, 127] but for a few: int8 quads through vpmaddubsw, plus the excess of those
  // few, where that is faster
  const std::int64_t above = int8::count_wide(x.data<std::uint8_t>(), x.numel());
  const bool narrow = int8::quads_pay(above, x.numel());
  const Prepared& st = prepared(1, KOrder::Stored, 1, narrow);
  int8::gemm_u8s8_packed(x.data<std::uint8_t>(), M, K, input_quant().zero_point, st.packed[0],
                         st.requant, y.data<std::uint8_t>(), O, above == 0);
  return y;
}

std::string QuantizedLinear::extra_repr() const {
  return qat::detail::concat("in_features=", weight_.size(1), ", out_features=", weight_.size(0),
                             fused_relu_ ? ", relu" : "", ", output ", quant_str(output_quant()));
}

}  // namespace qat::quant
