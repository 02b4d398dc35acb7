#pragma once
#include <cstdint>
#include <iosfwd>
#include <string>

#include "framework/tensor/shape.h"

namespace qat::quant {

/// Integer grids, the two 8-bit floating formats of Micikevicius et al. 2022, and the 6- and 4-bit
/// element formats of OCP Microscaling (MX v1.0): FP6 E3M2 / E2M3 and FP4 E2M1 (per-block only).
enum class Format : std::uint8_t { Int, FP8_E4M3, FP8_E5M2, FP6_E3M2, FP6_E2M3, FP4_E2M1 };

/// How per-block scales are stored (Granularity::PerBlock): float32 (optionally double-quantized
/// with block_scale_bits); E8M0, a power of two 2^-127..2^127 computed from each block's amax
/// (OCP MX v1.0); or FP8 E4M3 under an fp32 per-tensor scale, both computed from the data
/// (NVFP4). E8M0 / E4M3 blocks run over the dimensions from `axis` on, flattened row-major, and
/// the last block of each row may be shorter (the spec's padding).
enum class ScaleFormat : std::uint8_t { Float32, E8M0, E4M3 };

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
  ScaleFormat scale_format = ScaleFormat::Float32;  ///< PerBlock: E8M0 (MX), E4M3 (NVFP4)
  bool dynamic = false;  ///< integer specs: qparams from each batch's range, no running statistics

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
  /// Floating-point elements (FP8, FP6, FP4).
  bool is_float() const { return format != Format::Int; }
  /// FP8 with float32 scales (fake_quantize_fp8, FP8FakeQuantize).
  bool is_fp8() const {
    return (format == Format::FP8_E4M3 || format == Format::FP8_E5M2) &&
           scale_format == ScaleFormat::Float32;
  }
  /// Block scales computed from the data: OCP MX (E8M0) or NVFP4 (E4M3) (fake_quantize_mx).
  bool is_microscaled() const { return scale_format != ScaleFormat::Float32; }
  /// e.g. "int8 symmetric per-channel(axis 0)", "uint8 affine per-tensor", "fp8_e4m3 per-tensor",
  /// "fp4_e2m1 per-block(32, axis 1) e8m0 scales" (MXFP4), "fp4_e2m1 per-block(16, axis 1) e4m3
  /// scales" (NVFP4), "int8 affine per-channel(axis 0) dynamic"
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
  /// OCP MX: `element` FP8 / FP6 / FP4 (or Format::Int for MXINT8: int8 symmetric narrow), blocks
  /// of `block_size` along the dimensions from `axis`, E8M0 shared scales.
  static QuantSpec mx(Format element, std::int64_t block_size = 32, int axis = 1);
  /// NVFP4: FP4 E2M1 in blocks of `block_size`, E4M3 block scales, an fp32 per-tensor scale.
  static QuantSpec nvfp4(std::int64_t block_size = 16, int axis = 1);
};

std::ostream& operator<<(std::ostream& os, const QuantSpec& spec);  // spec.str()

/// Largest finite magnitude of an FP8 format: 448 (E4M3), 57344 (E5M2).
double fp8_max(Format format);

/// A floating element format as rounding sees it: values m 2^e with `mantissa_bits` fraction
/// bits, e >= min_exponent (subnormals below 2^min_exponent), saturating at `max`; `emax` is the
/// exponent of the largest normal (OCP MX's emax_elem).
struct ElementFormat {
  int mantissa_bits;
  int min_exponent;
  int emax;
  double max;
};
/// E4M3 {3, -6, 8, 448}, E5M2 {2, -14, 15, 57344}, E3M2 {2, -2, 4, 28}, E2M3 {3, 0, 2, 7.5},
/// E2M1 {1, 0, 2, 6}; Format::Int (MXINT8: codes / 64, symmetric): {6, 0, 0, 127/64}.
ElementFormat element_format(Format format);

}  // namespace qat::quant
