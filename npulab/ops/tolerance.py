"""The tolerance table: how close an NPU operator's output must be to its reference.

One row per (unit, dtype); every operator test and the precision tools read their rtol/atol
from here, so a tolerance is written down once and changed in one place. A check passes when,
elementwise,

    |actual - expected| <= atol + rtol * |expected|

(numpy's ``assert_allclose`` rule). ``dtype`` is the output's dtype. ``expected`` is computed
from the very values the kernel received, in float32 (the PyTorch-on-CPU references of the
tests: an fp16 input is widened to fp32 first) or in float64 (the goldens of
:mod:`npulab.ops.golden`); either is far closer to the exact value than the rows below. So the
fp16 rows cover the one rounding to fp16 at the end (half a unit in the last place, 2**-11 ~
4.9e-4 relative) plus the kernel's own fp32 arithmetic landing on the neighbouring fp16 value:
about one ulp, 2**-10 ~ 9.8e-4.

Vector unit (fp16 kernels widen to fp32 inside, as ops-nn's do, and round once on the way out,
except where lab 07 lists a step computed in fp16: GELU for fp16 inputs, as Ascend C's Gelu<half>
does; Softmax's row max, x - max, exp and the scaling by 1 / sum, with only the sum in fp32, as
CANN's TBE SoftmaxV2 does on chips without an fp32 exp: its error bound, derived in
``KernelSoftmaxAR``, is 1.95e-3 y + 1.5e-3 for rows up to 32,768 values, inside the fp16 row):

* float32: 1e-5 / 1e-5. Reductions sum in another order than the reference (a few fp32 ulps),
  and GELU's erf form uses a fitted polynomial for log(1 - Phi) whose worst error is a fraction
  of this row (tests/kernels/test_activation.py checks it), which atol covers near zero; so do
  the composed unary ops of kernels.unary (Tanh, Sigmoid, and Erf, Ascend C's rational form:
  under 0.05 of this row, tests/kernels/test_math_vector.py).
* float16: 2e-3 / 2e-3: one fp16 ulp of the result, with a margin for values near zero.

Cube unit rows (conv, matmul: the cube multiplies exactly and accumulates in fp32, int32 for
int8; the reference is the float32 or float64 product of the same input values, exact for int8):

* float32: 1e-4 / 1e-3. The fp32 sums run in another order than the reference's; for K up to a
  few thousand products of unit-size values the difference stays below 1e-3 absolute.
* float16: 2e-3 / 4e-3: the one rounding of the fp32 result to fp16 (one ulp), with a margin
  near zero.
* int8 (int32 out): 0 / 0: integer accumulation is exact, results must be bit-identical. An
  int8 op dequantised with ``scale=`` gives float16 or float32 and reads that row.

``OP_UNIT`` says which unit each functional operator of :mod:`npulab.ops` runs on: the cube for
the matrix products and convolutions (conv2d_bn_relu's BN and ReLU ride in the epilogue, in
fp32: FixPipe, or the vector unit on the 910 / 310; fused_matmul's GELU, on the AIVs in fp16,
adds at most 0.18 of the vector fp16 row to the one fp16 rounding of the workspace, which the
cube's fp16 row covers), the vector unit for the rest; ``tol(dtype, OP_UNIT[op])`` is an
operator's row.
"""
from __future__ import annotations

import numpy as np

from ..errors import ArgumentError

TOLERANCES: dict[tuple[str, str], dict] = {
    ("vector", "float32"): {"rtol": 1e-5, "atol": 1e-5},
    ("vector", "float16"): {"rtol": 2e-3, "atol": 2e-3},
    ("cube", "float32"): {"rtol": 1e-4, "atol": 1e-3},
    ("cube", "float16"): {"rtol": 2e-3, "atol": 4e-3},
    ("cube", "int32"): {"rtol": 0.0, "atol": 0.0},
}

_CUBE_OPS = ("matmul", "batch_matmul", "linear", "conv2d", "conv3d", "conv_transpose2d", "conv2d_bn_relu",
             "fused_matmul")
_VECTOR_OPS = ("add", "add_relu", "mul", "relu", "gelu", "silu", "softmax", "layer_norm", "rms_norm", "batch_norm",
               "max_pool2d", "avg_pool2d", "avg_pool2d_scale", "sub", "div", "maximum", "minimum", "exp", "log",
               "sqrt", "rsqrt", "reciprocal", "abs", "neg", "tanh", "sigmoid", "erf", "pow", "cast", "sum", "mean",
               "amax")
OP_UNIT: dict[str, str] = {**{op: "cube" for op in _CUBE_OPS}, **{op: "vector" for op in _VECTOR_OPS}}


def tol(dtype, unit: str = "vector") -> dict:
    """``{"rtol": ..., "atol": ...}`` for results of ``dtype`` computed on ``unit``."""
    key = (unit, np.dtype(dtype).name)
    if key not in TOLERANCES:
        raise ArgumentError(f"no tolerance row for {key}; rows: {sorted(TOLERANCES)}")
    return dict(TOLERANCES[key])


__all__ = ["TOLERANCES", "OP_UNIT", "tol"]
