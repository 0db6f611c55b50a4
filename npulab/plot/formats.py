"""Pictures of the storage formats: where each element of a tensor sits in NZ (lab 05) and in
NC1HWC0 (lab 06), and the img2col matrix ``load_3d`` writes into L0A (lab 06).

Each picture takes the shape it draws and an optional Axes (default a new figure) and returns
the Axes it drew into. The offsets a picture shows are :func:`npulab.formats.nz_offsets` and
:func:`npulab.formats.nc1hwc0_offsets` (the format conversions run on index arrays), which lab
05's NZ exercise is graded against too. The img2col picture shows the simulator's matrix
(:func:`npulab.kernels.examples.img2col.img2col_on_npu`).
"""
from __future__ import annotations

import numpy as np

from .. import formats as F
from ..kernels.examples.img2col import img2col_on_npu
from ._style import BLOCK_CMAP, BORDER_COLOR, CHANNEL_CMAP, PAD_COLOR, new_axes


def plot_nz(m: int = 20, n: int = 40, ax=None):
    """Each element of an (m, n) fp16 matrix coloured by its fractal, labelled with its offset
    in NZ storage (every 4th shown); returns the Axes."""
    off = F.nz_offsets(m, n)
    ax = new_axes(ax, (9, 4.2))
    frac = (np.arange(n)[None, :] // 16) * 100 + (np.arange(m)[:, None] // 16)
    ax.imshow(frac % 7, cmap=BLOCK_CMAP, aspect="auto", interpolation="nearest")
    for r in range(m):
        for c in range(n):
            if c % 4 == 0:
                ax.text(c, r, str(off[r, c]), ha="center", va="center", fontsize=5.5)
    for x in range(16, n, 16):
        ax.axvline(x - 0.5, color=BORDER_COLOR, lw=1.2)
    for y in range(16, m, 16):
        ax.axhline(y - 0.5, color=BORDER_COLOR, lw=1.2)
    ax.set_xticks(range(0, n, 8))
    ax.set_yticks(range(0, m, 4))
    ax.set_xlabel("column c")
    ax.set_ylabel("row r")
    ax.set_title(f"a {m} x {n} fp16 matrix in NZ: 16 x 16 fractals stored column of fractals by column, "
                 f"each row by row (numbers: storage offset)", fontsize=9)
    return ax


def plot_img2col(x_shape=(1, 3, 4, 4), k: int = 3, stride: int = 1, pad: int = 1, ax=None):
    """The img2col matrix of an fp16 NCHW map of ``x_shape`` (k x k kernel) from the simulator,
    each entry coloured by the input channel it holds (white: padding), labelled with its
    (h, w) for the first channels; returns the Axes."""
    c0 = F.c0_of(np.float16)
    a = img2col_on_npu(x_shape, k, stride, pad)
    n, c, h, w = x_shape
    m, kk = a.shape
    ax = new_axes(ax, (10, 3.6))
    ch = np.where(a >= 0, (a // (h * w)) % c, -1).astype(float)
    ax.imshow(np.ma.masked_less(ch, 0), cmap=CHANNEL_CMAP, vmin=0, vmax=7, aspect="auto",
              interpolation="nearest")
    for r in range(m):
        for col in range(kk):
            if a[r, col] >= 0 and col % c0 < c:
                hh, ww = divmod(a[r, col] % (h * w), w)
                ax.text(col, r, f"{hh}{ww}", ha="center", va="center", fontsize=4.5)
    for x0 in range(c0, kk, c0):
        ax.axvline(x0 - 0.5, color=BORDER_COLOR, lw=0.6)
    ax.set_xlabel(f"column: (c1, kh, kw, c0), C0 = {c0} channels innermost ({kk} = C1 x {k}x{k} x C0)")
    ax.set_ylabel("row: output pixel (n, oh, ow)")
    ax.set_title(f"img2col of a {n}x{c}x{h}x{w} fp16 map, {k}x{k} kernel, stride {stride}, pad {pad}, "
                 f"read back from L0A (colour: input channel, text: h w, white: padding)", fontsize=9)
    return ax


def plot_nc1hwc0(c: int = 20, h: int = 2, w: int = 3, dtype=np.float32, ax=None):
    """Storage offset of every (channel, pixel) of a 1 x c x h x w map in NC1HWC0, the padding
    channels in grey below a red line; returns the Axes."""
    c0 = F.c0_of(dtype)
    off = F.nc1hwc0_offsets(c, h, w, dtype)
    rows = off.shape[0]                                  # C1 x C0
    ax = new_axes(ax, (7, 4.2))
    ax.imshow((np.arange(rows)[:, None] // c0) + 0 * off, cmap=BLOCK_CMAP, aspect="auto",
              interpolation="nearest")
    for ch in range(rows):
        for p in range(h * w):
            ax.text(p, ch, str(off[ch, p]), ha="center", va="center", fontsize=6,
                    color="black" if ch < c else "grey")
    ax.axhline(c - 0.5, color=PAD_COLOR, lw=1)
    ax.set_xticks(range(h * w), [f"{p // w},{p % w}" for p in range(h * w)])
    ax.set_xlabel("pixel (h, w)")
    ax.set_ylabel("channel")
    ax.set_title(f"1x{c}x{h}x{w} {np.dtype(dtype).name} in NC1HWC0: C0 = {c0}, C1 = {rows // c0} "
                 f"(numbers: storage offset; below the red line: zero padding)", fontsize=9)
    return ax


__all__ = ["plot_nz", "plot_img2col", "plot_nc1hwc0"]
