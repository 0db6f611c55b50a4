"""Goldens of 2-D pooling on (N, C, H, W) inputs: max_pool2d (padding counts as -inf),
avg_pool2d (torch's divisors: the window inside the padded input with ``count_include_pad``,
inside the input without), and avg_pool2d_scale (the average times a scale).

Output sizes are torch's: floor((H + 2p - d (k - 1) - 1) / s) + 1, or with ``ceil_mode`` the
ceiling, dropping a last window that would start past the input and its left padding. The
window arguments are parsed as the operators parse them (:func:`npulab.ops.pooling.pool_window`).
"""
from __future__ import annotations

import numpy as np

from ...errors import ShapeError
from ..pooling import pool_window
from .arith import as_float64, result


def _out_size(size: int, k: int, s: int, p: int, d: int, ceil_mode: bool) -> int:
    last = size + 2 * p - (d * (k - 1) + 1)          # the last start where a whole window fits
    n = (last + (s - 1 if ceil_mode else 0)) // s + 1
    if ceil_mode and (n - 1) * s >= size + p:         # a window starts in the input or its left pad
        n -= 1
    return n


class _Windows:
    """The pooling windows of an (N, C, H, W) input: ``taps(plane)`` stacks, for each of the
    k_h x k_w taps, the values every output position sees there; ``plane`` is placed at
    ``offset`` in a canvas that holds every window, the rest is ``fill``."""

    def __init__(self, what, x, kernel_size, stride, padding, dilation, ceil_mode):
        if x.ndim != 4:
            raise ShapeError(f"{what}: input must be (N, C, H, W), got shape {x.shape}")
        w = pool_window(what, kernel_size, stride, padding, dilation)
        self.k, self.p, self.d = w["kernel_size"], w["padding"], w["dilation"]
        self.s = self.k if w["stride"] is None else w["stride"]
        if any(2 * p > k for p, k in zip(self.p, self.k)):
            raise ShapeError(f"{what}: padding {self.p} must be at most half the kernel size {self.k}")
        self.out = tuple(_out_size(x.shape[2 + i], self.k[i], self.s[i], self.p[i], self.d[i], ceil_mode)
                         for i in range(2))
        if min(self.out) < 1:
            raise ShapeError(f"{what}: the window {self.k} (dilation {self.d}, padding {self.p}) is "
                             f"larger than the input plane {x.shape[2:]}")
        self.canvas = tuple(max(x.shape[2 + i] + 2 * self.p[i], (self.out[i] - 1) * self.s[i]
                                + self.d[i] * (self.k[i] - 1) + 1) for i in range(2))

    def taps(self, plane: np.ndarray, offset, fill: float) -> np.ndarray:
        canvas = np.full(plane.shape[:2] + self.canvas, fill)
        (oh, ow), (h, w) = offset, plane.shape[2:]
        canvas[:, :, oh:oh + h, ow:ow + w] = plane
        return np.stack([canvas[:, :, i * self.d[0]: i * self.d[0] + (self.out[0] - 1) * self.s[0] + 1: self.s[0],
                                j * self.d[1]: j * self.d[1] + (self.out[1] - 1) * self.s[1] + 1: self.s[1]]
                         for i in range(self.k[0]) for j in range(self.k[1])])


def max_pool2d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
               return_indices=False):
    """The maximum of each (dilated) window, padding as -inf; the value ``ops.max_pool2d``
    approximates (``return_indices=True`` is refused, as by the operator)."""
    if return_indices:
        raise ShapeError("max_pool2d: return_indices=True is not supported (the operator returns the "
                         "maxima only)")
    x = as_float64(input)
    win = _Windows("max_pool2d", x, kernel_size, stride, padding, dilation, ceil_mode)
    return result(win.taps(x, win.p, -np.inf).max(axis=0))


def _average(what, input, kernel_size, stride, padding, ceil_mode, count_include_pad):
    x = as_float64(input)
    win = _Windows(what, x, kernel_size, stride, padding, 1, ceil_mode)
    (h, w), (ph, pw) = x.shape[2:], win.p
    counted = np.ones((1, 1, h + 2 * ph, w + 2 * pw)) if count_include_pad else np.ones((1, 1, h, w))
    divisor = win.taps(counted, (0, 0) if count_include_pad else win.p, 0.0).sum(axis=0)
    return win.taps(x, win.p, 0.0).sum(axis=0) / divisor


def avg_pool2d(input, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
               divisor_override=None):
    """The mean of each window: its sum over the number of its places inside the padded input
    (``count_include_pad``) or inside the input; the value ``ops.avg_pool2d`` approximates
    (``divisor_override`` is refused, as by the operator)."""
    if divisor_override is not None:
        raise ShapeError("avg_pool2d: divisor_override is not supported (the operator divides by "
                         "the window size)")
    return result(_average("avg_pool2d", input, kernel_size, stride, padding, ceil_mode, count_include_pad))


def avg_pool2d_scale(input, kernel_size, scale, stride=None, padding=0, ceil_mode=False,
                     count_include_pad=True):
    """avg_pool2d(input, ...) x scale; the value ``ops.avg_pool2d_scale`` approximates."""
    try:
        scale = float(scale)
    except (TypeError, ValueError):
        raise ShapeError(f"avg_pool2d_scale: scale must be a number, got {scale!r}") from None
    return result(_average("avg_pool2d_scale", input, kernel_size, stride, padding, ceil_mode,
                           count_include_pad) * scale)
