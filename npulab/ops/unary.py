"""Element-wise unary math on the vector unit (CANN's ops-math family), as ``torch``'s
functions: exp, log, sqrt, rsqrt, reciprocal, abs, neg, tanh, sigmoid, erf, pow (a scalar
exponent) and cast (float16 <-> float32), on numpy arrays.

Op types: "Exp", "Log", "Sqrt", "Rsqrt", "Reciprocal", "Abs", "Neg", "Tanh", "Sigmoid", "Erf"
(formulas of the activation kernel: :mod:`npulab.kernels.unary`), "Pows" (attribute
``exponent``: a number) and "Cast" (attribute ``dst_type``: "float16" or "float32").

Domains are IEEE's, as torch's: log of 0 is -inf and of x < 0 NaN, sqrt of x < 0 NaN, 1 / 0
inf. ``pow`` with a non-integer exponent computes exp(e ln x), defined for x >= 0; a negative
base there has no real result (torch gives NaN), and ``pow`` refuses it with an
:class:`~npulab.errors.ArgumentError` naming the first such value (the Pows kernel itself,
as the graph runtime launches it, gives NaN).
"""
from __future__ import annotations

import math

import numpy as np

from ..arch import DEFAULT_CHIP
from ..errors import ArgumentError
from ..kernels.activation import activation_tiling, launch_activation
from ..kernels.unary import cast_tiling, check_cast, launch_cast, pow_plan
from ..kernels.vector_base import check_float
from .activation import elementwise_op
from .registry import TensorSpec, dispatch, register

#: op type -> (formula of kernels.unary, torch name, summary)
UNARY_OPS = {
    "Exp": ("exp", "exp", "y = e^x; fp16 (fp32 inside the instruction)/fp32"),
    "Log": ("log", "log", "y = ln x (x < 0: NaN, 0: -inf); fp16/fp32"),
    "Sqrt": ("sqrt", "sqrt", "y = sqrt(x) (x < 0: NaN); fp16/fp32"),
    "Rsqrt": ("rsqrt", "rsqrt", "y = 1 / sqrt(x), one instruction; fp16/fp32"),
    "Reciprocal": ("reciprocal", "reciprocal", "y = 1 / x; fp16/fp32"),
    "Abs": ("abs", "abs", "y = |x|, exact; fp16/fp32"),
    "Neg": ("neg", "neg", "y = -x (one Muls by -1, exact); fp16/fp32"),
    "Tanh": ("tanh", "tanh", "y = tanh x = 1 - 2 / (1 + e^2x); fp16 (fp32 inside)/fp32"),
    "Sigmoid": ("sigmoid", "sigmoid", "y = 1 / (1 + e^-x); fp16 (fp32 inside)/fp32"),
    "Erf": ("erf", "erf", "y = erf(x), Ascend C's rational form on x clipped to +-3.92; fp16 (fp32 inside)/fp32"),
}
for _op, (_formula, _what, _summary) in UNARY_OPS.items():
    register(_op, "math", summary=_summary, **elementwise_op(_formula, _what))


def _pows_infer(specs, chip, exponent):
    (x,) = specs
    check_float("pow", "input", x.dtype)
    pow_plan(exponent)                                   # a finite number
    return TensorSpec(x.shape, x.dtype)


def _pows_tiling(specs, chip, exponent):
    x = _pows_infer(specs, chip, exponent)
    return activation_tiling(max(1, math.prod(x.shape)), x.dtype, "pows", chip, scalar=float(exponent))


def _pows_run(arrays, t, chip, mode, exponent):
    return launch_activation(arrays[0], t, chip, mode)


register("Pows", "math", _pows_tiling, _pows_run,
         "y = x ** exponent (a number): 2 one Mul, 0.5 one Sqrt, integers by squaring, others exp(e ln x) "
         "for x >= 0; fp16 (fp32 inside)/fp32", inputs=("x",), infer=_pows_infer)


def _cast_infer(specs, chip, dst_type):
    (x,) = specs
    _, dst = check_cast(x.dtype, dst_type)
    return TensorSpec(x.shape, dst)


def _cast_tiling(specs, chip, dst_type):
    (x,) = specs
    _cast_infer(specs, chip, dst_type)
    return cast_tiling(max(1, math.prod(x.shape)), x.dtype, dst_type, chip)


def _cast_run(arrays, t, chip, mode, dst_type):
    return launch_cast(arrays[0], t, chip, mode)


register("Cast", "math", _cast_tiling, _cast_run,
         "y = x converted to dst_type (float16 <-> float32, round to nearest even)", inputs=("x",),
         infer=_cast_infer)


def _run(op_type, input, chip, return_trace, **attrs):
    y, trace = dispatch(op_type, np.asarray(input), chip=chip, **attrs)
    return (y, trace) if return_trace else y


def exp(input, *, chip=DEFAULT_CHIP, return_trace: bool = False):
    """``torch.exp``: e ** x, float16 or float32, any shape."""
    return _run("Exp", input, chip, return_trace)


def log(input, *, chip=DEFAULT_CHIP, return_trace: bool = False):
    """``torch.log``: the natural logarithm (0 gives -inf, x < 0 NaN)."""
    return _run("Log", input, chip, return_trace)


def sqrt(input, *, chip=DEFAULT_CHIP, return_trace: bool = False):
    """``torch.sqrt`` (x < 0 gives NaN)."""
    return _run("Sqrt", input, chip, return_trace)


def rsqrt(input, *, chip=DEFAULT_CHIP, return_trace: bool = False):
    """``torch.rsqrt``: 1 / sqrt(x), one vector instruction."""
    return _run("Rsqrt", input, chip, return_trace)


def reciprocal(input, *, chip=DEFAULT_CHIP, return_trace: bool = False):
    """``torch.reciprocal``: 1 / x."""
    return _run("Reciprocal", input, chip, return_trace)


def abs(input, *, chip=DEFAULT_CHIP, return_trace: bool = False):  # noqa: A001 - torch's name
    """``torch.abs``: |x|, exact."""
    return _run("Abs", input, chip, return_trace)


def neg(input, *, chip=DEFAULT_CHIP, return_trace: bool = False):
    """``torch.neg``: -x, exact."""
    return _run("Neg", input, chip, return_trace)


def tanh(input, *, chip=DEFAULT_CHIP, return_trace: bool = False):
    """``torch.tanh``, as 1 - 2 / (1 + e^2x) in fp32 (see kernels.unary)."""
    return _run("Tanh", input, chip, return_trace)


def sigmoid(input, *, chip=DEFAULT_CHIP, return_trace: bool = False):
    """``torch.sigmoid``: 1 / (1 + e^-x) in fp32."""
    return _run("Sigmoid", input, chip, return_trace)


def erf(input, *, chip=DEFAULT_CHIP, return_trace: bool = False):
    """``torch.erf``: Ascend C's rational approximation x P(x^2) / Q(x^2) on x clipped to
    [-3.92, 3.92], in fp32 (see kernels.unary)."""
    return _run("Erf", input, chip, return_trace)


def pow(input, exponent, *, chip=DEFAULT_CHIP, return_trace: bool = False):  # noqa: A001 - torch's name
    """``torch.pow`` with a number as the exponent (CANN's Pows). Integers (squarings and
    products) take any base; other exponents compute exp(e ln x) and need x >= 0: a negative
    base with a non-integer exponent raises an ArgumentError (torch gives NaN there)."""
    x = np.asarray(input)
    if isinstance(exponent, (bool, np.bool_)) or not isinstance(exponent, (int, float, np.integer, np.floating)):
        raise ArgumentError(f"pow: exponent must be a number (a tensor exponent is elementwise Pow, which "
                            f"has no kernel here), got {exponent!r}")
    pow_plan(exponent)                                   # a finite number
    if not float(exponent).is_integer() and x.dtype.kind == "f" and x.size and np.nanmin(x) < 0:
        bad = x.reshape(-1)[np.argmax(x.reshape(-1) < 0)]
        raise ArgumentError(f"pow: the base has negative values (first: {bad}) and the exponent {exponent} "
                            f"is not an integer, so the result is not real (torch gives NaN). Use an "
                            f"integer exponent, or pow(abs(x), {exponent}) if the magnitude is meant")
    return _run("Pows", x, chip, return_trace, exponent=float(exponent))


def cast(input, dtype, *, chip=DEFAULT_CHIP, return_trace: bool = False):
    """``tensor.to(dtype)`` between float16 and float32 (round to nearest even; fp32 values
    beyond the fp16 range become +-inf)."""
    name = dtype if isinstance(dtype, str) else np.dtype(dtype).name    # "bfloat16" is refused by name
    return _run("Cast", input, chip, return_trace, dst_type=name)


__all__ = ["exp", "log", "sqrt", "rsqrt", "reciprocal", "abs", "neg", "tanh", "sigmoid", "erf", "pow", "cast",
           "UNARY_OPS"]
