#!/usr/bin/env python3
"""Derives the Winograd F(2x2, r x r) matrices of framework/kernels/cpu/winograd.cpp and checks them.

Toom-Cook (Lavin & Gray 2016; Vincent et al., "On Improving the Numerical Stability of Winograd
Convolutions", 2017): for m outputs of an r-tap correlation on the points p_0.. and infinity,
  A^T[i][j] = p_j^i,  G[j][k] = p_j^k / prod_{l != j}(p_j - p_l),  the last column / row for infinity,
and B^T solves  sum_j A^T[i][j] G[j][k] B^T[j][l] = [l == i + k]  exactly (rational arithmetic).
Then checks y = A^T [(G g G^T) . (B^T d B)] A against the direct 2-D sum in float64 and prints the
float32 error of both, relative to the scale of the sums.

    /usr/bin/python3 scripts/winograd_matrices.py      (needs sympy and numpy)
"""
import numpy as np
import sympy as sp


def matrices(m, r, points):
    a = len(points) + 1
    assert a == m + r - 1
    at, g = sp.zeros(m, a), sp.zeros(a, r)
    for j, p in enumerate(points):
        f = sp.prod([p - q for q in points if q != p])
        for i in range(m):
            at[i, j] = sp.Integer(p) ** i
        for k in range(r):
            g[j, k] = sp.Integer(p) ** k / f
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


for r, points in ((3, [0, 1, -1]), (5, [0, 1, -1, 2, -2])):
    at, g, bt = matrices(2, r, points)
    print(f"F(2x2, {r}x{r}), points {points} and infinity")
    print("  B^T =", bt.tolist())
    print("  G   =", g.tolist())
    print("  A^T =", at.tolist())
    ew, ed = check(2, r, at, g, bt)
    print(f"  float32 error / scale, 16 channels: winograd {ew:.2e}, direct sum {ed:.2e}")
