"""A numpy golden per operator: the value each functional operator of :mod:`npulab.ops`
approximates, so that a precision compare can measure any output against it.

``golden.conv2d(x, w, b, 2, "same")`` takes the operator's own arguments: the same name, the
same parameters in the same order with the same defaults, without the simulator's keywords
(``chip``, ``tiling``, ``return_trace``, ``buffer_num``); a test holds the signatures equal so
they cannot drift. As ops-nn's goldens (``norm/rms_norm/tests/assets/golden.py``), each one is
plain numpy, short enough to read as the operator's definition:

* inputs are the values the operator receives: a float16 or float32 array is widened, exactly,
  to float64, and every golden computes and returns float64;
* the cube's int8 inputs (matmul, batch_matmul, linear, conv2d, conv3d, conv_transpose2d)
  multiply and sum in int64, which is exact as the cube's int32 accumulator is, and give int32;
  with ``scale=`` the dequantised float64 value;
* the operator's last rounding (to a float16 output, to ``out_dtype``) is not applied: how far
  it may take the result is the tolerance table's business (:mod:`npulab.ops.tolerance`, one
  row per unit and output dtype; ``OP_UNIT`` says which unit each operator runs on);
* an option the operator refuses (``training=True``, ``return_indices``, ``divisor_override``,
  ``scale=`` on float inputs, int8 into ``conv2d_bn_relu``) has no value to approximate, so the
  golden refuses it too, and a bad shape is a :class:`~npulab.errors.ShapeError`.

=============  ======================================================================
module         goldens
=============  ======================================================================
``arith``      (helpers) float64 and exact int64 operands, the FixPipe epilogue
``vector``     add, mul, relu, gelu, silu, softmax
``math``       sub, div, maximum, minimum, exp, log, sqrt, rsqrt, reciprocal, abs, neg,
               tanh, sigmoid, erf, pow, cast, sum, mean, amax
``norm``       layer_norm, rms_norm, batch_norm
``pooling``    max_pool2d, avg_pool2d, avg_pool2d_scale
``matmul``     matmul, batch_matmul, linear, fused_matmul
``conv``       conv2d, conv3d, conv_transpose2d, conv2d_bn_relu
=============  ======================================================================
"""
from __future__ import annotations

from .conv import conv2d, conv2d_bn_relu, conv3d, conv_transpose2d
from .math import (abs, amax, cast, div, erf, exp, log, maximum, mean, minimum, neg, pow,  # noqa: A004
                   reciprocal, rsqrt, sigmoid, sqrt, sub, sum, tanh)
from .matmul import batch_matmul, fused_matmul, linear, matmul
from .norm import batch_norm, layer_norm, rms_norm
from .pooling import avg_pool2d, avg_pool2d_scale, max_pool2d
from .vector import add, add_relu, gelu, mul, relu, silu, softmax

__all__ = ["add", "add_relu", "mul", "relu", "gelu", "silu", "softmax", "layer_norm", "rms_norm", "batch_norm",
           "max_pool2d", "avg_pool2d", "avg_pool2d_scale", "matmul", "batch_matmul", "conv2d", "conv3d",
           "conv_transpose2d", "conv2d_bn_relu", "linear", "fused_matmul", "sub", "div", "maximum", "minimum", "exp",
           "log", "sqrt", "rsqrt", "reciprocal", "abs", "neg", "tanh", "sigmoid", "erf", "pow", "cast", "sum",
           "mean", "amax"]
