"""Golden vectors for the convolution, pooling and batch-norm ops (tests/framework/test_ops_nn.cpp).

    /usr/bin/python3 tests/golden/gen_framework_golden.py   # writes tests/golden/framework_ops.txt

Every case is float64. `gout` is the weight w of the loss sum(out * w) whose gradients are stored
as grad_<input>.
"""
import os

import torch
import torch.nn.functional as F

from golden_format import GoldenWriter

torch.manual_seed(20240601)
torch.set_default_dtype(torch.float64)
HERE = os.path.dirname(os.path.abspath(__file__))
w = GoldenWriter(os.path.join(HERE, "framework_ops.txt"), __doc__)


def pair(v):
    return (v, v) if isinstance(v, int) else tuple(v)


def write_grads(out, named_inputs):
    gout = torch.rand_like(out) + 0.5
    (out * gout).sum().backward()
    w.tensor("out", out)
    w.tensor("gout", gout)
    for key, t in named_inputs:
        if t is not None and t.requires_grad:
            w.tensor("grad_" + key, t.grad)


def conv_case(name, n, c, h, wd, o, k, stride=1, padding=0, dilation=1, groups=1, bias=True):
    kh, kw = pair(k)
    x = torch.randn(n, c, h, wd, requires_grad=True)
    weight = (torch.randn(o, c // groups, kh, kw) * 0.5).requires_grad_()
    b = torch.randn(o, requires_grad=True) if bias else None
    out = F.conv2d(x, weight, b, pair(stride), pair(padding), pair(dilation), groups)
    w.case(name)
    for key, v in zip(("stride", "padding", "dilation"), (stride, padding, dilation)):
        w.scalar(key + "_h", pair(v)[0])
        w.scalar(key + "_w", pair(v)[1])
    w.scalar("groups", groups)
    w.tensor("x", x)
    w.tensor("weight", weight)
    if bias:
        w.tensor("bias", b)
    write_grads(out, [("x", x), ("weight", weight), ("bias", b)])
    w.end()


def pool_case(name, kind, n, c, h, wd, kernel=2, stride=None, padding=0, count_include_pad=True,
              output_size=None):
    x = torch.randn(n, c, h, wd, requires_grad=True)  # continuous values: no ties
    w.case(name)
    if kind == "adaptive":
        out = F.adaptive_avg_pool2d(x, output_size)
        w.scalar("out_h", output_size[0])
        w.scalar("out_w", output_size[1])
    else:
        stride = kernel if stride is None else stride
        for key, v in zip(("kernel", "stride", "padding"), (kernel, stride, padding)):
            w.scalar(key + "_h", pair(v)[0])
            w.scalar(key + "_w", pair(v)[1])
        if kind == "max":
            out = F.max_pool2d(x, kernel, stride, padding)
        else:
            w.scalar("count_include_pad", int(count_include_pad))
            out = F.avg_pool2d(x, kernel, stride, padding, count_include_pad=count_include_pad)
    w.tensor("x", x)
    write_grads(out, [("x", x)])
    w.end()


def bn_case(name, shape, training, affine=True, momentum=0.1, eps=1e-5):
    c = shape[1]
    x = (torch.randn(*shape) * 2 + 0.5).requires_grad_()
    weight = (torch.rand(c) + 0.5).requires_grad_() if affine else None
    bias = torch.randn(c, requires_grad=True) if affine else None
    rm, rv = torch.randn(c) * 0.1, torch.rand(c) + 0.5
    w.case(name)
    w.scalar("training", int(training))
    w.scalar("momentum", momentum)
    w.scalar("eps", eps)
    w.tensor("x", x)
    if affine:
        w.tensor("weight", weight)
        w.tensor("bias", bias)
    w.tensor("running_mean", rm)
    w.tensor("running_var", rv)
    rm_new, rv_new = rm.clone(), rv.clone()
    out = F.batch_norm(x, rm_new, rv_new, weight, bias, training, momentum, eps)
    w.tensor("running_mean_out", rm_new)
    w.tensor("running_var_out", rv_new)
    write_grads(out, [("x", x), ("weight", weight), ("bias", bias)])
    w.end()


conv_case("conv_basic", 2, 3, 7, 6, 4, 3, padding=1)
conv_case("conv_stride_pad_rect", 2, 3, 8, 7, 5, (3, 2), stride=2, padding=(1, 2))
conv_case("conv_dilation_groups", 2, 4, 9, 8, 6, 3, padding=2, dilation=2, groups=2, bias=False)
conv_case("conv_mixed", 1, 6, 7, 9, 3, (2, 3), stride=(2, 1), padding=(0, 1), dilation=(1, 2),
          groups=3)
conv_case("conv_depthwise", 2, 3, 6, 6, 3, 3, padding=1, groups=3)
conv_case("conv_cnn_like", 2, 2, 12, 12, 4, 5, padding=2)

pool_case("max_k2", "max", 2, 3, 6, 7, kernel=2)
pool_case("max_k3_s2_p1", "max", 2, 2, 7, 7, kernel=3, stride=2, padding=1)
pool_case("max_rect", "max", 1, 3, 6, 5, kernel=(3, 2), stride=(1, 2), padding=(1, 0))
pool_case("avg_k3_s2_p1_incl", "avg", 2, 2, 7, 7, kernel=3, stride=2, padding=1)
pool_case("avg_k3_s2_p1_excl", "avg", 2, 2, 7, 8, kernel=3, stride=2, padding=1,
          count_include_pad=False)
pool_case("avg_rect_excl", "avg", 1, 3, 6, 7, kernel=(2, 3), stride=(1, 2), padding=(1, 1),
          count_include_pad=False)
pool_case("avg_k2", "avg", 2, 3, 6, 6, kernel=2)
pool_case("adaptive_7x5_to_3x2", "adaptive", 2, 3, 7, 5, output_size=(3, 2))
pool_case("adaptive_6x6_to_4x4", "adaptive", 1, 2, 6, 6, output_size=(4, 4))
pool_case("adaptive_3x4_to_5x6", "adaptive", 1, 2, 3, 4, output_size=(5, 6))
pool_case("adaptive_global", "adaptive", 2, 3, 5, 4, output_size=(1, 1))

bn_case("bn_train_2d", (6, 3), True)
bn_case("bn_train_4d", (3, 4, 3, 2), True, momentum=0.2)
bn_case("bn_train_4d_noaffine", (4, 3, 2, 2), True, affine=False)
bn_case("bn_eval_4d", (3, 4, 2, 3), False)
bn_case("bn_eval_2d_noaffine", (5, 3), False, affine=False, eps=1e-3)
w.close()
