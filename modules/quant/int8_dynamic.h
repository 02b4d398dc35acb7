#pragma once
// The grouped integer GEMM behind DynamicQuantizedLinear (torchao's 8da4w after conversion:
// activations quantized per row on the fly, weights int4 / int8 symmetric per group of inputs):
//   acc[m, o, g] = sum_{k in group g} (x[m, k] - row_zp[m]) w[o, k]          (int32, exact)
//   y[m, o]      = relu?((sum_g float(acc[m, o, g]) w_scale[o, g]) row_scale[m] + bias[o])
// in float32, the groups summed in order 0, 1, ... with every product and sum rounded once (no
// FMA), so every CPU path gives the same bits (kernels/cpu/int8_dynamic.cpp, runtime-dispatched).
// x holds uint8 codes: signed codes are stored shifted by 128, as everywhere in the int8 backend.
#include <cstdint>
#include <vector>

#include "framework/tensor/aligned_vector.h"

namespace qat::quant::int8 {

/// Weights (O, K) in groups of `group` inputs (the last group may be shorter), packed once for
/// the kernel: output channels in blocks of 16, each group padded with zero weights to `steps`
/// pairs of k: step s of group g of block b = [16 channels][2 x int8] (widened to int16 pairs as
/// the kernel loads them); the scales
/// as [block][group][16] (0 for the padding channels). The same packing on every CPU path.
struct GroupedWeights {
  std::int64_t O = 0, K = 0, group = 0, groups = 0, steps = 0;
  AlignedVector<std::int8_t> data;  ///< 64-byte aligned
  std::vector<float> scales;
};

/// Packs w (O, K) int8 codes with scale (O, groups), groups = ceil(K / group). Throws for a
/// group size outside [1, K] or one whose products could overflow the int32 accumulator.
GroupedWeights pack_grouped(const std::int8_t* w, const float* scale, std::int64_t O, std::int64_t K,
                            std::int64_t group);

/// y (M, O), rows ldy apart, from x (M, K) uint8 codes, rows ldx apart, with a zero point and a
/// scale per row; bias (O) or null. OpenMP over row blocks when get_num_threads() > 1 (the result
/// does not depend on the thread count).
void linear_dynamic(const std::uint8_t* x, std::int64_t M, std::int64_t ldx, const std::int32_t* row_zp,
                    const float* row_scale, const GroupedWeights& w, const float* bias, bool relu,
                    float* y, std::int64_t ldy);

/// The scalar reference of linear_dynamic on the unpacked weights (O, K) and scales (O, groups).
void linear_dynamic_reference(const std::uint8_t* x, std::int64_t M, std::int64_t K, std::int64_t ldx,
                              const std::int32_t* row_zp, const float* row_scale, const std::int8_t* w,
                              const float* scale, std::int64_t O, std::int64_t group, const float* bias,
                              bool relu, float* y, std::int64_t ldy);

}  // namespace qat::quant::int8
