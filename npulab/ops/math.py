"""Element-wise binary math on the vector unit (CANN's ops-math family), with numpy/torch
broadcasting: add, mul, sub, div, maximum, minimum.

Op types: "Add" (same shape: the lab-02 kernel, bit-exact), "AddBroadcast", "Mul", "Sub",
"RealDiv", "Maximum" and "Minimum" (any shapes that broadcast; :mod:`npulab.kernels.broadcast`).
``add`` picks "Add" when the shapes match and "AddBroadcast" otherwise.

A Python number (or a 0-d array) with an array takes the array's dtype, as torch's type
promotion does for a scalar with a tensor: ``add(x_fp16, 2.0)`` is float16. The scalar is
rounded to that dtype first (the vector unit takes it so); torch keeps it in fp32 for fp16
arithmetic, so a scalar that is no fp16 value can put an fp16 result one ulp from torch's.
"""
from __future__ import annotations

import math

import numpy as np

from ..arch import DEFAULT_CHIP
from ..kernels.broadcast import broadcast_tiling, check_broadcast, launch_broadcast
from ..kernels.elementwise import add_tiling, check_add, launch_add, launch_add_relu
from .registry import TensorSpec, dispatch, register


def _add_tiling(specs, chip, buffer_num: int = 2):
    (xs, xd), (ys, yd) = specs
    check_add(xs, xd, ys, yd)
    return add_tiling(max(1, math.prod(xs)), xd, chip, buffer_num)


def _add_infer(specs, chip, buffer_num: int = 2):
    (xs, xd), (ys, yd) = specs
    check_add(xs, xd, ys, yd)
    return TensorSpec(xs, xd)


def _add_run(arrays, tiling, chip, mode, buffer_num: int = 2):
    x, y = arrays
    return launch_add(x, y, tiling, chip, mode)


register("Add", "math", _add_tiling, _add_run, "z = x + y, same shape, fp16/fp32",
         inputs=("x", "y"), infer=_add_infer)


def _add_relu_run(arrays, tiling, chip, mode, buffer_num: int = 2):
    x, y = arrays
    return launch_add_relu(x, y, tiling, chip, mode)


register("AddRelu", "math", _add_tiling, _add_relu_run,
         "z = relu(x + y), same shape, fp16/fp32: the residual Add and its ReLU in one kernel (UB fusion)",
         inputs=("x", "y"), infer=_add_infer)


def _bcast(op):
    def tiling(specs, chip, buffer_num: int = 2):
        (xs, xd), (ys, yd) = specs
        return broadcast_tiling(op, xs, xd, ys, yd, chip, buffer_num)

    def run(arrays, t, chip, mode, buffer_num: int = 2):
        return launch_broadcast(arrays[0], arrays[1], t, chip, mode)

    def infer(specs, chip, buffer_num: int = 2):
        (xs, xd), (ys, yd) = specs
        return TensorSpec(check_broadcast(op, xs, xd, ys, yd), np.dtype(xd))
    return dict(tiling=tiling, run=run, inputs=("x", "y"), infer=infer)


register("AddBroadcast", "math", summary="z = x + y with numpy/torch broadcasting, fp16/fp32", **_bcast("add"))
register("Mul", "math", summary="z = x * y with numpy/torch broadcasting, fp16/fp32", **_bcast("mul"))
register("Sub", "math", summary="z = x - y with numpy/torch broadcasting, fp16/fp32", **_bcast("sub"))
register("RealDiv", "math", summary="z = x / y with numpy/torch broadcasting, fp16/fp32", **_bcast("div"))
register("Maximum", "math", summary="z = max(x, y) with numpy/torch broadcasting (NaN wins), fp16/fp32",
         **_bcast("max"))
register("Minimum", "math", summary="z = min(x, y) with numpy/torch broadcasting (NaN wins), fp16/fp32",
         **_bcast("min"))


def _like(scalar: np.ndarray, a: np.ndarray) -> np.ndarray:
    """A 0-d operand in the dtype of the float array ``a`` it meets (torch: a scalar, or a 0-d
    tensor, does not promote a tensor's dtype); anything else as it is, for the dtype check."""
    if a.dtype.kind != "f" or scalar.dtype.kind not in "biuf":
        return scalar
    with np.errstate(over="ignore"):               # as torch: too large for fp16 becomes inf
        return scalar.astype(a.dtype)


def _operands(x, y):
    x, y = np.asarray(x), np.asarray(y)
    if y.ndim == 0 and x.ndim > 0:
        y = _like(y, x)
    elif x.ndim == 0 and y.ndim > 0:
        x = _like(x, y)
    return x, y


def add(x, y, chip=DEFAULT_CHIP, *, buffer_num: int = 2, return_trace: bool = False):
    """z = x + y on the simulated NPU (both fp16 or both fp32; a Python number or 0-d array
    takes the other operand's dtype). Same shapes run the Add kernel; shapes that broadcast
    (numpy/torch rules) run AddBroadcast. With ``return_trace`` returns (z, trace)."""
    x, y = _operands(x, y)
    op = "Add" if x.shape == y.shape else "AddBroadcast"
    z, trace = dispatch(op, x, y, chip=chip, buffer_num=buffer_num)
    return (z, trace) if return_trace else z


def add_relu(x, y, chip=DEFAULT_CHIP, *, buffer_num: int = 2, return_trace: bool = False):
    """z = relu(x + y) in one kernel (x and y of one shape, both fp16 or both fp32): the fused
    residual Add + ReLU. With ``return_trace`` returns (z, trace)."""
    x, y = np.asarray(x), np.asarray(y)
    z, trace = dispatch("AddRelu", x, y, chip=chip, buffer_num=buffer_num)
    return (z, trace) if return_trace else z


def mul(x, y, chip=DEFAULT_CHIP, *, buffer_num: int = 2, return_trace: bool = False):
    """z = x * y with numpy/torch broadcasting (both fp16 or both fp32; a Python number or 0-d
    array takes the other operand's dtype). With ``return_trace`` returns (z, trace)."""
    return _binary("Mul", x, y, chip, buffer_num, return_trace)


def _binary(op_type, x, y, chip, buffer_num, return_trace):
    x, y = _operands(x, y)
    z, trace = dispatch(op_type, x, y, chip=chip, buffer_num=buffer_num)
    return (z, trace) if return_trace else z


def sub(x, y, chip=DEFAULT_CHIP, *, buffer_num: int = 2, return_trace: bool = False):
    """z = x - y (``torch.sub``) with numpy/torch broadcasting (both fp16 or both fp32; a Python
    number or 0-d array takes the other operand's dtype). With ``return_trace`` returns (z, trace)."""
    return _binary("Sub", x, y, chip, buffer_num, return_trace)


def div(x, y, chip=DEFAULT_CHIP, *, buffer_num: int = 2, return_trace: bool = False):
    """z = x / y (``torch.div``, true division: CANN's RealDiv) with numpy/torch broadcasting;
    x / 0 is +-inf and 0 / 0 NaN, as in IEEE arithmetic."""
    return _binary("RealDiv", x, y, chip, buffer_num, return_trace)


def maximum(x, y, chip=DEFAULT_CHIP, *, buffer_num: int = 2, return_trace: bool = False):
    """z = max(x, y) elementwise (``torch.maximum``: a NaN in either operand gives NaN), with
    numpy/torch broadcasting."""
    return _binary("Maximum", x, y, chip, buffer_num, return_trace)


def minimum(x, y, chip=DEFAULT_CHIP, *, buffer_num: int = 2, return_trace: bool = False):
    """z = min(x, y) elementwise (``torch.minimum``: a NaN in either operand gives NaN), with
    numpy/torch broadcasting."""
    return _binary("Minimum", x, y, chip, buffer_num, return_trace)
