"""The conv kernel's layouts in GM, made on the host from torch's NCDHW (CANN's TransData, outside
the kernel): input N C1 D H W C0 per (enlarged) group (NC1HWC0 for 2-D: D = 1), weights
FRACTAL_Z (C1 x taps, N1, 16, C0) per group, per-channel epilogue vectors padded to the
enlarged groups, and the output ND (batch x pixels, Cout) = NHWC back to NCDHW.
"""
from __future__ import annotations

import numpy as np

from ...arch import FRACTAL_ROWS
from .problem import C04, ConvProblem


def pack_input(x: np.ndarray, p: ConvProblem) -> np.ndarray:
    """(N, Cin, D, H, W) -> (N, G', C1, D, H, W, C0): per enlarged group, channels padded with
    zeros to C1 x C0 (NC1HWC0 for one group and D = 1; NC1HWC0_C04, C1 = 1, C0 = 4, with c04)."""
    n, cin, d, h, w = x.shape
    g, ce, c0, c1 = p.groups, p.cin_e, p.c0, p.c1
    xp = np.zeros((n, g * ce, d, h, w), dtype=x.dtype)
    xp[:, :cin] = x
    xg = np.zeros((n, g, c1 * c0, d, h, w), dtype=x.dtype)
    xg[:, :, :ce] = xp.reshape(n, g, ce, d, h, w)
    return np.ascontiguousarray(xg.reshape(n, g, c1, c0, d, h, w).transpose(0, 1, 2, 4, 5, 6, 3))


def pack_weight(wt: np.ndarray, p: ConvProblem) -> np.ndarray:
    """(Cout, Cin_g, kd, kh, kw) -> FRACTAL_Z per enlarged group (G', C1 x taps, N1, 16, C0):
    the merged groups' weights block-diagonal, zeros elsewhere. For one group and kd = 1 this
    is :func:`npulab.formats.nchw_to_fractal_z`.

    C04 (FRACTAL_Z_C04): one group, K = (tap, channel) with 4 channels per tap, padded with
    zeros to K0 once: (1, K / 16, N1, 16, 16)."""
    cout, cin_g, kd, kh, kw = wt.shape
    n16 = p.n1 * FRACTAL_ROWS
    if p.c04:
        taps, kk = kd * kh * kw, p.k
        w4 = np.zeros((n16, taps, C04), dtype=wt.dtype)
        w4[:cout, :, :cin_g] = wt.reshape(cout, cin_g, taps).transpose(0, 2, 1)
        wk = np.zeros((n16, kk), dtype=wt.dtype)
        wk[:, :taps * C04] = w4.reshape(n16, taps * C04)
        z = wk.reshape(p.n1, FRACTAL_ROWS, kk // p.k0, p.k0).transpose(2, 0, 1, 3)
        return np.ascontiguousarray(z.reshape(1, kk // p.k0, p.n1, FRACTAL_ROWS, p.k0))
    e = p.cin_e // cin_g                     # groups merged into one
    cout_g = p.cout_e // e
    g, c0, c1, n1 = p.groups, p.c0, p.c1, p.n1
    we = np.zeros((g, n16, c1 * c0, kd, kh, kw), dtype=wt.dtype)
    for gi in range(cout // cout_g):
        gp, j = divmod(gi, e)
        we[gp, j * cout_g:(j + 1) * cout_g, j * cin_g:(j + 1) * cin_g] = wt[gi * cout_g:(gi + 1) * cout_g]
    z = we.reshape(g, n1, FRACTAL_ROWS, c1, c0, kd, kh, kw).transpose(0, 3, 5, 6, 7, 1, 2, 4)
    return np.ascontiguousarray(z.reshape(g, c1 * kd * kh * kw, n1, FRACTAL_ROWS, c0))


def pack_vector(v: np.ndarray, p: ConvProblem, dtype) -> np.ndarray:
    """A per-output-channel vector (Cout,) padded to G' x cout_e (the enlarged groups' channels)."""
    out = np.zeros(p.groups * p.cout_e, dtype=dtype)
    out[:v.shape[0]] = v
    return out


def unpack_output(y: np.ndarray, p: ConvProblem) -> np.ndarray:
    """(batch x pixels, Cout) NHWC -> (N, Cout, D, H, W)."""
    g = p.geom
    return np.ascontiguousarray(y.reshape(p.batch, g.od, g.oh, g.ow, p.cout).transpose(0, 4, 1, 2, 3))


def packed_sizes(p: ConvProblem) -> tuple[int, int]:
    """Elements of the packed input and the packed weights (what a timing-only run allocates
    nothing for but the sizes)."""
    g = p.x_geom
    return (p.batch * p.groups * p.c1 * p.c0 * g.d * g.h * g.w,
            p.groups * p.k * p.n1 * FRACTAL_ROWS)


__all__ = ["pack_input", "pack_weight", "pack_vector", "unpack_output", "packed_sizes"]
