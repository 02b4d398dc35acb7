#!/usr/bin/env python3
"""Derives the Winograd F(2x2, r x r) matrices of framework/kernels/cpu/winograd.cpp and checks them;
then the integer 1-D F(m, r) tables of modules/quant/kernels/cpu/int8_winograd.cpp (the int8 row
Winograd), checks their exactness and int16 ranges, and compares them with the C++ tables.

Toom-Cook (Lavin & Gray 2016; Vincent et al., "On Improving the Numerical Stability of Winograd
Convolutions", 2017): for m outputs of an r-tap correlation on the points p_0.. and infinity,
  A^T[i][j] = p_j^i,  G[j][k] = p_j^k / prod_{l != j}(p_j - p_l),  the last column / row for infinity,
and B^T solves  sum_j A^T[i][j] G[j][k] B^T[j][l] = [l == i + k]  exactly (rational arithmetic).
Then checks y = A^T [(G g G^T) . (B^T d B)] A against the direct 2-D sum in float64 and prints the
float32 error of both, relative to the scale of the sums.

Integer tables: each row j of G and of B^T scaled to its primitive integer vector (the smallest
integer multiple), A^T's column j divided by both scales, and the whole A^T multiplied by the least
common denominator L:  L y = A' [(G' g) . (B' d)]  in integers (int8_winograd.h).

    /usr/bin/python3 scripts/winograd_matrices.py      (needs sympy and numpy)
"""
import math
import os
import re

import numpy as np
import sympy as sp


def matrices(m, r, points):
    a = len(points) + 1
    assert a == m + r - 1
    at, g = sp.zeros(m, a), sp.zeros(a, r)
    for j, p in enumerate(points):
        f = sp.prod([p - q for q in points if q != p])
        for i in range(m):
            at[i, j] = sp.Rational(p) ** i
        for k in range(r):
            g[j, k] = sp.Rational(p) ** k / f
    at[m - 1, a - 1] = 1
    g[a - 1, r - 1] = 1
    bt = sp.Matrix(a, a, lambda i, j: sp.Symbol(f"b{i}_{j}"))
    eqs = [sum(at[i, j] * g[j, k] * bt[j, l] for j in range(a)) - (1 if l == i + k else 0)
           for i in range(m) for k in range(r) for l in range(a)]
    bt = bt.subs(sp.solve(eqs, list(bt)))
    if g[0, 0] < 0:  # the sign convention of winograd.cpp: G's first row positive
        g[0, :] *= -1
        bt[0, :] *= -1
    return at, g, bt


def check(m, r, at, g, bt, channels=16, trials=200):
    f64 = [np.array(x.tolist(), dtype=np.float64) for x in (at, g, bt)]
    at32, g32, bt32 = [x.astype(np.float32) for x in f64]
    a = m + r - 1
    rng = np.random.default_rng(0)
    err_w, err_d = [], []
    for _ in range(trials):
        d = rng.standard_normal((channels, a, a))
        w = rng.standard_normal((channels, r, r))
        exact = np.array([[np.sum(w * d[:, i:i + r, j:j + r]) for j in range(m)] for i in range(m)])
        u = np.einsum("ak,ckl,bl->cab", f64[1], w, f64[1]).astype(np.float32)
        v = np.einsum("ai,cij,bj->cab", bt32, d.astype(np.float32), bt32)
        y = at32 @ (u * v).sum(0, dtype=np.float32) @ at32.T
        direct = np.array([[np.sum(w.astype(np.float32) * d[:, i:i + r, j:j + r].astype(np.float32),
                                   dtype=np.float32) for j in range(m)] for i in range(m)])
        scale = np.sqrt(channels * r * r)
        err_w.append(np.max(np.abs(y - exact)) / scale)
        err_d.append(np.max(np.abs(direct - exact)) / scale)
        # the algebra in float64: exact up to rounding
        y64 = f64[0] @ (np.einsum("ak,ckl,bl->cab", f64[1], w, f64[1]) *
                        np.einsum("ai,cij,bj->cab", f64[2], d, f64[2])).sum(0) @ f64[0].T
        assert np.max(np.abs(y64 - exact)) < 1e-9 * scale
    return np.max(err_w), np.max(err_d)


def primitive(row):
    """(the smallest integer multiple of row, the factor)"""
    den = sp.ilcm(*[sp.fraction(sp.nsimplify(x))[1] for x in row])
    ints = [int(x * den) for x in row]
    g = math.gcd(*[abs(v) for v in ints if v != 0])
    return [v // g for v in ints], den / g


def integer_tables(m, r, points):
    at, g, bt = matrices(m, r, points)
    n = m + r - 1
    G, B, scale = [], [], []
    for j in range(n):
        gj, sg = primitive(list(g.row(j)))
        bj, sb = primitive(list(bt.row(j)))
        G.append(gj), B.append(bj), scale.append(sg * sb)
    A = [[at[i, j] / scale[j] for j in range(n)] for i in range(m)]
    L = int(sp.ilcm(*[sp.fraction(sp.nsimplify(x))[1] for row in A for x in row]))
    A = [[int(x * L) for x in row] for row in A]
    return G, B, A, L


def check_integer(m, r, G, B, A, L, trials=2000):
    """exact on random and extreme centred inputs / int8 weights; the int16 bounds of V and U"""
    n = m + r - 1
    assert max(sum(abs(v) for v in row) for row in B) * 128 <= 32767, "V past int16"
    assert max(sum(abs(v) for v in row) for row in G) * 128 <= 32767, "U past int16"
    rng = np.random.default_rng(1)
    for t in range(trials):
        d = rng.integers(-128, 128, n) if t % 2 else rng.choice([-128, 127], n)
        w = rng.integers(-128, 128, r) if t % 3 else rng.choice([-128, 127], r)
        u = [sum(G[j][k] * int(w[k]) for k in range(r)) for j in range(n)]
        v = [sum(B[j][s] * int(d[s]) for s in range(n)) for j in range(n)]
        y = [sum(A[i][j] * u[j] * v[j] for j in range(n)) for i in range(m)]
        assert y == [L * sum(int(d[i + k]) * int(w[k]) for k in range(r)) for i in range(m)]


def cpp_table(name):
    """the integers of RowTransform `name` in int8_winograd.cpp, in declaration order"""
    src = open(os.path.join(os.path.dirname(__file__), "..", "modules", "quant", "kernels", "cpu",
                            "int8_winograd.cpp")).read()
    body = re.search(r"RowTransform " + name + r"\{(.*?)\};", src, re.S).group(1)
    body = re.sub(r"kRowF\d+", "", body).replace("odd_inverse(", "(")
    return [int(v) for v in re.findall(r"-?\d+", body)]


if __name__ == "__main__":
    for r, points in ((3, [0, 1, -1]), (5, [0, 1, -1, 2, -2])):
        at, g, bt = matrices(2, r, points)
        print(f"F(2x2, {r}x{r}), points {points} and infinity")
        print("  B^T =", bt.tolist())
        print("  G   =", g.tolist())
        print("  A^T =", at.tolist())
        ew, ed = check(2, r, at, g, bt)
        print(f"  float32 error / scale, 16 channels: winograd {ew:.2e}, direct sum {ed:.2e}")

    half = sp.Rational(1, 2)
    for name, m, r, points in (("kF43", 4, 3, [0, 1, -1, 2, -2]),
                               ("kF45", 4, 5, [0, 1, -1, 2, -2, half, -half]),
                               ("kF55", 5, 5, [0, 1, -1, 2, -2, half, -half, 3])):
        G, B, A, L = integer_tables(m, r, points)
        check_integer(m, r, G, B, A, L)
        e = (L & -L).bit_length() - 1
        print(f"integer F({m}, {r}), points {[str(p) for p in points]} and infinity: "
              f"L = {L} = 2^{e} * {L >> e}")
        print("  B' =", B)
        print("  G' =", G)
        print("  A' =", A)
        want = [m, r, m + r - 1] + [v for row in B for v in row] + [v for row in G for v in row] + \
            [v for row in A for v in row] + [L, e, L >> e]
        got = cpp_table(name)
        assert got == want, f"{name} in int8_winograd.cpp differs from the derivation:\n{got}\n{want}"
        print(f"  exact on 2000 centred int8 trials, |V|, |U| within int16; {name} in "
              "int8_winograd.cpp agrees")
