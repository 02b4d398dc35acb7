"""Golden vectors for qat::quant::HistogramObserver (tests/quant/test_histogram.cpp).

Run with Debian's PyTorch 1.13:  /usr/bin/python3 tests/golden/gen_histogram_golden.py

Each case feeds 1-3 float32 batches x0, x1, x2 to torch.ao.quantization.HistogramObserver
(bins 2048, upsample_rate 128) and records the final histogram, min_val, max_val, the MSE search's
range (_non_linear_param_search) and calculate_qparams() for quint8 per_tensor_affine (default
quant range 0..255) and qint8 per_tensor_symmetric.

One change to 1.13's forward: torch.histc gets the float range. 1.13 passes min=int(min_val),
max=int(max_val), which drops values outside [int(min), int(max)] and bins the rest on the wrong
grid (releases before and after 1.13 pass min_val, max_val); the C++ observer bins over the float
range. Where the truncation is a no-op (integer range ends, as in case `integer_ends`) the stock
observer gives the same numbers; scalar stock_1_13 says whether it does for each case.
"""
import os

import torch
from torch.ao.quantization.observer import HistogramObserver

from golden_format import GoldenWriter


class FloatRangeHistogramObserver(HistogramObserver):
    """HistogramObserver of PyTorch 1.13 with the histc range passed as floats."""

    def forward(self, x_orig):
        if x_orig.numel() == 0:
            return x_orig
        x = x_orig.detach()
        min_val, max_val = self.min_val, self.max_val
        same_values = min_val.item() == max_val.item()
        is_uninitialized = min_val == float("inf") and max_val == float("-inf")
        if is_uninitialized or same_values:
            min_val, max_val = torch.aminmax(x)
            self.min_val.resize_(min_val.shape)
            self.min_val.copy_(min_val)
            self.max_val.resize_(max_val.shape)
            self.max_val.copy_(max_val)
            torch.histc(x, self.bins, min=min_val.item(), max=max_val.item(), out=self.histogram)
        else:
            new_min, new_max = torch.aminmax(x)
            combined_min = torch.min(new_min, min_val)
            combined_max = torch.max(new_max, max_val)
            combined_min, combined_max, downsample_rate, start_idx = self._adjust_min_max(
                combined_min, combined_max, self.upsample_rate)
            combined_histogram = torch.histc(x, self.bins, min=combined_min.item(),
                                             max=combined_max.item())
            if combined_min == min_val and combined_max == max_val:
                combined_histogram += self.histogram
            else:
                combined_histogram = self._combine_histograms(
                    combined_histogram, self.histogram, self.upsample_rate, downsample_rate,
                    start_idx, self.bins)
            self.histogram.detach_().resize_(combined_histogram.shape)
            self.histogram.copy_(combined_histogram)
            self.min_val.detach_().resize_(combined_min.shape)
            self.min_val.copy_(combined_min)
            self.max_val.detach_().resize_(combined_max.shape)
            self.max_val.copy_(combined_max)
        return x_orig


SPECS = {"affine": (torch.quint8, torch.per_tensor_affine),
         "symmetric": (torch.qint8, torch.per_tensor_symmetric)}


def run(cls, batches, dtype, qscheme):
    obs = cls(dtype=dtype, qscheme=qscheme)
    for x in batches:
        obs(x)
    lo, hi = obs._non_linear_param_search()
    scale, zero_point = obs.calculate_qparams()
    return obs, lo, hi, scale, zero_point


def cases():
    g = torch.Generator().manual_seed(20221028)
    randn = lambda *s: torch.randn(*s, generator=g)
    rand = lambda *s: torch.rand(*s, generator=g)

    yield "normal_1batch", [randn(2000)]
    yield "uniform_inside_2batch", [rand(800) * 3 - 1, rand(800) * 2 - 0.5]
    yield "relu_growing_3batch", [torch.relu(randn(500) * s) for s in (0.5, 1.0, 2.5)]
    x = randn(1000)
    x[[17, 400, 901]] = torch.tensor([25.0, -18.0, 31.5])
    yield "outliers_2batch", [randn(800), x]
    yield "growing_both_sides_3batch", [randn(500) * 0.3 + 0.5, randn(500), randn(500) * 3 + 1]
    yield "lognormal_skewed_2batch", [torch.exp(randn(700) * 0.8), torch.exp(randn(700))]
    yield "tiny_range_2batch", [randn(600) * 1e-3, randn(600) * 4e-3 + 2e-3]
    # integer ends and a growth by a whole number of fine cells: stock 1.13 agrees here
    a = rand(600) * 4 - 2
    a[[0, 1]] = torch.tensor([-2.0, 2.0])
    b = rand(600) * 8 - 2
    b[[5, 6]] = torch.tensor([-2.0, 6.0])
    yield "integer_ends", [a, b, rand(500) * 8 - 2]


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    path = os.path.join(here, "histogram.txt")
    w = GoldenWriter(path, "\n".join(__doc__.split("\n\n")[1:4]))
    for name, batches in cases():
        w.case(name)
        w.scalar("batches", len(batches))
        for i, x in enumerate(batches):
            w.tensor("x%d" % i, x)
        stock_same = True
        for spec, (dtype, qscheme) in SPECS.items():
            obs, lo, hi, scale, zp = run(FloatRangeHistogramObserver, batches, dtype, qscheme)
            if spec == "affine":
                w.tensor("histogram", obs.histogram)
                w.scalar("min_val", obs.min_val.item())
                w.scalar("max_val", obs.max_val.item())
                w.scalar("mse_lo", lo.item())
                w.scalar("mse_hi", hi.item())
            w.scalar(spec + "_scale", scale.item())
            w.scalar(spec + "_zero_point", zp.item())
            stock, _, _, s_scale, s_zp = run(HistogramObserver, batches, dtype, qscheme)
            stock_same = stock_same and torch.equal(stock.histogram, obs.histogram) and \
                s_scale.item() == scale.item() and s_zp.item() == zp.item()
            print("%-26s %-9s scale %.9g zp %d  range [%.6g, %.6g]  stock 1.13 %s" % (
                name, spec, scale.item(), zp.item(), lo.item(), hi.item(),
                "same" if stock_same else "differs"))
        w.scalar("stock_1_13", int(stock_same))
        w.end()
    w.close()
    size = os.path.getsize(path)
    assert size < 500 * 1024, size
    print("wrote %s (%d bytes)" % (path, size))


if __name__ == "__main__":
    main()
