"""Golden vectors for microscaling fake quantization (tests/quant/test_mx.cpp).

    /usr/bin/python3 tests/golden/gen_mx_golden.py   # numpy only; writes tests/golden/mx.txt

PyTorch 1.13 has no MX types, so this is a small reference written from the OCP Microscaling
Formats (MX) v1.0 specification, independent of the C++ code: every element format is built
from its bit encoding (sign, ebits, mbits, bias; section 5.3 "Concrete MX-compliant formats")
into the table of its finite values, checked against the spec's numbers (E2M1's eight values,
the max normals 448 / 57344 / 28 / 7.5 / 6, E8M0's 2^-127 .. 2^127 and NaN 0xFF), and a value
rounds to the nearest table entry, ties to the entry with the even code (roundTiesToEven),
magnitudes above the largest normal saturating to it.

OCP MX (section 6.3, Algorithm 1), per block of k elements:
  shared_exp = floor(log2(max_i |V_i|)) - emax_elem, clamped below to E8M0's -127 (an all-zero
  block gets -127); above 127, or a block holding NaN / inf, the scale is NaN (E8M0 0xFF) and
  the whole block is NaN (Microsoft's microxcaling reference, mx/mx_ops.py, does the same);
  X = 2^shared_exp; P_i = round(V_i / X) in the element format; y_i = P_i * X.
  MXINT8: int8 codes with an implicit 2^-6 (emax_elem 0), symmetric -127..127 as microxcaling.
  The C++ code's STE mask is [|V_i / X| <= max normal].
NVFP4 (torchao prototype/mx_formats/nvfp4_tensor.py, nvfp4_quantize with a per-tensor scale),
every step in float32:
  pts = max(amax(tensor) / (448 * 6), FLT_MIN)   (torchao divides by zero for an all-zero
  tensor; the FLT_MIN floor is ours); per block of 16: s = pts * e4m3(clamp(block_amax / 6 /
  pts, 2^-6, 448)); y = e2m1(clamp(x / s, -6, 6)) * s.
Blocks run over the dimensions from `axis` on, flattened row-major; the last block of a row may be
shorter (the spec's padding with zeros, which leaves the amax unchanged).

Cases: tables (table_<fmt>: every non-negative finite value), then per format <fmt>_<what>:
scalars format (C++ Format enum: 0 int (MXINT8), 1 fp8_e4m3, 2 fp8_e5m2, 3 fp6_e3m2,
4 fp6_e2m3, 5 fp4_e2m1), nvfp4 (0/1), block, axis; tensors x, y (f32) and mask (u8).
"""
import math
import os
import random

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
rng = random.Random(20250101)
np_rng = np.random.default_rng(20250101)
FLT_MIN = 2.0 ** -126


# ---- element formats from their encodings ------------------------------------------------------
class Elem:
    def __init__(self, name, ebits, mbits, bias, code, max_normal_expected, special_top=None):
        self.name, self.code = name, code
        vals = []  # (value, code) for the non-negative finite encodings
        for bits in range(1 << (ebits + mbits)):
            e, m = bits >> mbits, bits & ((1 << mbits) - 1)
            if special_top and special_top(e, m, ebits, mbits):
                continue  # NaN / inf encodings
            if e == 0:
                v = m * 2.0 ** (1 - bias - mbits)  # subnormal
            else:
                v = (1 + m / 2.0 ** mbits) * 2.0 ** (e - bias)
            vals.append((v, bits))
        vals.sort()
        self.values = [v for v, _ in vals]
        self.codes = [c for _, c in vals]
        self.max = self.values[-1]
        assert self.max == max_normal_expected, (name, self.max)
        self.emax = math.frexp(self.max)[1] - 1

    def round(self, v):
        """Nearest value to the float v, ties to the even code, saturating; NaN kept."""
        if math.isnan(v):
            return v
        a = abs(v)
        if a >= self.max:
            r = self.max
        else:
            import bisect
            i = bisect.bisect_left(self.values, a)
            if self.values[i] == a:
                r = a
            else:
                lo, hi = self.values[i - 1], self.values[i]
                if a - lo < hi - a:
                    r = lo
                elif hi - a < a - lo:
                    r = hi
                else:
                    r = lo if self.codes[i - 1] % 2 == 0 else hi
        return math.copysign(r, v)


E4M3 = Elem("fp8_e4m3", 4, 3, 7, 1, 448.0, lambda e, m, eb, mb: e == 15 and m == 7)  # S.1111.111 NaN
E5M2 = Elem("fp8_e5m2", 5, 2, 15, 2, 57344.0, lambda e, m, eb, mb: e == 31)  # inf / NaN
E3M2 = Elem("fp6_e3m2", 3, 2, 3, 3, 28.0)
E2M3 = Elem("fp6_e2m3", 2, 3, 1, 4, 7.5)
E2M1 = Elem("fp4_e2m1", 2, 1, 1, 5, 6.0)

# the spec's numbers
assert E2M1.values == [0, 0.5, 1, 1.5, 2, 3, 4, 6]
assert (E4M3.emax, E5M2.emax, E3M2.emax, E2M3.emax, E2M1.emax) == (8, 15, 4, 2, 2)
assert E4M3.values[1] == 2.0 ** -9 and E5M2.values[1] == 2.0 ** -16  # min subnormals
assert E3M2.values[1] == 2.0 ** -4 and E2M3.values[1] == 2.0 ** -3
assert len(E4M3.values) == 127 and len(E5M2.values) == 124
E8M0 = {code: 2.0 ** (code - 127) for code in range(255)}  # 0xFF: NaN
assert E8M0[0] == 2.0 ** -127 and E8M0[254] == 2.0 ** 127 and E8M0[127] == 1.0


class MxInt8:
    """int8 codes * 2^-6, symmetric (microxcaling's int8: emax 0, max 127/64)."""
    name, code, emax, max = "mxint8", 0, 0, 127 / 64

    def round(self, v):
        if math.isnan(v):
            return v
        q = round(v * 64)  # Python's round: half to even
        return math.copysign(min(abs(q), 127) / 64, v)


FORMATS = [E4M3, E5M2, E3M2, E2M3, E2M1, MxInt8()]


def f32(v):
    return float(np.float32(v))


def mx_row(x, block, el):
    y, mask = [], []
    for b0 in range(0, len(x), block):
        blk = x[b0:b0 + block]
        if any(not math.isfinite(v) for v in blk):
            y += [math.nan] * len(blk)
            mask += [0] * len(blk)
            continue
        amax = max(abs(v) for v in blk)
        shared = math.frexp(amax)[1] - 1 - el.emax if amax > 0 else -127
        shared = max(shared, -127)
        if shared > 127:
            y += [math.nan] * len(blk)
            mask += [0] * len(blk)
            continue
        X = 2.0 ** shared
        for v in blk:
            p = v / X  # exact: a power of two
            mask.append(1 if abs(p) <= el.max else 0)
            y.append(f32(el.round(p) * X))
    return y, mask


def nvfp4_row(x, block, pts):
    F = np.float32
    y, mask = [], []
    for b0 in range(0, len(x), block):
        blk = x[b0:b0 + block]
        if any(not math.isfinite(v) for v in blk):
            y += [math.nan] * len(blk)
            mask += [0] * len(blk)
            continue
        amax = F(max(abs(v) for v in blk))
        scaled = F(F(amax / F(6)) / pts)
        scaled = min(max(scaled, F(2.0 ** -6)), F(448))
        s = F(pts * F(E4M3.round(float(scaled))))
        for v in blk:
            p = F(F(v) / s)
            mask.append(1 if abs(p) <= 6 else 0)
            y.append(float(F(F(E2M1.round(float(p))) * s)))
    return y, mask


def fake_quant(x, shape, axis, block, el, nvfp4):
    rows = math.prod(shape[:axis])
    n = len(x) // rows if rows else 0
    if nvfp4:
        finite = [abs(v) for v in x if math.isfinite(v)]
        amax = np.float32(max(finite) if finite else 0.0)
        pts = max(np.float32(amax / np.float32(448 * 6)), np.float32(FLT_MIN))
    y, m = [], []
    for r in range(rows):
        row = x[r * n:(r + 1) * n]
        yr, mr = nvfp4_row(row, block, pts) if nvfp4 else mx_row(row, block, el)
        y += yr
        m += mr
    return y, m


# ---- writer (tests/common/golden.h format) -------------------------------------------------------
out = open(os.path.join(HERE, "mx.txt"), "w")
out.write("# generated by gen_mx_golden.py (numpy %s) -- do not edit\n" % np.__version__)
for line in __doc__.strip().splitlines():
    out.write("# " + line + "\n")


def tensor(key, tag, shape, vals):
    fmt = "%.9g" if tag == "f32" else "%d"
    out.write("tensor %s %s %d %s : %s\n" % (key, tag, len(shape), " ".join(map(str, shape)),
                                              " ".join(fmt % v for v in vals)))


for el in FORMATS[:5]:
    out.write("case table_%s\nscalar format %d\n" % (el.name, el.code))
    tensor("values", "f32", [len(el.values)], el.values)
    tensor("codes", "i32", [len(el.codes)], el.codes)
    out.write("end\n")


# ---- inputs --------------------------------------------------------------------------------------
def ties(el, block):
    """A block pinned by amax = 2^(emax) X with X = 1 (shared 0): midpoints of neighbours."""
    vals = el.values if hasattr(el, "values") else [k / 64 for k in range(128)]
    vals = [v for v in vals if v <= el.max]
    top = 2.0 ** el.emax
    x = [top]
    k = 0
    while len(x) < block:
        i = k % (len(vals) - 1)
        mid = (vals[i] + vals[i + 1]) / 2
        x.append(mid if k % 2 == 0 else -mid)
        k += 1
    return [f32(v) for v in x]


def random_block(n, lo_exp, hi_exp):
    return [f32(rng.choice([-1, 1]) * 2.0 ** rng.uniform(lo_exp, hi_exp)) for _ in range(n)]


def inputs(el, block):
    cases = {}
    cases["ties"] = ([1, 2 * block], 1, ties(el, block) + [f32(v * 2.0 ** -5) for v in ties(el, block)])
    z = [0.0] * block
    z[3] = -0.0
    zeros_then = z + [f32(v) for v in np_rng.normal(0, 1, block)]
    cases["zeros"] = ([2, block], 1, zeros_then)
    sat = [f32(2.0 ** (el.emax + 1) * 0.97)] + random_block(block - 1, -3, el.emax + 0.9)
    cases["saturation"] = ([1, block], 1, sat)
    pow2 = [f32(2.0 ** 3)] + [f32(v) for v in np_rng.uniform(-8, 8, block - 1)]
    cases["pow2_amax"] = ([1, block], 1, pow2)
    nan_blocks = [f32(v) for v in np_rng.normal(0, 1, 3 * block)]
    nan_blocks[2] = math.nan
    nan_blocks[block + 5] = math.inf
    nan_blocks[2 * block + 1] = -math.inf
    cases["nan_inf"] = ([3 * block], 0, nan_blocks)
    odd = [f32(v) for v in np_rng.normal(0, 3, 3 * 37)]
    cases["odd_rows"] = ([3, 37], 1, odd)
    small = [f32(v) for v in np_rng.normal(0, 1, 2 * 3 * 5)]
    cases["short_row"] = ([2, 3, 5], 1, small)
    tiny = random_block(block, -149, -120) + random_block(block, -140, -100)
    cases["tiny"] = ([2, block], 1, tiny)
    huge = [f32(3.3e38)] + random_block(block - 1, 100, 127.9)
    cases["huge"] = ([1, block], 1, huge)
    wide = random_block(2 * block, -20, 20)
    cases["wide_range"] = ([2, block], 1, wide)
    axis2 = [f32(v) for v in np_rng.normal(0, 2, 4 * 2 * 40)]
    cases["axis2"] = ([4, 2, 40], 2, axis2)
    return cases


for el in FORMATS:
    for name, (shape, axis, x) in inputs(el, 32).items():
        y, m = fake_quant(x, shape, axis, 32, el, False)
        out.write("case mx_%s_%s\nscalar format %d\nscalar nvfp4 0\nscalar block 32\nscalar axis %d\n"
                  % (el.name, name, el.code, axis))
        tensor("x", "f32", shape, x)
        tensor("y", "f32", shape, y)
        tensor("mask", "u8", shape, m)
        out.write("end\n")

for name, (shape, axis, x) in inputs(E2M1, 16).items():
    if name == "nan_inf":  # per-tensor scale from the finite values; the non-finite blocks NaN
        pass
    y, m = fake_quant(x, shape, axis, 16, E2M1, True)
    out.write("case nvfp4_%s\nscalar format 5\nscalar nvfp4 1\nscalar block 16\nscalar axis %d\n" % (name, axis))
    tensor("x", "f32", shape, x)
    tensor("y", "f32", shape, y)
    tensor("mask", "u8", shape, m)
    out.write("end\n")
# NVFP4 where the block scale clamps at 2^-6 and where it rounds (a spread of block amaxes)
x = [f32(v) for v in np.concatenate([np_rng.normal(0, 1, 16) * 10.0 ** k for k in range(-4, 4)])]
y, m = fake_quant(x, [8, 16], 1, 16, E2M1, True)
out.write("case nvfp4_block_spread\nscalar format 5\nscalar nvfp4 1\nscalar block 16\nscalar axis 0\n")
tensor("x", "f32", [8, 16], x)
y0, m0 = fake_quant(x, [8 * 16], 0, 16, E2M1, True)
tensor("y", "f32", [8, 16], y0)
tensor("mask", "u8", [8, 16], m0)
out.write("end\n")
out.close()
