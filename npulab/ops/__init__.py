"""The interface layer: functional operators on numpy arrays, run on the simulated NPU.

Each operator checks its inputs, then goes through the dispatcher (:mod:`npulab.ops.registry`),
which picks the registered kernel and its tiling for the shapes at hand.
"""
from __future__ import annotations

from .activation import gelu, relu, silu, softmax
from .math import add, add_relu, div, maximum, minimum, mul, sub
from .unary import abs, cast, erf, exp, log, neg, pow, reciprocal, rsqrt, sigmoid, sqrt, tanh  # noqa: A004
from .reduce import amax, mean, sum  # noqa: A004 (torch's names)
from .norm import batch_norm, layer_norm, rms_norm
from .pooling import avg_pool2d, avg_pool2d_scale, max_pool2d
from .matmul import batch_matmul, fused_matmul, matmul
from .registry import dispatch, op_types
from .conv import conv2d, conv2d_bn_relu, conv3d, conv_transpose2d, linear
from . import nn  # noqa: E402 (the modules over the functions above: npulab.ops.nn.Conv2d, ...)
from . import tolerance  # noqa: E402 (the tolerance table: how close an output must be to its reference)
from . import golden  # noqa: E402 (a numpy golden per operator, with the operator's signature)

__all__ = ["add", "add_relu", "matmul", "batch_matmul", "fused_matmul", "dispatch", "op_types"]
__all__ += ["mul", "relu", "gelu", "silu", "softmax", "layer_norm", "rms_norm", "batch_norm",
            "max_pool2d", "avg_pool2d", "avg_pool2d_scale"]
__all__ += ["sub", "div", "maximum", "minimum", "exp", "log", "sqrt", "rsqrt", "reciprocal", "abs", "neg",
            "tanh", "sigmoid", "erf", "pow", "cast", "sum", "mean", "amax"]
__all__ += ["conv2d", "conv3d", "conv_transpose2d", "conv2d_bn_relu", "linear", "nn", "tolerance", "golden"]
