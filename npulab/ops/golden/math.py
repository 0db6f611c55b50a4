"""Goldens of the vector unit's math: the broadcasting sub, div, maximum, minimum; the unary exp,
log, sqrt, rsqrt, reciprocal, abs, neg, tanh, sigmoid, erf, pow (a number as the exponent),
cast; the reductions sum, mean, amax (torch's ``dim`` and ``keepdim``).

Each is the plain float64 numpy expression of its definition (erf through ``math.erf``, good
to a few float64 ulps), on the operator's arguments. IEEE edge values are the operator's:
log(0) = -inf, sqrt(-1) = NaN, 1 / 0 = inf.
"""
from __future__ import annotations

import math

import numpy as np

from ...errors import ArgumentError, ShapeError
from ..args import is_int
from .arith import as_float64, result
from .vector import _operands, _sigmoid

_ERF = np.frompyfunc(math.erf, 1, 1)


def _ieee(fn, x):
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        return result(fn(x))


def sub(x, y):
    """x - y, broadcast; the value ``ops.sub`` approximates."""
    x, y = _operands(x, y, "sub")
    return result(x - y)


def div(x, y):
    """x / y, broadcast (true division); the value ``ops.div`` approximates."""
    x, y = _operands(x, y, "div")
    return _ieee(lambda a: a / y, x)


def maximum(x, y):
    """max(x, y) elementwise, broadcast, NaN if either is NaN; ``ops.maximum``."""
    x, y = _operands(x, y, "maximum")
    return result(np.maximum(x, y))


def minimum(x, y):
    """min(x, y) elementwise, broadcast, NaN if either is NaN; ``ops.minimum``."""
    x, y = _operands(x, y, "minimum")
    return result(np.minimum(x, y))


def exp(input):
    """e ** x; ``ops.exp``."""
    return _ieee(np.exp, as_float64(input))


def log(input):
    """ln x; ``ops.log``."""
    return _ieee(np.log, as_float64(input))


def sqrt(input):
    """sqrt(x); ``ops.sqrt``."""
    return _ieee(np.sqrt, as_float64(input))


def rsqrt(input):
    """1 / sqrt(x); ``ops.rsqrt``."""
    return _ieee(lambda x: 1.0 / np.sqrt(x), as_float64(input))


def reciprocal(input):
    """1 / x; ``ops.reciprocal``."""
    return _ieee(lambda x: 1.0 / x, as_float64(input))


def abs(input):  # noqa: A001 - torch's name
    """|x|; ``ops.abs``."""
    return result(np.abs(as_float64(input)))


def neg(input):
    """-x; ``ops.neg``."""
    return result(-as_float64(input))


def tanh(input):
    """tanh x; ``ops.tanh``."""
    return result(np.tanh(as_float64(input)))


def sigmoid(input):
    """1 / (1 + e^-x), without overflow in either tail; ``ops.sigmoid``."""
    return result(_sigmoid(as_float64(input)))


def erf(input):
    """erf x = 2 / sqrt(pi) * integral of e^-t^2 from 0 to x; ``ops.erf``."""
    x = as_float64(input)
    return result(np.asarray(_ERF(x), dtype=np.float64).reshape(x.shape))


def pow(input, exponent):  # noqa: A001 - torch's name
    """x ** exponent for a number ``exponent``; a negative base with a non-integer exponent has
    no real value and is refused, as ``ops.pow`` refuses it."""
    if isinstance(exponent, (bool, np.bool_)) or not isinstance(exponent, (int, float, np.integer, np.floating)):
        raise ArgumentError(f"pow: exponent must be a number, got {exponent!r}")
    x = as_float64(input)
    integer = math.isfinite(exponent) and float(exponent).is_integer()
    if not integer and x.size and np.nanmin(x) < 0:
        raise ArgumentError(f"pow: the base has negative values and the exponent {exponent} is not an "
                                f"integer, so the result is not real")
    return _ieee(lambda a: np.power(a, float(exponent)), x)


def cast(input, dtype):
    """x converted to ``dtype`` (float16 or float32): the float64 value of x itself (the
    rounding to dtype is the tolerance table's); ``ops.cast``."""
    name = dtype if isinstance(dtype, str) else np.dtype(dtype).name
    if name not in ("float16", "float32"):
        raise ShapeError(f"cast: dtype {name!r} is not float16 or float32")
    return result(as_float64(input))


def _dims(dim, x, what):
    if dim is None:
        return None
    dims = (dim,) if is_int(dim) else tuple(dim)
    if not dims or not all(is_int(d) for d in dims):
        raise ShapeError(f"{what}: dim must be None, an integer or a non-empty sequence of integers, got {dim!r}")
    nd = max(x.ndim, 1)
    if any(not -nd <= d < nd for d in dims):
        raise ShapeError(f"{what}: dim {dim} is out of range for a {x.ndim}-d input")
    return tuple(int(d) % nd for d in dims) if x.ndim else None


def sum(input, dim=None, keepdim=False):  # noqa: A001 - torch's name
    """The sum over ``dim`` (None: every axis); ``ops.sum``."""
    x = as_float64(input)
    return result(np.sum(x, axis=_dims(dim, x, "sum"), keepdims=bool(keepdim)))


def mean(input, dim=None, keepdim=False):
    """The mean over ``dim`` (None: every axis); ``ops.mean``."""
    x = as_float64(input)
    return result(np.mean(x, axis=_dims(dim, x, "mean"), keepdims=bool(keepdim)))


def amax(input, dim=None, keepdim=False):
    """The largest value over ``dim`` (None: every axis), NaN if one is NaN; ``ops.amax``."""
    x = as_float64(input)
    return result(np.max(x, axis=_dims(dim, x, "amax"), keepdims=bool(keepdim)))
