"""Goldens of the cube's matrix products: matmul, batch_matmul (a 2-D b is shared by every
matrix of a) and linear (x W^T + b), each with its FixPipe epilogue (bias, ReLU), and
fused_matmul (matmul + GELU). float inputs multiply in float64; int8 in int64, exactly, and give
int32."""
from __future__ import annotations

import numpy as np

from ...errors import ShapeError
from .arith import cube_operands, epilogue


def _inner(a_shape, b_shape, what):
    if a_shape[-1] != b_shape[-2]:
        raise ShapeError(f"{what}: op(a) is {a_shape[-2]} x {a_shape[-1]} and op(b) is {b_shape[-2]} x "
                         f"{b_shape[-1]}; the inner dimensions (K) must match")


def matmul(a, b, *, bias=None, trans_a=False, trans_b=False, relu=False):
    """op(a) @ op(b) (+ bias) (ReLU), op(X) = X.T when trans_X; a (M, K) and b (K, N) as op
    sees them, bias (N,); the value ``ops.matmul`` approximates."""
    a, b, integer = cube_operands(a, b, "matmul")
    if a.ndim != 2 or b.ndim != 2:
        raise ShapeError(f"matmul: a and b must be 2-D, got shapes {a.shape} and {b.shape} "
                         f"(batch_matmul takes stacks)")
    a, b = (a.T if trans_a else a), (b.T if trans_b else b)
    _inner(a.shape, b.shape, "matmul")
    return epilogue(a @ b, integer, "matmul", bias, relu=relu)


def batch_matmul(a, b, *, bias=None, trans_a=False, trans_b=False, relu=False):
    """A stack of matmuls: a (..., M, K), b (..., K, N) with the same leading dims, or b (K, N)
    for every matrix of a (op and the epilogue as in :func:`matmul`); the value
    ``ops.batch_matmul`` approximates."""
    a, b, integer = cube_operands(a, b, "batch_matmul")
    if a.ndim < 2 or b.ndim < 2:
        raise ShapeError(f"batch_matmul: a and b need at least 2 dimensions, got {a.shape} and {b.shape}")
    if b.ndim > 2 and b.shape[:-2] != a.shape[:-2]:
        raise ShapeError(f"batch_matmul: leading (batch) dimensions differ: a {a.shape[:-2]}, "
                         f"b {b.shape[:-2]}; they must match (or b is 2-D)")
    a, b = (a.swapaxes(-1, -2) if trans_a else a), (b.swapaxes(-1, -2) if trans_b else b)
    _inner(a.shape, b.shape, "batch_matmul")
    return epilogue(np.matmul(a, b), integer, "batch_matmul", bias, relu=relu)


def linear(input, weight, bias=None, *, activation=None):
    """input @ weight.T + bias (ReLU with ``activation="relu"``): input (..., K), weight (N, K),
    bias (N,); the value ``ops.linear`` approximates."""
    if activation not in (None, "relu"):
        raise ShapeError(f"linear: activation must be None or 'relu' (the one FixPipe fuses), got "
                         f"{activation!r}")
    x, w, integer = cube_operands(input, weight, "linear", ("input", "weight"))
    if x.ndim < 1 or w.ndim != 2 or x.shape[-1] != w.shape[1]:
        raise ShapeError(f"linear: input (..., K) and weight (N, K) must agree on K, got {x.shape} "
                         f"and {w.shape}")
    return epilogue(x @ w.T, integer, "linear", bias, relu=activation == "relu")


def fused_matmul(a, b, *, bias=None, fused_op_type="gelu_erf"):
    """GELU(a @ b + bias): a (M, K), b (K, N), bias (N,); "gelu_erf" the exact form, "gelu_tanh"
    the tanh one; the value ``ops.fused_matmul`` approximates (the kernel rounds a @ b + bias
    to float16 in its workspace before the GELU: within the cube's float16 row)."""
    from .vector import gelu
    if fused_op_type not in ("gelu_erf", "gelu_tanh"):
        raise ShapeError(f"fused_matmul: fused_op_type must be 'gelu_erf' or 'gelu_tanh', got {fused_op_type!r}")
    return gelu(matmul(a, b, bias=bias), "none" if fused_op_type == "gelu_erf" else "tanh")
