"""Activations and softmax (ops-nn's activation family) as in ``torch.nn.functional``:
relu, gelu, silu, softmax, on numpy arrays.

Op types: Relu, Gelu (attribute ``approximate``: "none" = erf form, "tanh"), Swish (SiLU, also
registered as "SiLU"), SoftmaxV2 (attribute ``dim``).
"""
from __future__ import annotations

import math

import numpy as np

from ..errors import ShapeError
from ..kernels.activation import activation_tiling, launch_activation
from ..kernels.softmax import launch_softmax, softmax_tiling
from .registry import dispatch, register


def _elementwise(activation):
    def tiling(specs, chip, **attrs):
        (x,) = specs
        return activation_tiling(max(1, math.prod(x.shape)), x.dtype, activation, chip)

    def run(arrays, t, chip, mode, **attrs):
        x = arrays[0]
        if x.size == 0:
            return x.copy(), None
        return launch_activation(x, t, chip, mode)
    return tiling, run


register("Relu", "activation", *_elementwise("relu"), "y = max(x, 0); fp16/fp32")
register("Swish", "activation", *_elementwise("silu"), "y = x * sigmoid(x) (SiLU); fp16 (fp32 inside)/fp32")
register("SiLU", "activation", *_elementwise("silu"), "alias of Swish")
_GELU = {"none": _elementwise("gelu_erf"), "tanh": _elementwise("gelu_tanh")}


def _gelu_tiling(specs, chip, approximate="none"):
    return _GELU[approximate][0](specs, chip)


def _gelu_run(arrays, t, chip, mode, approximate="none"):
    return _GELU[approximate][1](arrays, t, chip, mode)


register("Gelu", "activation", _gelu_tiling, _gelu_run,
         "y = x * Phi(x) (approximate='none': relu(x) minus the normal tail, exp of a fitted polynomial) "
         "or the tanh form; fp16 (computed in fp16)/fp32")


def _softmax_tiling(specs, chip, dim=-1):
    (x,) = specs
    return softmax_tiling(x.shape, x.dtype, dim, chip)


def _softmax_run(arrays, t, chip, mode, dim=-1):
    return launch_softmax(arrays[0], t, chip, mode)


register("SoftmaxV2", "activation", _softmax_tiling, _softmax_run,
         "numerically stable softmax along any axis; fp16 (last axis: max, x - max, exp and the scaling "
         "in fp16, the sum in fp32; other axes in fp32)/fp32")


def _out(y, trace, return_trace):
    return (y, trace) if return_trace else y


def relu(input, *, chip="910", return_trace: bool = False):
    """``torch.nn.functional.relu``: max(x, 0), float16 or float32, any shape."""
    y, trace = dispatch("Relu", np.asarray(input), chip=chip)
    return _out(y, trace, return_trace)


def silu(input, *, chip="910", return_trace: bool = False):
    """``torch.nn.functional.silu``: x * sigmoid(x) = x / (1 + exp(-x))."""
    y, trace = dispatch("Swish", np.asarray(input), chip=chip)
    return _out(y, trace, return_trace)


def gelu(input, approximate: str = "none", *, chip="910", return_trace: bool = False):
    """``torch.nn.functional.gelu``: x * Phi(x) with ``approximate="none"`` (exact form:
    relu(x) - |x| (1 - Phi(|x|)), the normal tail as exp of a fitted polynomial, within the
    tolerance table) or 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) with
    ``approximate="tanh"``. fp16 input is computed in fp16 (see kernels.activation)."""
    if approximate not in _GELU:
        raise ShapeError(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")
    y, trace = dispatch("Gelu", np.asarray(input), chip=chip, approximate=approximate)
    return _out(y, trace, return_trace)


def softmax(input, dim: int, *, chip="910", return_trace: bool = False):
    """``torch.nn.functional.softmax`` along ``dim`` (any axis, negative counts from the end),
    computed as exp(x - max) / sum(exp(x - max))."""
    x = np.asarray(input)
    if dim is None:
        raise ShapeError("softmax: dim is required (torch's implicit dim is deprecated); pass dim=-1 "
                         "for the last axis")
    if not isinstance(dim, (int, np.integer)):
        raise ShapeError(f"softmax: dim must be an integer, got {dim!r}")
    y, trace = dispatch("SoftmaxV2", x, chip=chip, dim=int(dim))
    return _out(y, trace, return_trace)


__all__ = ["relu", "silu", "gelu", "softmax"]
