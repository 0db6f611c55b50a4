"""The numpy goldens (npulab.ops.golden) against PyTorch on the CPU, in float64, on seeded random
inputs of every dtype each operator takes (float16, float32, int8 for the cube ops) and its
options; their refusals; and their signatures against the operators' (so they cannot drift).

Tolerances, per case:

* ``F64`` = rtol 1e-12, atol 1e-12: both sides compute in float64 from the same values (torch
  gets the inputs widened to float64), so they differ by the summation order only, a few float64
  ulps times the number of terms (at most a few hundred here): ~1e-14 on values of order one.
* ``F64_TAIL`` = rtol 1e-12, atol 1e-14: the activations, where torch's float64 GELU forms
  1 + erf(x / sqrt 2) or 1 + tanh(z), which cancel for negative x (an absolute error ~1e-16 |x|,
  |x| <= 30 here), and the golden uses erfc or a sigmoid, which do not.
* ``EXACT``: the int8 cube ops accumulate exactly on both sides (torch in float64, exact for
  integers below 2**53), so the int32 results must be equal.
"""
from __future__ import annotations

import inspect

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import npulab.ops as ops
from npulab.errors import ArgumentError, NpuError, ShapeError
from npulab.ops import golden as G
from npulab.ops.tolerance import OP_UNIT
from fixtures import bias_for, positive, rand

F64 = dict(rtol=1e-12, atol=1e-12)
F64_TAIL = dict(rtol=1e-12, atol=1e-14)
EXACT = dict(rtol=0.0, atol=0.0)
FLOATS = [np.float16, np.float32]
CUBE_DTYPES = [np.float16, np.float32, np.int8]
SIMULATOR_KEYWORDS = {"chip", "tiling", "return_trace", "buffer_num"}


def T(a) -> torch.Tensor:
    """The float64 torch tensor of the values the operator receives."""
    return torch.tensor(np.asarray(a, dtype=np.float64))


def check(got, want, tol=F64) -> None:
    """A golden's result: float64 (int32 when ``tol`` is EXACT), ``want``'s shape, within tol."""
    want = want.numpy() if isinstance(want, torch.Tensor) else np.asarray(want)
    assert got.dtype == (np.int32 if tol is EXACT else np.float64), got.dtype
    assert got.shape == want.shape, (got.shape, want.shape)
    np.testing.assert_allclose(got.astype(np.float64), want, **tol)


def cube_tol(dtype):
    return EXACT if np.dtype(dtype) == np.int8 else F64


# -- element-wise and softmax ------------------------------------------------------------------

@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("xs, ys", [((5, 7), (5, 7)), ((3, 1, 17), (4, 1)), ((6,), ()), ((), (2, 3))])
@pytest.mark.parametrize("op", ["add", "mul"])
def test_add_and_mul_broadcast_as_torch(op, xs, ys, dtype):
    x, y = rand(xs, dtype, f"{op}x{xs}", 3.0), rand(ys, dtype, f"{op}y{ys}", 3.0)
    check(getattr(G, op)(x, y), getattr(torch, op)(T(x), T(y)))


@pytest.mark.parametrize("dtype", FLOATS)
def test_a_python_number_takes_the_arrays_dtype_first(dtype):
    x = rand((9,), dtype, "scalar", 3.0)
    rounded = float(np.asarray(0.1, dtype))             # the operators' scalar rule
    check(G.add(x, 0.1), T(x) + rounded)
    check(G.mul(0.1, x), rounded * T(x))
    assert not np.array_equal(G.add(x, 0.1), T(x).numpy() + 0.1)     # the rounding shows


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("xs, ys", [((5, 7), (5, 7)), ((3, 1, 17), (4, 1)), ((6,), ()), ((), (2, 3))])
@pytest.mark.parametrize("op", ["sub", "div", "maximum", "minimum"])
def test_the_other_binary_ops_broadcast_as_torch(op, xs, ys, dtype):
    x, y = rand(xs, dtype, f"{op}x{xs}", 3.0), rand(ys, dtype, f"{op}y{ys}", 3.0)
    check(getattr(G, op)(x, y), getattr(torch, op)(T(x), T(y)))


UNARY = ["exp", "log", "sqrt", "rsqrt", "reciprocal", "abs", "neg", "tanh", "sigmoid", "erf"]


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("name", UNARY)
def test_unary_math_matches_torch(name, dtype):
    x = rand((4, 17, 3), dtype, f"{name}u", 3.0)
    if name in ("log", "sqrt", "rsqrt"):
        x = np.abs(x)
    check(getattr(G, name)(x), getattr(torch, name)(T(x)), F64_TAIL)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("exponent", [0, 1, 2, 3, -2, 0.5, -0.5, 1.7])
def test_pow_with_a_number_matches_torch(exponent, dtype):
    x = rand((33,), dtype, "pow", 2.0)
    if not float(exponent).is_integer():
        x = np.abs(x)
    check(G.pow(x, exponent), torch.pow(T(x), exponent))


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("dim, keepdim", [(None, False), (1, False), ((0, 2), True), (-1, True), ([1, 2], False)])
@pytest.mark.parametrize("name", ["sum", "mean", "amax"])
def test_reductions_match_torch(name, dim, keepdim, dtype):
    x = rand((3, 5, 7), dtype, f"{name}red", 2.0)
    theirs = getattr(torch, name)
    want = (theirs(T(x)) if dim is None else theirs(T(x), dim=dim, keepdim=keepdim)) if name != "amax" else \
        torch.amax(T(x), dim=() if dim is None else dim, keepdim=keepdim)
    check(G.__dict__[name](x, dim, keepdim), want)


def test_cast_is_the_value_itself():
    x = rand((9,), np.float32, "cast")
    check(G.cast(x, np.float16), T(x))


ACTIVATIONS = {
    "relu": (G.relu, F.relu),
    "silu": (G.silu, F.silu),
    "gelu": (G.gelu, F.gelu),
    "gelu_tanh": (lambda x: G.gelu(x, "tanh"), lambda t: F.gelu(t, approximate="tanh")),
}


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape", [(33,), (4, 17, 3)])
@pytest.mark.parametrize("name", sorted(ACTIVATIONS))
def test_activations_match_torch(name, shape, dtype):
    golden, theirs = ACTIVATIONS[name]
    x = rand(shape, dtype, f"{name}{shape}", 4.0)
    check(golden(x), theirs(T(x)), F64_TAIL)
    wide = np.linspace(-30, 30, 241).astype(dtype)             # both tails, and 0
    check(golden(wide), theirs(T(wide)), F64_TAIL)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape, dim", [((7,), 0), ((3, 5, 17), -1), ((3, 5, 17), 1), ((4, 6), -2),
                                        ((), 0), ((), -1), ((0, 4), 1)])
def test_softmax_matches_torch_on_any_axis(shape, dim, dtype):
    x = rand(shape, dtype, f"softmax{shape}", 5.0)
    check(G.softmax(x, dim), F.softmax(T(x), dim))


# -- normalisations --------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape, ns, affine, eps", [((4, 33), 33, "wb", 1e-5), ((4, 33), (33,), "w", 1e-3),
                                                    ((2, 3, 5, 7), (5, 7), "wb", 1e-5), ((6, 9), 9, "", 1e-5),
                                                    ((0, 9), 9, "wb", 1e-5)])
def test_layer_norm_matches_torch(shape, ns, affine, eps, dtype):
    key = f"ln{shape}{affine}"
    x = rand(shape, dtype, key, 2.0) + dtype(0.5)
    nst = (ns,) if isinstance(ns, int) else ns
    w = rand(nst, dtype, key + "w") if "w" in affine else None
    b = rand(nst, dtype, key + "b") if "b" in affine else None
    check(G.layer_norm(x, ns, w, b, eps), F.layer_norm(T(x), nst, None if w is None else T(w),
                                                        None if b is None else T(b), eps))


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape, ns, weight, eps", [((3, 40), 40, True, None), ((2, 4, 6), (4, 6), False, 1e-6),
                                                    ((5, 17), 17, True, 1e-2)])
def test_rms_norm_matches_torch(shape, ns, weight, eps, dtype):
    x = rand(shape, dtype, f"rms{shape}", 0.05)              # small values: eps matters
    nst = (ns,) if isinstance(ns, int) else ns
    w = rand(nst, dtype, f"rms{shape}w") if weight else None
    # eps=None is the input dtype's epsilon (torch, given the float64 twin, would take float64's)
    torch_eps = float(np.finfo(dtype).eps) if eps is None else eps
    check(G.rms_norm(x, ns, w, eps), F.rms_norm(T(x), nst, None if w is None else T(w), torch_eps))


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape, affine", [((2, 5, 4, 3), "wb"), ((3, 5), "w"), ((2, 5, 7), ""),
                                           ((2, 5, 3, 2, 2), "b")])
def test_batch_norm_matches_torch_in_inference(shape, affine, dtype):
    key = f"bn{shape}"
    x = rand(shape, dtype, key, 2.0)
    c = shape[1]
    mean = rand(c, dtype, key + "m")
    var = positive(c, dtype, key + "v")
    w = rand(c, dtype, key + "w") if "w" in affine else None
    b = rand(c, dtype, key + "b") if "b" in affine else None
    want = F.batch_norm(T(x), T(mean), T(var), None if w is None else T(w), None if b is None else T(b),
                        training=False, eps=1e-3)
    check(G.batch_norm(x, mean, var, w, b, False, 0.1, 1e-3), want)


# -- pooling ---------------------------------------------------------------------------------

MAX_POOLS = [((2, 3, 11, 9), 2, None, 0, 1, False), ((2, 3, 10, 9), 3, 2, 1, 1, True),
             ((1, 2, 11, 9), (3, 2), (2, 1), (1, 0), (2, 1), False), ((1, 2, 10, 12), 3, 2, 1, 2, True),
             ((2, 2, 5, 8), 2, 2, 1, 1, True), ((2, 1, 7, 7), 3, (), 1, 1, False)]


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape, k, s, p, d, ceil", MAX_POOLS)
def test_max_pool2d_matches_torch(shape, k, s, p, d, ceil, dtype):
    x = rand(shape, dtype, f"max{shape}{k}", 3.0)
    want = F.max_pool2d(T(x), k, None if s == () else s, p, d, ceil)
    check(G.max_pool2d(x, k, s, p, d, ceil), want)


AVG_POOLS = [((2, 3, 11, 9), 2, None, 0, False, True), ((2, 3, 10, 9), 3, 2, 1, True, True),
             ((2, 3, 10, 9), 3, 2, 1, True, False), ((1, 2, 11, 9), (3, 2), (2, 1), (1, 1), False, False),
             ((2, 2, 5, 8), 2, 2, 1, True, True), ((2, 2, 5, 8), 2, 2, 1, True, False)]


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape, k, s, p, ceil, count_pad", AVG_POOLS)
def test_avg_pool2d_and_its_scaled_twin_match_torch(shape, k, s, p, ceil, count_pad, dtype):
    x = rand(shape, dtype, f"avg{shape}{k}", 3.0)
    want = F.avg_pool2d(T(x), k, s, p, ceil, count_pad)
    check(G.avg_pool2d(x, k, s, p, ceil, count_pad), want)
    check(G.avg_pool2d_scale(x, k, 0.37, s, p, ceil, count_pad), want * 0.37)


# -- matrix products -------------------------------------------------------------------------

def _op(t, trans):
    return t.transpose(-1, -2) if trans else t


def _finish(y, bias, relu):
    y = y if bias is None else y + T(bias)
    return torch.relu(y) if relu else y


@pytest.mark.parametrize("dtype", CUBE_DTYPES)
@pytest.mark.parametrize("trans_a, trans_b", [(False, False), (True, False), (False, True), (True, True)])
@pytest.mark.parametrize("bias, relu", [(False, False), (True, True), (True, False)])
def test_matmul_matches_torch(trans_a, trans_b, bias, relu, dtype):
    m, k, n = 13, 35, 19
    key = f"mm{trans_a}{trans_b}{bias}{relu}{np.dtype(dtype)}"
    a = rand((k, m) if trans_a else (m, k), dtype, key + "a")
    b = rand((n, k) if trans_b else (k, n), dtype, key + "b")
    c = bias_for(n, dtype, key + "c") if bias else None
    want = _finish(_op(T(a), trans_a) @ _op(T(b), trans_b), c, relu)
    check(G.matmul(a, b, bias=c, trans_a=trans_a, trans_b=trans_b, relu=relu), want, cube_tol(dtype))


@pytest.mark.parametrize("dtype", CUBE_DTYPES)
@pytest.mark.parametrize("b_lead, trans_a, trans_b, bias, relu", [((2, 3), False, False, False, False),
                                                                    ((), False, True, True, False),
                                                                    ((2, 3), True, True, True, True),
                                                                    ((), True, False, False, True)])
def test_batch_matmul_matches_torch(b_lead, trans_a, trans_b, bias, relu, dtype):
    m, k, n = 9, 21, 17
    key = f"bmm{b_lead}{trans_a}{trans_b}{np.dtype(dtype)}"
    a = rand((2, 3) + ((k, m) if trans_a else (m, k)), dtype, key + "a")
    b = rand(b_lead + ((n, k) if trans_b else (k, n)), dtype, key + "b")
    c = bias_for(n, dtype, key + "c") if bias else None
    want = _finish(torch.matmul(_op(T(a), trans_a), _op(T(b), trans_b)), c, relu)
    check(G.batch_matmul(a, b, bias=c, trans_a=trans_a, trans_b=trans_b, relu=relu), want, cube_tol(dtype))


@pytest.mark.parametrize("dtype", CUBE_DTYPES)
@pytest.mark.parametrize("lead, bias, activation", [((5,), True, None), ((2, 3), True, "relu"), ((), False, "relu"),
                                                    ((4,), False, None)])
def test_linear_matches_torch(lead, bias, activation, dtype):
    key = f"lin{lead}{bias}{np.dtype(dtype)}"
    x, w = rand(lead + (35,), dtype, key + "x"), rand((19, 35), dtype, key + "w")
    c = bias_for(19, dtype, key + "c") if bias else None
    want = F.linear(T(x), T(w), None if c is None else T(c))
    want = torch.relu(want) if activation == "relu" else want
    check(G.linear(x, w, c, activation=activation), want, cube_tol(dtype))


@pytest.mark.parametrize("fused_op_type, approximate", [("gelu_erf", "none"), ("gelu_tanh", "tanh")])
@pytest.mark.parametrize("bias", [False, True])
def test_fused_matmul_matches_torch(fused_op_type, approximate, bias):
    key = f"fmm{fused_op_type}{bias}"
    a, b = rand((13, 35), np.float16, key + "a"), rand((35, 32), np.float16, key + "b")
    c = bias_for(32, np.float16, key + "c") if bias else None
    y = T(a) @ T(b) + (0 if c is None else T(c))
    check(G.fused_matmul(a, b, bias=c, fused_op_type=fused_op_type), F.gelu(y, approximate=approximate),
          F64_TAIL)


# -- convolutions ----------------------------------------------------------------------------

def _dequant(y, scale, relu):
    if scale is not None:
        s = T(scale)
        y = y * (s if s.ndim == 0 else s.reshape((1, -1) + (1,) * (y.ndim - 2)))
    return torch.relu(y) if relu else y


CONV2D = [  # (N, Cin, H, W), (Cout, kh, kw), stride, padding, dilation, groups
    ((2, 6, 9, 7), (4, 3, 2), 1, 0, 1, 2),
    ((2, 6, 9, 7), (4, 3, 3), (2, 1), (1, 2), (2, 1), 1),
    ((1, 4, 8, 10), (6, 4, 3), 1, "same", (1, 2), 2),
    ((1, 3, 7, 6), (5, 2, 2), 1, "valid", 1, 1),
    ((2, 4, 6, 5), (4, 3, 3), 2, 1, 1, 4),
]


@pytest.mark.filterwarnings("ignore:Using padding='same' with even kernel lengths")
@pytest.mark.parametrize("dtype", CUBE_DTYPES)
@pytest.mark.parametrize("xshape, wshape, stride, padding, dilation, groups", CONV2D)
@pytest.mark.parametrize("bias, relu", [(True, False), (False, True)])
def test_conv2d_matches_torch(xshape, wshape, stride, padding, dilation, groups, bias, relu, dtype):
    key = f"c2{xshape}{wshape}{padding}{np.dtype(dtype)}"
    cout, kh, kw = wshape
    x, w = rand(xshape, dtype, key + "x"), rand((cout, xshape[1] // groups, kh, kw), dtype, key + "w")
    b = bias_for(cout, dtype, key + "b") if bias else None
    want = F.conv2d(T(x), T(w), None if b is None else T(b), stride, padding, dilation, groups)
    check(G.conv2d(x, w, b, stride, padding, dilation, groups, relu=relu), _dequant(want, None, relu),
          cube_tol(dtype))


@pytest.mark.parametrize("scale", [0.013, "channel"])
@pytest.mark.parametrize("out_dtype", [None, np.float32])
def test_int8_conv2d_dequantises_with_scale(scale, out_dtype):
    x, w = rand((2, 4, 7, 6), np.int8, "q8x"), rand((6, 2, 3, 3), np.int8, "q8w")
    b = bias_for(6, np.int8, "q8b")
    s = np.linspace(-0.02, 0.03, 6) if scale == "channel" else scale
    want = _dequant(F.conv2d(T(x), T(w), T(b), 1, 1, 1, 2), s, True)
    check(G.conv2d(x, w, b, 1, 1, 1, 2, scale=s, out_dtype=out_dtype, relu=True), want, F64)


@pytest.mark.parametrize("dtype", CUBE_DTYPES)
@pytest.mark.parametrize("stride, padding, dilation, groups", [(1, 0, 1, 1), ((1, 2, 2), (1, 0, 1), (2, 1, 1), 2),
                                                               (1, "same", 1, 1)])
def test_conv3d_matches_torch(stride, padding, dilation, groups, dtype):
    key = f"c3{stride}{padding}{np.dtype(dtype)}"
    x, w = rand((2, 4, 6, 7, 5), dtype, key + "x"), rand((6, 4 // groups, 3, 2, 3), dtype, key + "w")
    b = bias_for(6, dtype, key + "b")
    want = F.conv3d(T(x), T(w), T(b), stride, padding, dilation, groups)
    check(G.conv3d(x, w, b, stride, padding, dilation, groups), want, cube_tol(dtype))


CONV_T = [  # stride, padding, output_padding, groups, dilation, Cout / groups
    (1, 0, 0, 1, 1, 5),
    (2, 1, 1, 2, 1, 3),
    ((2, 3), (0, 2), (1, 0), 1, (1, 2), 4),
    (3, 2, 2, 2, 2, 2),
]


@pytest.mark.parametrize("dtype", CUBE_DTYPES)
@pytest.mark.parametrize("stride, padding, output_padding, groups, dilation, cout_g", CONV_T)
def test_conv_transpose2d_matches_torch(stride, padding, output_padding, groups, dilation, cout_g, dtype):
    key = f"ct{stride}{padding}{groups}{np.dtype(dtype)}"
    x, w = rand((2, 6, 5, 4), dtype, key + "x"), rand((6, cout_g, 3, 3), dtype, key + "w")
    b = bias_for(cout_g * groups, dtype, key + "b")
    want = F.conv_transpose2d(T(x), T(w), T(b), stride, padding, output_padding, groups, dilation)
    check(G.conv_transpose2d(x, w, b, stride, padding, output_padding, groups, dilation), want, cube_tol(dtype))


def test_int8_conv_transpose2d_dequantises_with_scale():
    x, w = rand((1, 4, 5, 5), np.int8, "qtx"), rand((4, 3, 2, 2), np.int8, "qtw")
    s = np.array([0.5, -0.25, 0.01])
    want = _dequant(F.conv_transpose2d(T(x), T(w), None, 2), s, False)
    check(G.conv_transpose2d(x, w, None, 2, scale=s), want, F64)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("bias, affine, relu, padding", [(True, True, True, 1), (False, True, False, "same"),
                                                         (True, False, True, 0)])
def test_conv2d_bn_relu_is_relu_of_batch_norm_of_conv2d(bias, affine, relu, padding, dtype):
    key = f"cbr{bias}{affine}{relu}"
    x, w = rand((2, 4, 8, 7), dtype, key + "x"), rand((6, 2, 3, 3), dtype, key + "w")
    b = rand(6, dtype, key + "b") if bias else None
    mean, var = rand(6, np.float32, key + "m"), positive(6, np.float32, key + "v")
    gamma, beta = (rand(6, np.float32, key + "g"), rand(6, np.float32, key + "be")) if affine else (None, None)
    y = F.conv2d(T(x), T(w), None if b is None else T(b), 1, padding, 1, 2)
    y = F.batch_norm(y, T(mean), T(var), None if gamma is None else T(gamma), None if beta is None else T(beta),
                     training=False, eps=1e-3)
    got = G.conv2d_bn_relu(x, w, b, mean, var, gamma, beta, 1e-3, 1, padding, 1, 2, relu=relu)
    check(got, torch.relu(y) if relu else y)


# -- what the goldens refuse -----------------------------------------------------------------

X4 = np.zeros((1, 2, 4, 4), np.float32)
REFUSED = [
    (lambda: G.add(np.zeros((2, 3)), np.zeros((4,))), "do not broadcast"),
    (lambda: G.gelu(X4, "fast"), "approximate"),
    (lambda: G.softmax(X4, 4), "out of range"),
    (lambda: G.softmax(X4, None), "dim must be an integer"),
    (lambda: G.layer_norm(X4, (3, 4)), "must end in normalized_shape"),
    (lambda: G.layer_norm(X4, 4, np.ones(3)), "weight has shape"),
    (lambda: G.rms_norm(X4.astype(np.int32), 4), "eps=None"),
    (lambda: G.batch_norm(X4, np.zeros(2), np.ones(2), training=True), "training=True"),
    (lambda: G.batch_norm(X4, np.zeros(3), np.ones(3)), "running_mean has shape"),
    (lambda: G.max_pool2d(X4, 2, return_indices=True), "return_indices"),
    (lambda: G.max_pool2d(X4, 2, padding=2), "at most half"),
    (lambda: G.max_pool2d(X4[0], 2), r"\(N, C, H, W\)"),
    (lambda: G.avg_pool2d(X4, 2, divisor_override=3), "divisor_override"),
    (lambda: G.avg_pool2d_scale(X4, 2, "big"), "scale must be a number"),
    (lambda: G.sub(np.zeros((2, 3)), np.zeros((4,))), "do not broadcast"),
    (lambda: G.cast(X4, "int8"), "not float16 or float32"),
    (lambda: G.sum(X4, dim=7), "out of range"),
    (lambda: G.mean(X4, dim="h"), "dim must be"),
    (lambda: G.matmul(np.zeros((3, 4)), np.zeros((5, 6))), "inner dimensions"),
    (lambda: G.matmul(np.zeros((3, 4), np.int8), np.zeros((4, 6), np.float16)), "both must be integers"),
    (lambda: G.matmul(np.zeros((3, 4), np.int8), np.zeros((4, 6), np.int8), bias=np.zeros(6)), "integer bias"),
    (lambda: G.matmul(np.zeros((3, 4)), np.zeros((4, 6)), bias=np.zeros(5)), r"bias must have shape \(6,\)"),
    (lambda: G.batch_matmul(np.zeros((2, 3, 4)), np.zeros((3, 4, 5))), "leading"),
    (lambda: G.linear(np.zeros((3, 4)), np.zeros((5, 4)), activation="gelu"), "activation"),
    (lambda: G.conv2d(X4, np.zeros((4, 3, 3, 3), np.float32)), "input channels"),
    (lambda: G.conv2d(X4, np.zeros((3, 2, 3, 3), np.float32), groups=2), "groups=2 must divide"),
    (lambda: G.conv2d(X4, np.zeros((4, 2, 3, 3), np.float32), stride=2, padding="same"), "'same'"),
    (lambda: G.conv2d(X4, np.zeros((4, 2, 5, 5), np.float32)), "does not fit"),
    (lambda: G.conv2d(X4, np.zeros((4, 2, 3, 3), np.float32), scale=0.5), "for int8 inputs"),
    (lambda: G.conv3d(X4, np.zeros((4, 2, 3, 3), np.float32)), "5-D"),
    (lambda: G.conv_transpose2d(X4, np.zeros((2, 2, 3, 3), np.float32), output_padding=1), "output_padding"),
    (lambda: G.conv_transpose2d(X4, np.zeros((3, 2, 3, 3), np.float32)), "input channels"),
    (lambda: G.conv2d_bn_relu(X4.astype(np.int8), np.zeros((4, 2, 3, 3), np.int8), None, np.zeros(4),
                              np.ones(4)), "int8"),
    (lambda: G.conv2d_bn_relu(X4, np.zeros((4, 2, 3, 3), np.float32)), "running_mean and running_var"),
]


@pytest.mark.parametrize("call, message", REFUSED, ids=[m for _, m in REFUSED])
def test_goldens_refuse_what_has_no_value_with_a_shape_error(call, message):
    with pytest.raises(ShapeError, match=message) as err:
        call()
    assert isinstance(err.value, NpuError)


# -- the signatures --------------------------------------------------------------------------

OPERATORS = sorted(n for n in ops.__all__ if inspect.isfunction(getattr(ops, n)) and n not in ("dispatch", "op_types"))


def _parameters(fn):
    return [(p.name, p.kind, p.default) for p in inspect.signature(fn).parameters.values()
            if p.name not in SIMULATOR_KEYWORDS]


def test_every_operator_has_a_golden_and_a_unit():
    assert len(OPERATORS) == 40
    assert sorted(G.__all__) == OPERATORS
    assert sorted(OP_UNIT) == OPERATORS


@pytest.mark.parametrize("name", OPERATORS)
def test_golden_signature_is_the_operators_without_the_simulator_keywords(name):
    assert _parameters(getattr(G, name)) == _parameters(getattr(ops, name))
    assert not SIMULATOR_KEYWORDS & set(inspect.signature(getattr(G, name)).parameters)


@pytest.mark.parametrize("fn", [G.pow, ops.pow], ids=["golden", "operator"])
def test_pow_refuses_a_negative_base_with_a_non_integer_exponent(fn):
    x = np.array([1.0, -2.0, 3.0], np.float32)
    with pytest.raises(ArgumentError, match="not an integer") as err:
        fn(x, 0.5)
    assert isinstance(err.value, NpuError)
    check(G.pow(x, 3), T(x) ** 3)                   # an integer exponent takes any base
