#pragma once
// Internal: PyTorch 1.13's HistogramObserver arithmetic in float32, each expression one tensor
// op (no contraction), so the histogram and the MSE qparams match PyTorch bit for bit
// (histogram_torch.cpp; HistogramObserver uses it).
#include <cstdint>
#include <utility>

namespace qat::quant::detail {

struct Adjusted {
  float min_val, max_val;
  std::int64_t downsample_rate, start_idx;
  bool as_point;  // the old range is too narrow to resample: merge its mass as one point
};

/// _adjust_min_max: the grown range [cmin, cmax] relaxed to whole cells of the old grid refined
/// by PyTorch's upsample rate (128); as_point when the old range is too narrow to resample.
Adjusted adjust_min_max(float min_val, float max_val, float cmin, float cmax, std::int64_t bins);

/// _combine_histograms: the old histogram (bins) upsampled, shifted by start fine cells,
/// downsampled by ds and added into hist.
void combine_histograms(const float* old_hist, std::int64_t bins, std::int64_t ds, std::int64_t start,
                        float* hist);

/// _non_linear_param_search: the [min, max] whose dst_nbins-level quantization of the
/// histogram has the least L2 error (PyTorch's greedy search).
std::pair<float, float> mse_range(const float* hist, std::int64_t bins, float min_val, float max_val,
                                  std::int64_t dst_nbins);

}  // namespace qat::quant::detail
