#include "modules/quant/spec.h"

#include <ostream>
#include <regex>

#include "framework/tensor/error.h"

namespace qat::quant {

void QuantSpec::validate() const {
  constexpr const char* fn = "QuantSpec";
  if (format == Format::Int) {
    QAT_REQUIRE(bits >= 2 && bits <= 16, fn, "bits must be in [2, 16] for integer formats, got ", bits);
  } else {
    QAT_REQUIRE(bits == 8, fn, "bits must be 8 for FP8 formats, got ", bits);
    QAT_REQUIRE(is_signed && symmetric, fn, "FP8 formats are signed and symmetric");
    QAT_REQUIRE(granularity != Granularity::PerBlock, fn,
                "FP8 formats support per-tensor and "
                "per-channel scales, not per-block");
  }
  QAT_REQUIRE(!narrow_range || is_signed, fn, "narrow_range applies to signed ranges only");
  QAT_REQUIRE(axis >= -Shape::kMaxDims && axis < Shape::kMaxDims, fn, "axis ", axis, " is out of range");
  if (granularity == Granularity::PerBlock) {
    QAT_REQUIRE(block_size > 0, fn, "block_size must be positive for per-block granularity, got ",
                block_size);
    QAT_REQUIRE(symmetric, fn, "per-block granularity requires a symmetric spec");
    QAT_REQUIRE(block_scale_bits == 0 || (block_scale_bits >= 2 && block_scale_bits <= 16), fn,
                "block_scale_bits must be 0 (off) or in [2, 16], got ", block_scale_bits);
  } else {
    QAT_REQUIRE(block_size == 0, fn, "block_size is only meaningful for per-block granularity, got ",
                block_size);
    QAT_REQUIRE(block_scale_bits == 0, fn,
                "block_scale_bits is only meaningful for per-block "
                "granularity, got ",
                block_scale_bits);
  }
}

void QuantSpec::validate_for(const Shape& shape, const char* who) const {
  validate();
  if (granularity == Granularity::PerTensor) return;
  const int r = shape.rank();
  QAT_REQUIRE(axis >= -r && axis < r, who, "QuantSpec axis ", axis, " is out of range for shape ",
              shape);
  if (granularity == Granularity::PerBlock) {
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
// scales]"; validate() and a round trip through str() reject anything str() would not write.
QuantSpec QuantSpec::parse(const std::string& text) {
  constexpr const char* fn = "QuantSpec::parse";
  static const std::regex grammar(
      "(fp8_e4m3|fp8_e5m2|(u?)int([0-9]{1,2}) (symmetric|affine)( narrow)?)"
      " (per-tensor|per-channel\\(axis (-?[0-9]{1,2})\\)|per-block\\(([0-9]{1,9}), axis "
      "(-?[0-9]{1,2})\\)"
      "( double-quant ([0-9]{1,2})-bit scales)?)");
  std::smatch m;
  QAT_REQUIRE(text.size() < 200 && std::regex_match(text, m, grammar), fn, "'",
              qat::detail::printable(text),
              "' is not a quantization spec (e.g. 'int8 symmetric per-channel(axis 0)', "
              "'uint8 affine per-tensor', 'fp8_e4m3 per-tensor')");
  QuantSpec q;
  if (m[1] == "fp8_e4m3" || m[1] == "fp8_e5m2") {
    q.format = m[1] == "fp8_e4m3" ? Format::FP8_E4M3 : Format::FP8_E5M2;
  } else {
    q.is_signed = m[2].length() == 0;
    q.bits = std::stoi(m[3]);
    q.symmetric = m[4] == "symmetric";
    q.narrow_range = m[5].matched;
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
  }
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
  if (format == Format::FP8_E4M3)
    s = "fp8_e4m3";
  else if (format == Format::FP8_E5M2)
    s = "fp8_e5m2";
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
      break;
  }
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

}  // namespace qat::quant
