#include "modules/quant/spec.h"

#include <ostream>
#include <regex>

#include "framework/tensor/error.h"

namespace qat::quant {

namespace {
const char* format_name(Format f) {
  switch (f) {
    case Format::FP8_E4M3:
      return "fp8_e4m3";
    case Format::FP8_E5M2:
      return "fp8_e5m2";
    case Format::FP6_E3M2:
      return "fp6_e3m2";
    case Format::FP6_E2M3:
      return "fp6_e2m3";
    case Format::FP4_E2M1:
      return "fp4_e2m1";
    default:
      return "int";
  }
}
int format_bits(Format f) {
  return f == Format::FP6_E3M2 || f == Format::FP6_E2M3 ? 6 : f == Format::FP4_E2M1 ? 4 : 8;
}
}  // namespace

void QuantSpec::validate() const {
  constexpr const char* fn = "QuantSpec";
  const bool fp8 = format == Format::FP8_E4M3 || format == Format::FP8_E5M2;
  if (format == Format::Int) {
    QAT_REQUIRE(bits >= 2 && bits <= 16, fn, "bits must be in [2, 16] for integer formats, got ", bits);
  } else if (fp8) {
    QAT_REQUIRE(bits == 8, fn, "bits must be 8 for FP8 formats, got ", bits);
    QAT_REQUIRE(is_signed && symmetric, fn, "FP8 formats are signed and symmetric");
    QAT_REQUIRE(granularity != Granularity::PerBlock || scale_format == ScaleFormat::E8M0, fn,
                "FP8 formats support per-tensor and "
                "per-channel scales, not per-block");
  } else {
    QAT_REQUIRE(bits == format_bits(format), fn, "bits must be ", format_bits(format), " for ",
                format_name(format), ", got ", bits);
    QAT_REQUIRE(is_signed && symmetric, fn, format_name(format), " is signed and symmetric");
    QAT_REQUIRE(scale_format != ScaleFormat::Float32, fn, format_name(format),
                " needs per-block E8M0 (MX) or E4M3 (NVFP4) scales");
  }
  QAT_REQUIRE(!narrow_range || is_signed, fn, "narrow_range applies to signed ranges only");
  QAT_REQUIRE(axis >= -Shape::kMaxDims && axis < Shape::kMaxDims, fn, "axis ", axis, " is out of range");
  if (granularity == Granularity::PerBlock) {
    QAT_REQUIRE(block_size > 0, fn, "block_size must be positive for per-block granularity, got ",
                block_size);
    QAT_REQUIRE(symmetric, fn, "per-block granularity requires a symmetric spec");
    QAT_REQUIRE(block_scale_bits == 0 || (block_scale_bits >= 2 && block_scale_bits <= 16), fn,
                "block_scale_bits must be 0 (off) or in [2, 16], got ", block_scale_bits);
    QAT_REQUIRE(block_scale_bits == 0 || scale_format == ScaleFormat::Float32, fn,
                "block_scale_bits (double quantization) applies to float32 block scales, got ",
                block_scale_bits, " with ", scale_format == ScaleFormat::E8M0 ? "E8M0" : "E4M3",
                " scales");
    QAT_REQUIRE(scale_format != ScaleFormat::E4M3 || format == Format::FP4_E2M1, fn,
                "E4M3 block scales (NVFP4) go with fp4_e2m1 elements, got ", format_name(format),
                format == Format::Int ? std::to_string(bits) : std::string());
    QAT_REQUIRE(scale_format != ScaleFormat::E8M0 || format != Format::Int ||
                    (bits == 8 && is_signed && narrow_range),
                fn, "MXINT8 (integer elements with E8M0 scales) is int8 symmetric narrow, got ",
                is_signed ? "int" : "uint", bits, narrow_range ? " narrow" : "");
  } else {
    QAT_REQUIRE(block_size == 0, fn, "block_size is only meaningful for per-block granularity, got ",
                block_size);
    QAT_REQUIRE(block_scale_bits == 0, fn,
                "block_scale_bits is only meaningful for per-block "
                "granularity, got ",
                block_scale_bits);
    QAT_REQUIRE(scale_format == ScaleFormat::Float32, fn,
                "E8M0 / E4M3 scales are only meaningful for per-block granularity");
  }
  if (dynamic) {
    QAT_REQUIRE(format == Format::Int && scale_format == ScaleFormat::Float32, fn,
                "dynamic applies to integer specs with float32 scales (MX and NVFP4 block scales "
                "always come from the data)");
    QAT_REQUIRE(block_scale_bits == 0, fn, "dynamic specs do not double-quantize block scales");
  }
}

void QuantSpec::validate_for(const Shape& shape, const char* who) const {
  validate();
  if (granularity == Granularity::PerTensor) return;
  const int r = shape.rank();
  QAT_REQUIRE(axis >= -r && axis < r, who, "QuantSpec axis ", axis, " is out of range for shape ",
              shape);
  if (granularity == Granularity::PerBlock && !is_microscaled()) {
    const std::int64_t n = shape[axis < 0 ? axis + r : axis];
    QAT_REQUIRE(n % block_size == 0, who, "QuantSpec block_size ", block_size,
                " does not divide dimension ", axis, " (", n, ") of shape ", shape);
  }
}

std::int64_t QuantSpec::quant_min() const {
  if (format != Format::Int) return 0;
  if (!is_signed) return 0;
  return -(std::int64_t{1} << (bits - 1)) + (narrow_range ? 1 : 0);
}

std::int64_t QuantSpec::quant_max() const {
  if (format != Format::Int) return 0;
  return is_signed ? (std::int64_t{1} << (bits - 1)) - 1 : (std::int64_t{1} << bits) - 1;
}

std::int64_t QuantSpec::symmetric_zero_point() const {
  if (is_signed) return 0;
  const std::int64_t qmin = quant_min(), qmax = quant_max();
  return qmin == 0 && qmax == 255 ? 128 : (qmin + qmax) / 2;
}

// The grammar of str(): "<format>[ symmetric|affine][ narrow] <granularity>[ double-quant B-bit
// scales][ e8m0|e4m3 scales][ dynamic]"; validate() and a round trip through str() reject
// anything str() would not write.
QuantSpec QuantSpec::parse(const std::string& text) {
  constexpr const char* fn = "QuantSpec::parse";
  static const std::regex grammar(
      "(fp8_e4m3|fp8_e5m2|fp6_e3m2|fp6_e2m3|fp4_e2m1|(u?)int([0-9]{1,2}) (symmetric|affine)( narrow)?)"
      " (per-tensor|per-channel\\(axis (-?[0-9]{1,2})\\)|per-block\\(([0-9]{1,9}), axis "
      "(-?[0-9]{1,2})\\)"
      "( double-quant ([0-9]{1,2})-bit scales)?( (e8m0|e4m3) scales)?)( dynamic)?");
  std::smatch m;
  QAT_REQUIRE(text.size() < 200 && std::regex_match(text, m, grammar), fn, "'",
              qat::detail::printable(text),
              "' is not a quantization spec (e.g. 'int8 symmetric per-channel(axis 0)', "
              "'uint8 affine per-tensor', 'fp8_e4m3 per-tensor', 'fp4_e2m1 per-block(32, axis 1) e8m0 "
              "scales')");
  QuantSpec q;
  if (m[2].matched || m[3].matched) {
    q.is_signed = m[2].length() == 0;
    q.bits = std::stoi(m[3]);
    q.symmetric = m[4] == "symmetric";
    q.narrow_range = m[5].matched;
  } else {
    for (Format f :
         {Format::FP8_E4M3, Format::FP8_E5M2, Format::FP6_E3M2, Format::FP6_E2M3, Format::FP4_E2M1})
      if (m[1] == format_name(f)) q.format = f;
    q.bits = format_bits(q.format);
  }
  const std::string g = m[6];
  if (g.rfind("per-channel", 0) == 0) {
    q.granularity = Granularity::PerChannel;
    q.axis = std::stoi(m[7]);
  } else if (g.rfind("per-block", 0) == 0) {
    q.granularity = Granularity::PerBlock;
    q.block_size = std::stoll(m[8]);
    q.axis = std::stoi(m[9]);
    if (m[10].matched) q.block_scale_bits = std::stoi(m[11]);
    if (m[12].matched) q.scale_format = m[13] == "e8m0" ? ScaleFormat::E8M0 : ScaleFormat::E4M3;
  }
  q.dynamic = m[14].matched;
  try {
    q.validate();
  } catch (const Error& e) {
    throw Error(qat::detail::concat(fn, ": '", text, "': ", e.what()));
  }
  QAT_REQUIRE(q.str() == text, fn, "'", text, "' is not in canonical form (expected '", q.str(), "')");
  return q;
}

std::string QuantSpec::str() const {
  std::string s;
  if (format != Format::Int)
    s = format_name(format);
  else
    s = std::string(is_signed ? "int" : "uint") + std::to_string(bits) +
        (symmetric ? " symmetric" : " affine") + (narrow_range ? " narrow" : "");
  switch (granularity) {
    case Granularity::PerTensor:
      s += " per-tensor";
      break;
    case Granularity::PerChannel:
      s += " per-channel(axis " + std::to_string(axis) + ")";
      break;
    case Granularity::PerBlock:
      s += " per-block(" + std::to_string(block_size) + ", axis " + std::to_string(axis) + ")";
      if (block_scale_bits) s += " double-quant " + std::to_string(block_scale_bits) + "-bit scales";
      if (scale_format == ScaleFormat::E8M0) s += " e8m0 scales";
      if (scale_format == ScaleFormat::E4M3) s += " e4m3 scales";
      break;
  }
  if (dynamic) s += " dynamic";
  return s;
}

QuantSpec QuantSpec::weight_per_channel(int bits, int axis) {
  return QuantSpec{.bits = bits,
                   .is_signed = true,
                   .symmetric = true,
                   .granularity = Granularity::PerChannel,
                   .axis = axis};
}

QuantSpec QuantSpec::activation_affine(int bits) {
  return QuantSpec{.bits = bits, .is_signed = false, .symmetric = false};
}

QuantSpec QuantSpec::weight_per_block(int bits, std::int64_t block_size, int axis,
                                      int block_scale_bits) {
  return QuantSpec{.bits = bits,
                   .is_signed = true,
                   .symmetric = true,
                   .granularity = Granularity::PerBlock,
                   .axis = axis,
                   .block_size = block_size,
                   .block_scale_bits = block_scale_bits};
}

QuantSpec QuantSpec::fp8(Format format, Granularity granularity, int axis) {
  return QuantSpec{.format = format,
                   .bits = 8,
                   .is_signed = true,
                   .symmetric = true,
                   .granularity = granularity,
                   .axis = axis};
}

QuantSpec QuantSpec::mx(Format element, std::int64_t block_size, int axis) {
  QuantSpec q{.format = element,
              .bits = format_bits(element),
              .narrow_range = element == Format::Int,
              .granularity = Granularity::PerBlock,
              .axis = axis,
              .block_size = block_size,
              .scale_format = ScaleFormat::E8M0};
  q.validate();
  return q;
}

QuantSpec QuantSpec::nvfp4(std::int64_t block_size, int axis) {
  QuantSpec q{.format = Format::FP4_E2M1,
              .bits = 4,
              .granularity = Granularity::PerBlock,
              .axis = axis,
              .block_size = block_size,
              .scale_format = ScaleFormat::E4M3};
  q.validate();
  return q;
}

std::ostream& operator<<(std::ostream& os, const QuantSpec& spec) { return os << spec.str(); }

double fp8_max(Format format) {
  switch (format) {
    case Format::FP8_E4M3:
      return 448.0;
    case Format::FP8_E5M2:
      return 57344.0;
    default:
      return 0.0;
  }
}

ElementFormat element_format(Format format) {
  switch (format) {
    case Format::FP8_E4M3:
      return {3, -6, 8, 448.0};
    case Format::FP8_E5M2:
      return {2, -14, 15, 57344.0};
    case Format::FP6_E3M2:
      return {2, -2, 4, 28.0};
    case Format::FP6_E2M3:
      return {3, 0, 2, 7.5};
    case Format::FP4_E2M1:
      return {1, 0, 2, 6.0};
    case Format::Int:
      return {6, 0, 0, 127.0 / 64.0};
  }
  return {};
}

}  // namespace qat::quant
