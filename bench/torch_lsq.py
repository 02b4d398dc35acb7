#!/usr/bin/env python3
"""PyTorch 1.13's LSQ op next to its fake-quant forward, for bench_quant (1 thread).

    python3 bench/torch_lsq.py

The data of bench_quant's LSQ row: 2^20 floats uniform in [-3, 3], scale 6/255, zero point 3
(1.2% of the elements beyond the range), quant range [-128, 127], grad_factor 1/1024, the
incoming gradient uniform in [-1, 1]. Times _fake_quantize_learnable_per_tensor_affine's forward
+ backward (dx, dscale, dzero_point) and fake_quantize_per_tensor_affine's forward without
autograd, each timed as bench/bench_util.h times ours (torch_int8.seconds_per_call). Prints:
    torch lsq LSQ_SECONDS fq FQ_SECONDS
"""
import torch

from torch_int8 import seconds_per_call  # bench_util.h's timing, as for the int8 rows


def main():
    torch.set_num_threads(1)
    torch.manual_seed(0)
    n = 1 << 20
    x = (torch.rand(n) * 6 - 3).requires_grad_()
    scale = torch.tensor([6.0 / 255], requires_grad=True)
    zero_point = torch.tensor([3.0], requires_grad=True)
    grad = torch.rand(n) * 2 - 1

    def lsq():
        y = torch._fake_quantize_learnable_per_tensor_affine(x, scale, zero_point, -128, 127, 1.0 / 1024)
        y.backward(grad)
        x.grad = scale.grad = zero_point.grad = None

    xd = x.detach()

    def fq():
        with torch.no_grad():
            torch.fake_quantize_per_tensor_affine(xd, 6.0 / 255, 3, -128, 127)

    print(f"torch lsq {seconds_per_call(lsq):.9f} fq {seconds_per_call(fq):.9f}")


if __name__ == "__main__":
    main()
