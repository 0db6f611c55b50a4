"""How a golden takes its inputs and gives its result: float inputs widened exactly to float64;
the cube's int8 inputs to int64, whose products and sums are exact (as the cube's int32
accumulator is); and the FixPipe epilogue the cube ops share (bias, dequant scale, ReLU, in
that order)."""
from __future__ import annotations

import numpy as np

from ...errors import ShapeError


def as_float64(a) -> np.ndarray:
    """``a`` (an array, a number) as float64: exact for float16 and float32 values."""
    return np.asarray(a).astype(np.float64)


def result(y) -> np.ndarray:
    """A golden's float result: a float64 array (a 0-d array, never a numpy scalar)."""
    return np.asarray(y, dtype=np.float64)


def cube_operands(a, b, what: str, names=("a", "b")):
    """The two operands of a cube op, widened: int64 when both are integers (int8: exact), else
    float64; and whether they are integers. An integer and a float operand do not mix."""
    a, b = np.asarray(a), np.asarray(b)
    integer = a.dtype.kind in "iu"
    if integer != (b.dtype.kind in "iu"):
        raise ShapeError(f"{what}: {names[0]} is {a.dtype} and {names[1]} is {b.dtype}; both must be "
                         f"integers (int8) or both floats (float16, float32)")
    wide = np.int64 if integer else np.float64
    return a.astype(wide), b.astype(wide), integer


def epilogue(acc: np.ndarray, integer: bool, what: str, bias=None, scale=None, relu=False,
             axis: int = -1) -> np.ndarray:
    """What FixPipe applies to the accumulator ``acc``, in order: + bias, x the dequant scale
    (int8 only: a number, or one value per channel), ReLU. ``axis`` is the channel axis (the
    output columns of a matmul, the output channels of a conv). An integer result without a
    scale is exact and returned as int32 (the accumulator's dtype); anything else as float64."""
    n = acc.shape[axis]
    view = [1] * acc.ndim
    view[axis] = n

    def per_channel(v, name):
        v = np.asarray(v)
        if v.shape != (n,):
            raise ShapeError(f"{what}: {name} must have shape ({n},) (one value per output channel), "
                             f"got {v.shape}")
        return v.reshape(view)
    if bias is not None:
        b = per_channel(bias, "bias")
        if integer and b.dtype.kind not in "iu":
            raise ShapeError(f"{what}: an int8 op takes an integer bias (added in int32), got {b.dtype}")
        acc = acc + b.astype(acc.dtype)
    if scale is not None:
        if not integer:
            raise ShapeError(f"{what}: scale= (dequantisation) is for int8 inputs")
        s = np.asarray(scale, dtype=np.float64)
        acc, integer = acc * (s if s.ndim == 0 else per_channel(s, "scale")), False
    if relu:
        acc = np.maximum(acc, 0)
    return acc.astype(np.int32) if integer else result(acc)
