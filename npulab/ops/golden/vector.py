"""Goldens of the vector unit's element-wise ops and softmax: add and mul (numpy/torch
broadcasting), relu, gelu (the erf and the tanh form), silu, softmax along any axis.

A Python number (or a 0-d array) with a float array takes the array's dtype first, as the
operators' scalar rule says (:mod:`npulab.ops.math`): ``add(x_fp16, 0.1)`` approximates
x + float16(0.1).
"""
from __future__ import annotations

import math

import numpy as np

from ...errors import ShapeError
from ..args import is_int
from .arith import as_float64, result

_ERFC = np.frompyfunc(math.erfc, 1, 1)      # numpy has no erfc; math.erfc is good to a few ulps


def _operands(x, y, what):
    """x and y in float64, a 0-d one first rounded to the other's float dtype; they must
    broadcast."""
    def rounded(scalar, array):
        if array.dtype.kind != "f" or scalar.dtype.kind not in "biuf":
            return scalar
        with np.errstate(over="ignore"):                 # too large for fp16 is inf, as in torch
            return scalar.astype(array.dtype)
    x, y = np.asarray(x), np.asarray(y)
    if x.ndim == 0 and y.ndim > 0:
        x = rounded(x, y)
    if y.ndim == 0 and x.ndim > 0:
        y = rounded(y, x)
    try:
        np.broadcast_shapes(x.shape, y.shape)
    except ValueError:
        raise ShapeError(f"{what}: shapes {x.shape} and {y.shape} do not broadcast (numpy/torch "
                         f"rules: aligned from the last dim, each pair equal or one of them 1)") from None
    return as_float64(x), as_float64(y)


def add(x, y):
    """x + y, broadcast; the value ``ops.add`` approximates."""
    x, y = _operands(x, y, "add")
    return result(x + y)


def add_relu(x, y):
    """max(x + y, 0); the value ``ops.add_relu`` approximates."""
    x, y = _operands(x, y, "add_relu")
    if x.shape != y.shape:
        raise ShapeError(f"add_relu: x has shape {x.shape} and y has {y.shape}; they must match")
    return result(np.maximum(x + y, 0.0))


def mul(x, y):
    """x * y, broadcast; the value ``ops.mul`` approximates."""
    x, y = _operands(x, y, "mul")
    return result(x * y)


def relu(input):
    """max(x, 0); the value ``ops.relu`` approximates."""
    return result(np.maximum(as_float64(input), 0.0))


def _sigmoid(x: np.ndarray) -> np.ndarray:
    """1 / (1 + exp(-x)) as 1 / (1 + e) or e / (1 + e) with e = exp(-|x|): no overflow, and no
    cancellation in either tail."""
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1.0, e) / (1.0 + e)


def silu(input):
    """x * sigmoid(x); the value ``ops.silu`` approximates."""
    x = as_float64(input)
    return result(x * _sigmoid(x))


def gelu(input, approximate="none"):
    """x * Phi(x) = x / 2 * erfc(-x / sqrt(2)) (``approximate="none"``), or 0.5 x (1 + tanh(z)),
    z = sqrt(2 / pi) (x + 0.044715 x^3) (``"tanh"``), computed as x * sigmoid(2 z), the same
    value; erfc and the sigmoid keep the negative tail accurate where 1 + erf and 1 + tanh
    cancel. The value ``ops.gelu`` approximates."""
    if approximate not in ("none", "tanh"):
        raise ShapeError(f"gelu: approximate must be 'none' or 'tanh' (the erf or the tanh form), "
                         f"got {approximate!r}")
    x = as_float64(input)
    if approximate == "tanh":
        return result(x * _sigmoid(2.0 * math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))
    return result(0.5 * x * np.asarray(_ERFC(-x / math.sqrt(2.0)), dtype=np.float64))


def softmax(input, dim):
    """exp(x - max) / sum(exp(x - max)) along ``dim`` (negative counts from the end; a 0-d input
    is one value: 1.0); the value ``ops.softmax`` approximates."""
    x = as_float64(input)
    if dim is None or not is_int(dim):
        raise ShapeError(f"softmax: dim must be an integer (torch's implicit dim is deprecated), got {dim!r}")
    ndim = max(x.ndim, 1)
    if not -ndim <= dim < ndim:
        raise ShapeError(f"softmax: dim={dim} is out of range for a {x.ndim}-d input "
                         f"(expected {-ndim} .. {ndim - 1})")
    if x.ndim == 0:
        return result(np.ones(()))
    if x.size == 0:
        return result(x)
    e = np.exp(x - x.max(axis=dim, keepdims=True))
    return result(e / e.sum(axis=dim, keepdims=True))
