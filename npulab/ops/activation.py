"""Activations and softmax (ops-nn's activation family) as in ``torch.nn.functional``:
relu, gelu, silu, softmax, on numpy arrays.

Op types: Relu, Gelu (attribute ``approximate``: "none" = erf form, "tanh"), Swish (SiLU, also
registered as "SiLU"), SoftmaxV2 (attribute ``dim``).
"""
from __future__ import annotations

import math

import numpy as np

from ..arch import DEFAULT_CHIP
from ..errors import ShapeError
from ..kernels.activation import activation_tiling, launch_activation
from ..kernels.softmax import launch_softmax, softmax_tiling, split_axis
from ..kernels.vector_base import check_float
from .args import is_int
from .registry import TensorSpec, dispatch, register


def elementwise_op(activation, what):
    """The tiling, run and shape inference of an element-wise op on the activation kernel
    (``activation``: one of kernels.activation.ACTIVATIONS, the unary math of ops.unary
    included; ``what``: the torch name errors use)."""
    def infer(specs, chip):
        (x,) = specs
        check_float(what, "input", x.dtype)
        return TensorSpec(x.shape, x.dtype)

    def tiling(specs, chip):
        x = infer(specs, chip)
        return activation_tiling(max(1, math.prod(x.shape)), x.dtype, activation, chip)

    def run(arrays, t, chip, mode):
        return launch_activation(arrays[0], t, chip, mode)
    return dict(tiling=tiling, run=run, inputs=("x",), infer=infer)


register("Relu", "activation", summary="y = max(x, 0); fp16/fp32", **elementwise_op("relu", "relu"))
register("Swish", "activation", summary="y = x * sigmoid(x) (SiLU); fp16 (fp32 inside)/fp32",
         **elementwise_op("silu", "silu"))
register("SiLU", "activation", summary="alias of Swish", **elementwise_op("silu", "silu"))
_GELU = {"none": elementwise_op("gelu_erf", "gelu"), "tanh": elementwise_op("gelu_tanh", "gelu")}


def check_approximate(approximate, what="gelu"):
    """GELU's form: "none" (erf) or "tanh"; returns its tiling, run and infer."""
    if approximate not in _GELU:
        raise ShapeError(f"{what}: approximate must be 'none' or 'tanh' (the erf or the tanh form), "
                         f"got {approximate!r}")
    return _GELU[approximate]


def _gelu_tiling(specs, chip, approximate="none"):
    return check_approximate(approximate, "Gelu")["tiling"](specs, chip)


def _gelu_run(arrays, t, chip, mode, approximate="none"):
    return check_approximate(approximate, "Gelu")["run"](arrays, t, chip, mode)


def _gelu_infer(specs, chip, approximate="none"):
    return check_approximate(approximate, "Gelu")["infer"](specs, chip)


register("Gelu", "activation", _gelu_tiling, _gelu_run,
         "y = x * Phi(x) (approximate='none': relu(x) minus the normal tail, exp of a fitted polynomial) "
         "or the tanh form; fp16 (computed in fp16)/fp32", inputs=("x",), infer=_gelu_infer)


def _softmax_infer(specs, chip, dim=-1):
    (x,) = specs
    check_float("softmax", "input", x.dtype)
    split_axis(x.shape, dim)                     # dim in range
    return TensorSpec(x.shape, x.dtype)


def _softmax_tiling(specs, chip, dim=-1):
    (x,) = specs
    _softmax_infer(specs, chip, dim)
    return softmax_tiling(x.shape, x.dtype, dim, chip)


def _softmax_run(arrays, t, chip, mode, dim=-1):
    return launch_softmax(arrays[0], t, chip, mode)


register("SoftmaxV2", "activation", _softmax_tiling, _softmax_run,
         "numerically stable softmax along any axis; fp16 (last axis: max, x - max, exp and the scaling "
         "in fp16, the sum in fp32; other axes in fp32)/fp32", inputs=("x",), infer=_softmax_infer)


def _out(y, trace, return_trace):
    return (y, trace) if return_trace else y


def relu(input, *, chip=DEFAULT_CHIP, return_trace: bool = False):
    """``torch.nn.functional.relu``: max(x, 0), float16 or float32, any shape."""
    y, trace = dispatch("Relu", np.asarray(input), chip=chip)
    return _out(y, trace, return_trace)


def silu(input, *, chip=DEFAULT_CHIP, return_trace: bool = False):
    """``torch.nn.functional.silu``: x * sigmoid(x) = x / (1 + exp(-x))."""
    y, trace = dispatch("Swish", np.asarray(input), chip=chip)
    return _out(y, trace, return_trace)


def gelu(input, approximate: str = "none", *, chip=DEFAULT_CHIP, return_trace: bool = False):
    """``torch.nn.functional.gelu``: x * Phi(x) with ``approximate="none"`` (exact form:
    relu(x) - |x| (1 - Phi(|x|)), the normal tail as exp of a fitted polynomial, within the
    tolerance table) or 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) with
    ``approximate="tanh"``. fp16 input is computed in fp16 (see kernels.activation)."""
    check_approximate(approximate)
    y, trace = dispatch("Gelu", np.asarray(input), chip=chip, approximate=approximate)
    return _out(y, trace, return_trace)


def softmax(input, dim: int, *, chip=DEFAULT_CHIP, return_trace: bool = False):
    """``torch.nn.functional.softmax`` along ``dim`` (any axis, negative counts from the end),
    computed as exp(x - max) / sum(exp(x - max)). A 0-d input is one value (dim 0 or -1): 1.0."""
    x = np.asarray(input)
    if dim is None:
        raise ShapeError("softmax: dim is required (torch's implicit dim is deprecated); pass dim=-1 "
                         "for the last axis")
    if not is_int(dim):
        raise ShapeError(f"softmax: dim must be an integer, got {dim!r}")
    if x.ndim == 0:
        if dim not in (0, -1):
            raise ShapeError(f"softmax: dim={dim} is out of range for a 0-d input (expected -1 or 0)")
        y, trace = dispatch("SoftmaxV2", x.reshape(1), chip=chip, dim=0)
        return _out(y.reshape(()), trace, return_trace)
    y, trace = dispatch("SoftmaxV2", x, chip=chip, dim=int(dim))
    return _out(y, trace, return_trace)


__all__ = ["relu", "silu", "gelu", "softmax"]
