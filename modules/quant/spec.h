#pragma once
#include <cstdint>
#include <iosfwd>
#include <string>

#include "framework/tensor/shape.h"

namespace qat::quant {

/// Integer grids, or the two 8-bit floating formats of Micikevicius et al. 2022.
enum class Format : std::uint8_t { Int, FP8_E4M3, FP8_E5M2 };

/// Which elements share a scale: the whole tensor, each index along `axis`, or each run of
/// `block_size` elements along `axis` (one scale per block, per position of the other axes).
enum class Granularity : std::uint8_t { PerTensor, PerChannel, PerBlock };

/// How a tensor is quantized. Integer specs map x to q = clamp(round(x/scale) + zero_point,
/// quant_min, quant_max); FP8 specs round x/scale to the nearest FP8 value.
struct QuantSpec {
  Format format = Format::Int;
  int bits = 8;               ///< 2..16 for Format::Int; 8 for FP8
  bool is_signed = true;      ///< signed range [-2^(b-1), 2^(b-1)-1], else [0, 2^b-1]
  bool symmetric = true;      ///< zero_point fixed (0, or the midpoint when unsigned)
  bool narrow_range = false;  ///< signed only: drop the most negative value (-127..127)
  Granularity granularity = Granularity::PerTensor;
  int axis = 0;                 ///< channel or block axis (negative counts from the end)
  std::int64_t block_size = 0;  ///< elements per block (PerBlock)
  int block_scale_bits = 0;     ///< PerBlock: quantize the block scales to this many unsigned
                                ///< bits with one float scale (double quantization); 0 = off

  /// Throws qat::Error naming the offending field (e.g. "QuantSpec: bits must be in [2, 16]
  /// for integer formats, got 17").
  void validate() const;
  /// validate(), plus axis in range and block_size dividing the axis for a tensor of `shape`.
  void validate_for(const Shape& shape, const char* who) const;

  std::int64_t quant_min() const;
  std::int64_t quant_max() const;
  /// The fixed zero point of a symmetric integer spec: 0 signed, the midpoint unsigned (128 for
  /// uint8, PyTorch's quint8 symmetric).
  std::int64_t symmetric_zero_point() const;
  bool is_float() const { return format != Format::Int; }
  /// e.g. "int8 symmetric per-channel(axis 0)", "uint8 affine per-tensor", "fp8_e4m3 per-tensor"
  std::string str() const;
  /// The spec whose str() is `text`, exactly (checkpoint metadata); throws qat::Error naming the
  /// text and what is wrong with it ("QuantSpec::parse: 'int40 symmetric per-tensor': bits must
  /// be in [2, 16] ...").
  static QuantSpec parse(const std::string& text);
  bool operator==(const QuantSpec&) const = default;

  // ---- common specs --------------------------------------------------------------------
  /// Weights: signed symmetric per-channel along `axis` (the output channel).
  static QuantSpec weight_per_channel(int bits = 8, int axis = 0);
  /// Activations: unsigned affine per-tensor (PyTorch's default quint8 activations).
  static QuantSpec activation_affine(int bits = 8);
  /// Weights: signed symmetric per-block along `axis` (e.g. 4-bit, blocks of 32 inputs).
  static QuantSpec weight_per_block(int bits, std::int64_t block_size, int axis = -1,
                                    int block_scale_bits = 0);
  static QuantSpec fp8(Format format, Granularity granularity = Granularity::PerTensor, int axis = 0);
};

std::ostream& operator<<(std::ostream& os, const QuantSpec& spec);  // spec.str()

/// Largest finite magnitude of an FP8 format: 448 (E4M3), 57344 (E5M2).
double fp8_max(Format format);

}  // namespace qat::quant
