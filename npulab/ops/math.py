"""Element-wise math on the vector unit (CANN's ops-math family): Add and Mul, with numpy/torch
broadcasting.

Op types: "Add" (same shape: the lab-02 kernel, bit-exact), "AddBroadcast" and "Mul" (any
shapes that broadcast; :mod:`npulab.kernels.broadcast`). ``add`` picks "Add" when the shapes
match and "AddBroadcast" otherwise.
"""
from __future__ import annotations

import math

import numpy as np

from ..kernels.broadcast import broadcast_tiling, launch_broadcast
from ..kernels.elementwise import add_tiling, check_add, launch_add
from .registry import dispatch, register


def _add_tiling(specs, chip, buffer_num: int = 2):
    (xs, xd), (ys, yd) = specs
    check_add(xs, xd, ys, yd)
    return add_tiling(max(1, math.prod(xs)), xd, chip, buffer_num)


def _add_run(arrays, tiling, chip, mode, buffer_num: int = 2):
    x, y = arrays
    return launch_add(x, y, tiling, chip, mode)


register("Add", "math", _add_tiling, _add_run, "z = x + y, same shape, fp16/fp32")


def _bcast(op):
    def tiling(specs, chip, buffer_num: int = 2):
        (xs, xd), (ys, yd) = specs
        return broadcast_tiling(op, xs, xd, ys, yd, chip, buffer_num)

    def run(arrays, t, chip, mode, buffer_num: int = 2):
        return launch_broadcast(arrays[0], arrays[1], t, chip, mode)
    return tiling, run


register("AddBroadcast", "math", *_bcast("add"), "z = x + y with numpy/torch broadcasting, fp16/fp32")
register("Mul", "math", *_bcast("mul"), "z = x * y with numpy/torch broadcasting, fp16/fp32")


def add(x, y, chip="910", *, buffer_num: int = 2, return_trace: bool = False):
    """z = x + y on the simulated NPU (both fp16 or both fp32). Same shapes run the Add kernel;
    shapes that broadcast (numpy/torch rules) run AddBroadcast. With ``return_trace`` returns
    (z, trace)."""
    x, y = np.asarray(x), np.asarray(y)
    op = "Add" if x.shape == y.shape else "AddBroadcast"
    try:
        np.broadcast_shapes(x.shape, y.shape)
    except ValueError:
        check_add(x.shape, x.dtype, y.shape, y.dtype)     # the same-shape rule's message
    z, trace = dispatch(op, x, y, chip=chip, buffer_num=buffer_num)
    return (z, trace) if return_trace else z


def mul(x, y, chip="910", *, buffer_num: int = 2, return_trace: bool = False):
    """z = x * y with numpy/torch broadcasting (both fp16 or both fp32). With ``return_trace``
    returns (z, trace)."""
    z, trace = dispatch("Mul", np.asarray(x), np.asarray(y), chip=chip, buffer_num=buffer_num)
    return (z, trace) if return_trace else z
