"""Element-wise math on the vector unit (CANN's ops-math family): Add."""
from __future__ import annotations

import math

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


def add(x, y, chip="910", *, buffer_num: int = 2, return_trace: bool = False):
    """z = x + y on the simulated NPU (fp16 or fp32, same shape). With ``return_trace`` returns
    (z, trace)."""
    z, trace = dispatch("Add", x, y, chip=chip, buffer_num=buffer_num)
    return (z, trace) if return_trace else z
