"""Reductions on the vector unit (ops-nn's reduce family), as ``torch.sum``, ``torch.mean`` and
``torch.amax``: over any axes, with or without the reduced dims kept.

Op types: "ReduceSum", "ReduceMean", "ReduceMax", attributes ``axes`` (a tuple of ints; empty
reduces every axis, as the graph's ``axes=[]`` does) and ``keep_dims``
(:mod:`npulab.kernels.reduce`). Sums and means accumulate in fp32 for fp16 input.
"""
from __future__ import annotations

import numpy as np

from ..arch import DEFAULT_CHIP
from ..errors import ShapeError
from ..kernels.reduce import launch_reduce, reduce_shape, reduce_tiling
from ..kernels.vector_base import check_float
from .args import is_int
from .registry import TensorSpec, dispatch, register

#: op type -> the kernel's op
REDUCE_OPS = {"ReduceSum": "sum", "ReduceMean": "mean", "ReduceMax": "max"}


def _reduce(op_type):
    op = REDUCE_OPS[op_type]

    def infer(specs, chip, axes=(), keep_dims=False):
        (x,) = specs
        check_float(op_type, "input", x.dtype)
        return TensorSpec(reduce_shape(x.shape, axes, keep_dims, op_type), x.dtype)

    def tiling(specs, chip, axes=(), keep_dims=False):
        (x,) = specs
        infer(specs, chip, axes, keep_dims)
        return reduce_tiling(x.shape, x.dtype, axes, op, chip)

    def run(arrays, t, chip, mode, axes=(), keep_dims=False):
        x = arrays[0]
        return launch_reduce(x, t, reduce_shape(x.shape, axes, keep_dims, op_type), chip, mode)
    return dict(tiling=tiling, run=run, inputs=("x",), infer=infer)


register("ReduceSum", "reduce", summary="sum over any axes (keep_dims), fp32 accumulation; fp16/fp32",
         **_reduce("ReduceSum"))
register("ReduceMean", "reduce", summary="mean over any axes (keep_dims), fp32 accumulation; fp16/fp32",
         **_reduce("ReduceMean"))
register("ReduceMax", "reduce", summary="max over any axes (keep_dims), exact; fp16/fp32", **_reduce("ReduceMax"))


def _axes(dim, what) -> tuple:
    """torch's ``dim`` (None, an int or a sequence of ints) as the kernel's ``axes`` tuple."""
    if dim is None:
        return ()
    dims = (dim,) if is_int(dim) else tuple(dim)
    if not dims or not all(is_int(d) for d in dims):
        raise ShapeError(f"{what}: dim must be None, an integer or a non-empty sequence of integers, got {dim!r}")
    return tuple(int(d) for d in dims)


def _run(op_type, input, dim, keepdim, chip, return_trace):
    x = np.asarray(input)
    axes = _axes(dim, op_type)
    if x.ndim == 0:
        if axes not in ((), (0,), (-1,)):
            raise ShapeError(f"{op_type}: dim={dim} is out of range for a 0-d input (expected None, 0 or -1)")
        y, trace = dispatch(op_type, x.reshape(1), chip=chip, axes=(), keep_dims=False)
        return (y.reshape(()) if y is not None else None, trace) if return_trace else y.reshape(())
    y, trace = dispatch(op_type, x, chip=chip, axes=axes, keep_dims=bool(keepdim))
    return (y, trace) if return_trace else y


def sum(input, dim=None, keepdim: bool = False, *, chip=DEFAULT_CHIP, return_trace: bool = False):  # noqa: A001
    """``torch.sum``: the sum over ``dim`` (None: every axis), fp32 accumulation."""
    return _run("ReduceSum", input, dim, keepdim, chip, return_trace)


def mean(input, dim=None, keepdim: bool = False, *, chip=DEFAULT_CHIP, return_trace: bool = False):
    """``torch.mean``: the sum over ``dim`` (None: every axis) times 1 / its element count."""
    return _run("ReduceMean", input, dim, keepdim, chip, return_trace)


def amax(input, dim=None, keepdim: bool = False, *, chip=DEFAULT_CHIP, return_trace: bool = False):
    """``torch.amax``: the largest value over ``dim`` (None: every axis; torch's default ``()``
    means the same), exact; NaN if any value reduced is NaN."""
    return _run("ReduceMax", input, dim, keepdim, chip, return_trace)


__all__ = ["sum", "mean", "amax", "REDUCE_OPS"]
