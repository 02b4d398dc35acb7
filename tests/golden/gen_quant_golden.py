"""Golden vectors for the quantization math (tests/quant/test_quant_math.cpp).

    /usr/bin/python3 tests/golden/gen_quant_golden.py   # writes tests/golden/quant.txt

Cases (scalars qmin, qmax everywhere; `gout` is the weight w of the loss sum(out * w)):
  fqt_*   torch.fake_quantize_per_tensor_affine: x, scale, zero_point -> out, grad_x
  fqc_*   torch.fake_quantize_per_channel_affine: x, scale [C], zero_point [C] i32, axis
  lsqt_*  torch._fake_quantize_learnable_per_tensor_affine: x, scale [1], zero_point [1],
          grad_factor -> out, grad_x, grad_scale, grad_zero_point; grad_scale_f64 and
          grad_zero_point_f64 are the float64 sums of PyTorch's per-element gradients (one op
          call per element), what a double accumulator gives
  lsqc_*  torch._fake_quantize_learnable_per_channel_affine likewise, with axis
          (lsq*_fused_ties_*: x near ties where PyTorch's kernel, which computes zp + x / scale
          as one fused multiply-add, and an unfused sum round apart; lsq*_error_terms: 1024
          elements inside the range, where its fused (q - zp) s - x shows in the scale gradient)
  obs_*   observers: spec scalars (bits, is_signed, symmetric, narrow, per_channel, axis,
          moving_average, averaging_constant, batches); x_<i> and, after batch i, min_<i>,
          max_<i>, scale_<i>, zero_point_<i> (i64)
  fqmod_* torch.ao.quantization.FakeQuantize with a moving-average observer: x_<i>, out_<i>,
          final scale and zero_point
x never reaches |x / scale| >= 2^63 or +-inf: PyTorch's CPU kernel overflows an int64 there.
"""
import math
import os
import random

import torch
from torch.ao.quantization import (FakeQuantize, MinMaxObserver, MovingAverageMinMaxObserver,
                                   MovingAveragePerChannelMinMaxObserver, PerChannelMinMaxObserver)

from golden_format import GoldenWriter

torch.manual_seed(20240611)
rng = random.Random(20240611)
HERE = os.path.dirname(os.path.abspath(__file__))
w = GoldenWriter(os.path.join(HERE, "quant.txt"), __doc__)
EDGES = [1e6, -1e6, 3e9, -3e9, 0.0, -0.0]


def qrange(bits, signed, narrow=False):
    if signed:
        return -(1 << (bits - 1)) + (1 if narrow else 0), (1 << (bits - 1)) - 1
    return 0, (1 << bits) - 1


def random_shape(rank, lo=1, hi=5, min_numel=12, max_numel=120):
    hi = max(hi, {1: max_numel, 2: 12}.get(rank, hi))  # low ranks need longer dimensions
    while True:
        shape = [rng.randint(lo, hi) for _ in range(rank)]
        if min_numel <= math.prod(shape) <= max_numel:
            return shape


def pick_scale(kind):
    if kind == "random":
        return float(torch.tensor(10 ** rng.uniform(-3, 0.5), dtype=torch.float32))
    if kind == "pow2":  # ties (k + 0.5) * scale are exact
        return 2.0 ** rng.randint(-8, 2)
    if kind == "tiny":
        return rng.choice([1.1920928955078125e-07, 1e-9, 3.7e-12])
    return rng.choice([1e4, 3.7e8, 65536.0])  # large


def values(n, scale, zp, qmin, qmax, edges=True, nan=False):
    """n float32 values: uniform over a bit more than the range, ties, grid points, edges."""
    s = float(scale)
    lo, hi = (qmin - zp - 2.5) * s, (qmax - zp + 2.5) * s
    v = [rng.uniform(lo, hi) for _ in range(n)]
    k_lo, k_hi = qmin - zp - 2, qmax - zp + 1
    m = n // 5
    v[:m] = [(rng.randint(k_lo, k_hi) + 0.5) * s for _ in range(m)]
    v[m:2 * m] = [rng.randint(k_lo, k_hi) * s for _ in range(m)]
    extra = [e for e in EDGES if abs(e / s) < 2.0 ** 62] if edges else []
    if nan:
        extra.append(float("nan"))
    extra = extra[:n - 2 * m]
    v[2 * m:2 * m + len(extra)] = extra
    rng.shuffle(v)
    return v


def as_tensor(v, shape, dtype=torch.float32):
    return torch.tensor(v, dtype=torch.float64).to(dtype).reshape(shape)


def gout_like(t):
    return torch.rand(t.shape, dtype=t.dtype) + 0.5


# ---- fake_quantize_per_tensor_affine ---------------------------------------------------------
def fqt_case(name, x, scale, zp, qmin, qmax):
    x = x.clone().requires_grad_()
    out = torch.fake_quantize_per_tensor_affine(x, scale, zp, qmin, qmax)
    g = gout_like(out)
    (out * g).sum().backward()
    w.case(name)
    for k, v in (("scale", scale), ("zero_point", zp), ("qmin", qmin), ("qmax", qmax)):
        w.scalar(k, v)
    w.tensor("x", x)
    w.tensor("gout", g)
    w.tensor("out", out)
    w.tensor("grad_x", x.grad)
    w.end()


def zero_point_for(symmetric, signed, qmin, qmax):
    if symmetric:
        return 0 if signed else (qmin + qmax + 1) // 2
    return rng.randint(qmin, qmax)


n = 0
for bits in range(2, 17):
    for signed in (True, False):
        for symmetric in (True, False):
            qmin, qmax = qrange(bits, signed)
            zp = zero_point_for(symmetric, signed, qmin, qmax)
            kind = ["random", "pow2", "random", "pow2", "tiny", "large"][n % 6]
            scale = pick_scale(kind)
            shape = random_shape(rng.randint(1, 4))
            x = as_tensor(values(math.prod(shape), scale, zp, qmin, qmax, nan=(n % 7 == 0)), shape)
            fqt_case("fqt_b%d_%s_%s_%s" % (bits, "s" if signed else "u",
                                           "sym" if symmetric else "aff", kind),
                     x, scale, zp, qmin, qmax)
            if n % 5 == 0:  # float64 inputs
                fqt_case("fqt64_b%d_%s_%s" % (bits, "s" if signed else "u", kind),
                         x.double(), scale, zp, qmin, qmax)
            n += 1
fqt_case("fqt_all_zero", torch.zeros(3, 4), 0.1, 3, 0, 255)
fqt_case("fqt_neg_zero", torch.tensor([-0.0, 0.0, -1e-9, -0.04, 0.04]), 0.1, 0, -128, 127)
fqt_case("fqt_ties_even", torch.arange(-10, 11, dtype=torch.float32) * 0.25 + 0.125, 0.25, 0,
         -128, 127)  # ties at (k + 0.5) * 0.25: half to even

# ---- fake_quantize_per_channel_affine --------------------------------------------------------
def fqc_case(name, x, scale, zp, axis, qmin, qmax):
    x = x.clone().requires_grad_()
    out = torch.fake_quantize_per_channel_affine(x, scale, zp, axis, qmin, qmax)
    g = gout_like(out)
    (out * g).sum().backward()
    w.case(name)
    for k, v in (("axis", axis), ("qmin", qmin), ("qmax", qmax)):
        w.scalar(k, v)
    w.tensor("x", x)
    w.tensor("scale", scale)
    w.tensor("zero_point", zp)
    w.tensor("gout", g)
    w.tensor("out", out)
    w.tensor("grad_x", x.grad)
    w.end()


def channel_values(shape, axis, scale, zp, qmin, qmax):
    """Per-channel `values` moved into place along `axis`."""
    c = shape[axis]
    per = math.prod(shape) // c
    moved = [shape[axis]] + [d for i, d in enumerate(shape) if i != axis]
    rows = [values(per, scale[i].item(), int(zp[i]), qmin, qmax, edges=(i % 2 == 0)) for i in range(c)]
    return torch.tensor(rows, dtype=torch.float64).to(torch.float32).reshape(moved).movedim(0, axis).contiguous()


n = 0
for bits in (2, 3, 4, 5, 6, 7, 8, 8, 10, 12, 16, 16):
    for signed in (True, False):
        for axis_kind in ("0", "1", "last"):
            rank = rng.randint(2, 4)
            shape = random_shape(rank, 1, 5, 8, 150)
            axis = {"0": 0, "1": 1, "last": rank - 1}[axis_kind]
            qmin, qmax = qrange(bits, signed)
            symmetric = n % 2 == 0
            c = shape[axis]
            kinds = ["random", "pow2", "tiny", "large"]
            scale = torch.tensor([pick_scale(kinds[(n + i) % 4] if i % 3 else "random") for i in range(c)],
                                 dtype=torch.float32)
            zp = torch.tensor([zero_point_for(symmetric, signed, qmin, qmax) for _ in range(c)],
                              dtype=torch.int32)
            x = channel_values(shape, axis, scale, zp, qmin, qmax)
            fqc_case("fqc_b%d_%s_%s_axis%s" % (bits, "s" if signed else "u",
                                                "sym" if symmetric else "aff", axis_kind),
                     x, scale, zp, axis, qmin, qmax)
            n += 1

# ---- learnable (LSQ) -----------------------------------------------------------------------
def lsq_forward(x, scale, zp, axis, qmin, qmax, gf):
    if axis is None:
        return torch._fake_quantize_learnable_per_tensor_affine(x, scale, zp, qmin, qmax, gf)
    return torch._fake_quantize_learnable_per_channel_affine(x, scale, zp, axis, qmin, qmax, gf)


def per_element_grads(x, g, scale, zp, axis, qmin, qmax, gf):
    """float64 sums of PyTorch's per-element scale / zero-point gradients."""
    ds = torch.zeros(scale.shape, dtype=torch.float64)
    dz = torch.zeros(scale.shape, dtype=torch.float64)
    flat_x, flat_g = x.detach().flatten(), g.flatten()
    channel = (torch.zeros(x.shape, dtype=torch.int64) if axis is None else
               torch.arange(x.shape[axis]).reshape([-1 if i == axis else 1 for i in range(x.dim())])
               .expand(x.shape).flatten())
    for i in range(flat_x.numel()):
        c = int(channel[i]) if axis is not None else 0
        s = scale.detach()[c:c + 1].clone().requires_grad_()
        z = zp.detach()[c:c + 1].clone().requires_grad_()
        xi = flat_x[i:i + 1].clone()
        if axis is not None:  # [1, 1]: PyTorch's per-channel backward mis-shapes 1-d inputs
            xi = xi.reshape(1, 1)
        y = lsq_forward(xi, s, z, None if axis is None else 0, qmin, qmax, gf)
        (y.reshape(1) * flat_g[i:i + 1]).sum().backward()
        ds[c] += s.grad.double()[0]
        dz[c] += z.grad.double()[0]
    return ds, dz


def lsq_case(name, x, scale, zp, axis, qmin, qmax, gf):
    x = x.clone().requires_grad_()
    scale = scale.clone().requires_grad_()
    zp = zp.clone().requires_grad_()
    out = lsq_forward(x, scale, zp, axis, qmin, qmax, gf)
    g = gout_like(out)
    (out * g).sum().backward()
    ds, dz = per_element_grads(x, g, scale, zp, axis, qmin, qmax, gf)
    w.case(name)
    for k, v in (("qmin", qmin), ("qmax", qmax), ("grad_factor", gf)):
        w.scalar(k, v)
    if axis is not None:
        w.scalar("axis", axis)
    w.tensor("x", x)
    w.tensor("scale", scale)
    w.tensor("zero_point", zp)
    w.tensor("gout", g)
    w.tensor("out", out)
    w.tensor("grad_x", x.grad)
    w.tensor("grad_scale", scale.grad)
    w.tensor("grad_zero_point", zp.grad)
    w.tensor("grad_scale_f64", ds)
    w.tensor("grad_zero_point_f64", dz)
    w.end()


def lsq_zero_point(kind, qmin, qmax):
    if kind == "int":
        return float(rng.randint(qmin, qmax))
    if kind == "frac":
        return rng.uniform(qmin, qmax)
    if kind == "half":  # exact .5: forward rounds half to even, the per-tensor backward trunc(zp + .5)
        return rng.choice([2.5, -1.5, qmin + 0.5, qmax - 0.5, (qmin + qmax) // 2 + 0.5])
    return rng.choice([qmax + 3.7, qmin - 2.2, qmin - 0.5, qmax + 0.5])  # out of range


n = 0
for bits in (2, 3, 4, 4, 5, 6, 8, 8, 8, 10, 12, 16):
    for signed in (True, False):
        for zkind in ("int", "frac", "half", "out"):
            qmin, qmax = qrange(bits, signed)
            per_channel = n % 2 == 1
            rank = rng.randint(1, 4) if not per_channel else rng.randint(2, 4)
            shape = random_shape(rank, 1, 5, 6, 60)
            gf = 1.0 if n % 3 else 1.0 / math.sqrt(math.prod(shape) * qmax)
            if per_channel:
                axis = [0, 1, rank - 1][n % 3]
                c = shape[axis]
                scale = torch.tensor([pick_scale(["random", "pow2"][i % 2]) for i in range(c)],
                                     dtype=torch.float32)
                zp = torch.tensor([lsq_zero_point(zkind if i % 2 == 0 else "frac", qmin, qmax)
                                   for i in range(c)], dtype=torch.float32)
                zp_int = torch.clamp(zp.round(), qmin, qmax).to(torch.int32)
                x = channel_values(shape, axis, scale, zp_int, qmin, qmax)
                name = "lsqc_b%d_%s_%s_axis%d" % (bits, "s" if signed else "u", zkind, axis)
            else:
                axis = None
                scale = torch.tensor([pick_scale(["random", "pow2"][n % 2 == 0])], dtype=torch.float32)
                zp = torch.tensor([lsq_zero_point(zkind, qmin, qmax)], dtype=torch.float32)
                zpi = int(min(max(round(zp.item()), qmin), qmax))
                x = as_tensor(values(math.prod(shape), scale.item(), zpi, qmin, qmax,
                                     edges=(n % 4 == 0)), shape)
                name = "lsqt_b%d_%s_%s" % (bits, "s" if signed else "u", zkind)
            lsq_case(name + ("_gf" if gf != 1.0 else ""), x, scale, zp, axis, qmin, qmax, gf)
            n += 1


def fused_tie_values(scale, zp, count):
    """float32 x near the ties of the backward's q = round(zp + x * (1/scale)) where one rounding
    (fused multiply-add, as PyTorch's AVX2 kernel computes it) and two roundings disagree."""
    inv = torch.tensor(1.0, dtype=torch.float32) / torch.tensor(scale, dtype=torch.float32)
    k = torch.arange(-40, 300, dtype=torch.float64)
    x = ((k + 0.5 - zp) / inv.double()).float()
    cands = [x]
    for direction in (math.inf, -math.inf):
        y = x
        for _ in range(8):
            y = torch.nextafter(y, torch.full_like(y, direction))
            cands.append(y)
    x = torch.cat(cands)
    fused = (x.double() * inv.double() + zp).float()
    unfused = x * inv + torch.tensor(zp, dtype=torch.float32)
    x = x[torch.round(fused) != torch.round(unfused)]
    return x[torch.randperm(x.numel())[:count]]


# near-tie x where a fused and an unfused zp + x/s round apart (zero points 3 and 120: the
# per-tensor backward uses trunc(zp + 0.5), the per-channel one round(zp), both equal here)
for scale in (0.0137, 0.0731):
    x = fused_tie_values(scale, 3.0, 24)
    lsq_case("lsqt_fused_ties_%g" % scale, x, torch.tensor([scale]), torch.tensor([3.0]), None, 0, 255, 1.0)
    rows = [fused_tie_values(s, z, 10) for s, z in ((scale, 3.0), (scale * 1.7, 120.0))]
    n = min(r.numel() for r in rows)
    lsq_case("lsqc_fused_ties_%g" % scale, torch.stack([r[:n] for r in rows]), torch.tensor([scale, scale * 1.7]),
             torch.tensor([3.0, 120.0]), 0, 0, 255, 1.0)
for zp in (2.5, -1.5, 3.5, -2.5):  # .5 zero points in the middle of the signed range
    x = torch.arange(-24, 24, dtype=torch.float32) * 0.0625 + 0.03125
    lsq_case("lsqt_half_zp_%g" % zp, x, torch.tensor([0.0625]), torch.tensor([zp]), None, -8, 7, 1.0)
    lsq_case("lsqc_half_zp_%g" % zp, x.reshape(2, 24), torch.tensor([0.0625, 0.125]),
             torch.tensor([zp, zp]), 0, -8, 7, 1.0)

# many elements inside the range with upstream gradients of both signs: the scale gradient is a
# sum of small error terms that cancel, where PyTorch's kernel computes each r = (q - zp) s - x
# as one fused multiply-subtract; a separately rounded product gives ~1e-6 relative apart
# (own generator, and the global one's state kept: the cases below keep their data)
rng_state = torch.get_rng_state()
gen = torch.Generator().manual_seed(7)
x = (torch.rand(1024, generator=gen) * 5.8 - 2.9).float()
lsq_case("lsqt_error_terms", x, torch.tensor([6.0 / 255]), torch.tensor([3.0]), None, -128, 127, 1.0)
x = torch.stack([(torch.rand(512, generator=gen) * 1.9 - 0.95).float(),
                 (torch.rand(512, generator=gen) * 250 - 5).float()])
lsq_case("lsqc_error_terms", x, torch.tensor([1.0 / 127, 1.0]), torch.tensor([0.0, 3.0]), 0, -128, 127,
         1.0)
torch.set_rng_state(rng_state)


# ---- observers -------------------------------------------------------------------------------
def observer_for(bits, signed, symmetric, narrow, per_channel, axis, moving):
    qmin, qmax = qrange(bits, signed, narrow)
    scheme = ((torch.per_channel_symmetric if symmetric else torch.per_channel_affine) if per_channel
              else (torch.per_tensor_symmetric if symmetric else torch.per_tensor_affine))
    if signed:
        dtype = torch.qint8 if bits <= 8 else torch.qint32
    else:
        dtype = torch.quint8
    kw = dict(dtype=dtype, qscheme=scheme)
    if not (bits == 8 and not narrow):  # 8-bit: PyTorch's default ranges (zero point 128 for quint8)
        kw.update(quant_min=qmin, quant_max=qmax)
    if per_channel:
        kw["ch_axis"] = axis
        cls = MovingAveragePerChannelMinMaxObserver if moving else PerChannelMinMaxObserver
    else:
        cls = MovingAverageMinMaxObserver if moving else MinMaxObserver
    if moving:
        kw["averaging_constant"] = 0.01
    return cls(**kw)


def obs_case(name, bits, signed, symmetric, narrow, per_channel, axis, moving, batches):
    obs = observer_for(bits, signed, symmetric, narrow, per_channel, axis, moving)
    w.case(name)
    for k, v in (("bits", bits), ("is_signed", signed), ("symmetric", symmetric),
                 ("narrow", narrow), ("per_channel", per_channel), ("axis", axis),
                 ("moving_average", moving), ("averaging_constant", 0.01),
                 ("batches", len(batches))):
        w.scalar(k, v)
    for i, x in enumerate(batches):
        obs(x)
        scale, zp = obs.calculate_qparams()
        w.tensor("x_%d" % i, x)
        w.tensor("min_%d" % i, obs.min_val.reshape(-1))
        w.tensor("max_%d" % i, obs.max_val.reshape(-1))
        w.tensor("scale_%d" % i, scale.reshape(-1))
        w.tensor("zero_point_%d" % i, zp.reshape(-1).to(torch.int64))
    w.end()


def batch(shape, kind):
    if kind == "zero":
        return torch.zeros(shape)
    if kind == "pos":
        return torch.rand(shape) * 3 + 0.5
    if kind == "neg":
        return -torch.rand(shape) * 2 - 0.25
    if kind == "tiny":
        return torch.randn(shape) * 1e-9
    if kind == "const":
        return torch.full(shape, 0.7)
    return torch.randn(shape) * rng.uniform(0.2, 4) + rng.uniform(-1, 1)


n = 0
for bits in (8, 8, 2, 3, 4, 6, 8, 10, 12, 16):
    for signed in (True, False):
        for symmetric in (True, False):
            for per_channel in (False, True):
                moving = (n // 2) % 2 == 0  # n % 2 alternates per_channel
                narrow = signed and symmetric and bits == 8 and n % 3 == 0
                rank = rng.randint(2, 4)
                shape = random_shape(rank, 2, 5, 8, 100)
                axis = [0, 1][(n // 4) % 2] if per_channel else 0
                kinds = ["rand", "rand", "rand", "rand"]
                kinds[0] = ["rand", "zero", "pos", "neg", "tiny", "const"][n % 6]
                batches = [batch(shape, k) for k in kinds[:rng.randint(3, 4)]]
                obs_case("obs_b%d_%s_%s%s_%s_%s_axis%d_%d" % (
                    bits, "s" if signed else "u", "sym" if symmetric else "aff",
                    "_narrow" if narrow else "", "pc" if per_channel else "pt",
                    "ma" if moving else "mm", axis, n), bits, signed, symmetric, narrow,
                    per_channel, axis, moving, batches)
                n += 1

# ---- FakeQuantize module ---------------------------------------------------------------------
def fqmod_case(name, bits, signed, symmetric, per_channel, axis, shape):
    qmin, qmax = qrange(bits, signed)
    obs_cls = MovingAveragePerChannelMinMaxObserver if per_channel else MovingAverageMinMaxObserver
    scheme = ((torch.per_channel_symmetric if symmetric else torch.per_channel_affine) if per_channel
              else (torch.per_tensor_symmetric if symmetric else torch.per_tensor_affine))
    kw = dict(observer=obs_cls, dtype=torch.qint8 if signed else torch.quint8, qscheme=scheme,
              averaging_constant=0.01)
    if bits != 8:
        kw.update(quant_min=qmin, quant_max=qmax)
    if per_channel:
        kw["ch_axis"] = axis
    write_fqmod(name, FakeQuantize(**kw), bits, signed, symmetric, per_channel, axis, shape)


# three calls of the module `fq` on growing random batches, then its scale and zero point
def write_fqmod(name, fq, bits, signed, symmetric, per_channel, axis, shape):
    w.case(name)
    for k, v in (("bits", bits), ("is_signed", signed), ("symmetric", symmetric),
                 ("per_channel", per_channel), ("axis", axis), ("calls", 3)):
        w.scalar(k, v)
    for i in range(3):
        x = torch.randn(shape) * (1 + i) + 0.3 * i
        w.tensor("x_%d" % i, x)
        w.tensor("out_%d" % i, fq(x))
    w.tensor("scale", fq.scale.reshape(-1))
    w.tensor("zero_point", fq.zero_point.reshape(-1).to(torch.int64))
    w.end()


fqmod_case("fqmod_u8_affine", 8, False, False, False, 0, [4, 6])
fqmod_case("fqmod_s8_symmetric", 8, True, True, False, 0, [3, 5, 2])
fqmod_case("fqmod_u4_affine", 4, False, False, False, 0, [10])
fqmod_case("fqmod_s8_pc_axis0", 8, True, True, True, 0, [4, 3, 2])
fqmod_case("fqmod_u8_pc_affine_axis1", 8, False, False, True, 1, [2, 5, 3])


# The activation range of get_default_qat_qconfig("fbgemm") (the reference script's): quint8
# [0, 255] with reduce_range, i.e. [0, 127], which the preset "int8_fbgemm" writes as uint7
# affine per-tensor. (That qconfig's FusedMovingAvgObsFakeQuantize computes its qparams with
# ATen's choose_qparams, a double-precision scale and a nudged zero point, not the observer's
# calculate_qparams that FakeQuantize uses and we match: its scales can differ by an ulp.)
def fqmod_fbgemm_case(name, shape):
    fq = FakeQuantize(observer=MovingAverageMinMaxObserver, quant_min=0, quant_max=255,
                      reduce_range=True, dtype=torch.quint8, qscheme=torch.per_tensor_affine,
                      averaging_constant=0.01)
    assert (fq.quant_min, fq.quant_max) == (0, 127)
    write_fqmod(name, fq, 7, False, False, False, 0, shape)


fqmod_fbgemm_case("fqmod_fbgemm_activation", [7, 9])

w.close()
