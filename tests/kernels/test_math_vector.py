"""The vector math kernels (kernels.broadcast's Sub/RealDiv/Maximum/Minimum, kernels.unary,
kernels.reduce) through registry.dispatch, against the numpy goldens (npulab.ops.golden) within
the tolerance table's vector rows, on fp16 and fp32, on sizes that are no multiple of a
32-byte block and on every broadcast form; timing mode; and the errors bad input gets."""
from __future__ import annotations

import math

import numpy as np
import pytest

from fixtures import positive, rand
from npulab.errors import NpuError, ShapeError
from npulab.kernels.reduce import merge_dims, reduce_tiling
from npulab.kernels.unary import ERF_CLIP, UNARY, pow_plan
from npulab.ops import golden as G
from npulab.ops.registry import dispatch, lookup, op_types
from npulab.ops.tolerance import tol

CHIP = "teach"
FLOATS = [np.float16, np.float32]


def close(got, want, dtype, err_msg=""):
    """Within the vector row of the tolerance table (NaN where the golden is NaN)."""
    assert got.shape == np.shape(want), (got.shape, np.shape(want))
    np.testing.assert_allclose(got.astype(np.float64), want, **tol(dtype), err_msg=err_msg)


def worst(got, want, dtype) -> float:
    """The largest |got - want| as a fraction of the tolerance allowed there."""
    t = tol(dtype)
    return float(np.max(np.abs(got.astype(np.float64) - want) / (t["atol"] + t["rtol"] * np.abs(want))))


# -- broadcasting binary ---------------------------------------------------------------------
BINARY = {"Sub": G.sub, "RealDiv": G.div, "Maximum": G.maximum, "Minimum": G.minimum}
SHAPES = [((37,), (37,)),                 # same, a tail of a block
          ((5, 33), (33,)),               # y one row
          ((5, 33), (5, 1)),              # y one value a row
          ((33,), (5, 33)),               # x one row: swapped
          ((5, 1), (5, 33)),              # x one value a row: swapped
          ((4, 1, 9), (1, 3, 1)),         # outer: x one row, y one value a row
          ((1, 3, 1), (4, 1, 9)),         # outer, swapped
          ((2, 3, 4, 5), (3, 1, 5)),      # outer dims, stride-0 reads
          ((19,), ()),                    # a scalar
          ((), (19,))]                    # a scalar first: swapped


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("xs, ys", SHAPES, ids=[f"{a}-{b}" for a, b in SHAPES])
@pytest.mark.parametrize("op", sorted(BINARY))
def test_broadcast_binary_ops_match_their_goldens(op, xs, ys, dtype):
    x = rand(xs, dtype, f"{op}x{xs}", 2.0)
    y = positive(ys, dtype, f"{op}y{ys}") * np.asarray(np.sign(rand(ys, dtype, "s")) + 0.5, dtype).astype(dtype)
    z, trace = dispatch(op, x, y, chip=CHIP)
    assert z.dtype == dtype
    close(z, BINARY[op](x, y), dtype, op)


def test_swapped_sub_and_div_keep_their_operand_order_exactly():
    """x - y with x broadcast: the host swaps the operands (x the fuller) and the kernel spreads
    the broadcast one first, so the result is the same rounding as numpy's, bit for bit."""
    x, y = rand((1, 40), np.float32, "sw1"), positive((7, 40), np.float32, "sw2")
    for op, fn in (("Sub", np.subtract), ("RealDiv", np.divide)):
        z, _ = dispatch(op, x, y, chip=CHIP)
        np.testing.assert_array_equal(z, fn(x, y))


def test_maximum_and_minimum_propagate_nan():
    x = np.array([1.0, np.nan, -2.0, 5.0], np.float32)
    y = np.array([np.nan, 0.0, 3.0, 4.0], np.float32)
    for op, fn in (("Maximum", np.maximum), ("Minimum", np.minimum)):
        z, _ = dispatch(op, x, y, chip=CHIP)
        np.testing.assert_array_equal(z, fn(x, y))


# -- unary -----------------------------------------------------------------------------------
UNARY_OPS = {"Exp": G.exp, "Log": G.log, "Sqrt": G.sqrt, "Rsqrt": G.rsqrt, "Reciprocal": G.reciprocal,
             "Abs": G.abs, "Neg": G.neg, "Tanh": G.tanh, "Sigmoid": G.sigmoid, "Erf": G.erf}
POSITIVE = ("Log", "Sqrt", "Rsqrt", "Reciprocal")


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape", [(1,), (37,), (3, 50), (2, 5, 333)])
@pytest.mark.parametrize("op", sorted(UNARY_OPS))
def test_unary_ops_match_their_goldens(op, shape, dtype):
    x = positive(shape, dtype, f"{op}{shape}") if op in POSITIVE else rand(shape, dtype, f"{op}{shape}", 2.5)
    y, _ = dispatch(op, x, chip=CHIP)
    assert y.dtype == dtype
    close(y, UNARY_OPS[op](x), dtype, op)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("op", ["Tanh", "Sigmoid", "Erf"])
def test_composed_unary_ops_hold_on_a_dense_grid_and_in_both_tails(op, dtype):
    """The formulas built from exp, reciprocal and a rational function: every value of a dense
    grid over [-12, 12] (tails where exp overflows included) within the tolerance, no NaN."""
    x = np.concatenate([np.linspace(-12, 12, 4801), [-100.0, 100.0, 0.0, -1e-4, 1e-4]]).astype(dtype)
    y, _ = dispatch(op, x, chip=CHIP)
    assert not np.isnan(y).any()
    close(y, UNARY_OPS[op](x), dtype, op)


def test_erf_is_well_inside_the_fp32_row_and_saturates_past_its_clip():
    x = np.linspace(-6, 6, 12001).astype(np.float32)
    y, _ = dispatch("Erf", x, chip=CHIP)
    assert worst(y, G.erf(x), np.float32) < 0.05           # the docstring's figure is 0.02
    np.testing.assert_array_equal(y[np.abs(x) > ERF_CLIP + 0.1], np.sign(x[np.abs(x) > ERF_CLIP + 0.1]))


def test_ieee_edges_of_the_unary_ops():
    x = np.array([0.0, -1.0, np.inf], np.float32)
    with np.errstate(divide="ignore", invalid="ignore"):
        for op, want in (("Log", np.log(x)), ("Sqrt", np.sqrt(x)), ("Reciprocal", 1 / x)):
            y, _ = dispatch(op, x, chip=CHIP)
            np.testing.assert_array_equal(y, want)


def test_fp16_composites_are_widened_and_the_one_instruction_ops_are_not():
    assert {k for k, u in UNARY.items() if u.widens} == {"tanh", "sigmoid", "erf", "pows"}
    _, t16 = dispatch("Tanh", rand(64, np.float16, "w"), chip=CHIP, mode="timing")
    _, e16 = dispatch("Exp", rand(64, np.float16, "w"), chip=CHIP, mode="timing")
    names = lambda tr: {r.split(" ")[0] for r in tr.name}      # noqa: E731
    assert "cast" in names(t16) and "cast" not in names(e16)


# -- Pows ------------------------------------------------------------------------------------
def test_pow_plan_picks_the_instructions_by_the_exponent():
    assert pow_plan(0) == ("const1",) and pow_plan(1) == ("copy",) and pow_plan(0.5) == ("sqrt",)
    assert pow_plan(-0.5) == ("rsqrt",) and pow_plan(2) == ("int", 2) and pow_plan(-3.0) == ("int", -3)
    assert pow_plan(1.7) == ("exp_ln", 1.7) and pow_plan(2.0 ** 20) == ("exp_ln", 2.0 ** 20)
    with pytest.raises(ShapeError, match="finite"):
        pow_plan(float("nan"))


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("exponent", [0, 1, 2, 3, 5, -1, -2, 0.5, -0.5, 1.7, -0.3])
def test_pows_matches_the_golden(exponent, dtype):
    integer = float(exponent).is_integer()
    x = rand(77, dtype, f"pow{exponent}", 1.5) if integer else positive(77, dtype, f"pow{exponent}")
    if exponent < 0:
        x = np.where(np.abs(x) < 0.3, np.asarray(0.3, dtype), x).astype(dtype)   # no fp16 overflow
    y, _ = dispatch("Pows", x, chip=CHIP, exponent=float(exponent))
    close(y, G.pow(x, exponent), dtype, f"pow {exponent}")


def test_pows_on_a_negative_base_is_nan_for_a_non_integer_exponent_only():
    """The domain: exp(e ln x) needs x >= 0 (ln 0 = -inf gives 0 for e > 0); integer exponents
    take any base, with its sign. ops.pow refuses the NaN case (tests/ops/test_golden.py)."""
    x = np.array([-2.0, 0.0, 3.0], np.float32)
    y, _ = dispatch("Pows", x, chip=CHIP, exponent=1.5)
    assert np.isnan(y[0]) and y[1] == 0.0 and y[2] == pytest.approx(3.0 ** 1.5, rel=1e-6)
    y, _ = dispatch("Pows", x, chip=CHIP, exponent=3.0)
    np.testing.assert_array_equal(y, [-8.0, 0.0, 27.0])


# -- Cast ------------------------------------------------------------------------------------
@pytest.mark.parametrize("n", [1, 37, 1000])
def test_cast_rounds_to_nearest_even_as_numpy(n):
    x = rand(n, np.float32, f"cast{n}", 100.0)
    x[0] = 70000.0                                              # beyond fp16: inf
    with np.errstate(over="ignore"):
        want = x.astype(np.float16)
    y, _ = dispatch("Cast", x, chip=CHIP, dst_type="float16")
    np.testing.assert_array_equal(y, want)
    back, _ = dispatch("Cast", y, chip=CHIP, dst_type="float32")
    np.testing.assert_array_equal(back, want.astype(np.float32))


# -- reductions ------------------------------------------------------------------------------
REDUCE = {"ReduceSum": G.sum, "ReduceMean": G.mean, "ReduceMax": G.amax}
REDUCTIONS = [((2, 3, 5, 7), (2, 3)),       # H, W of NCHW: AR over (N*C, H*W)
              ((2, 3, 5, 7), ()),           # every axis
              ((2, 3, 5, 7), (0,)),         # RA, one reduced outer axis
              ((2, 3, 5, 7), (1,)),         # RA with a kept outer axis
              ((2, 3, 5, 7), (0, 2)),       # two separate reduced runs
              ((2, 3, 5, 7), (1, -1)),      # AR with a reduced outer axis
              ((2, 1, 9), (1,)),            # a size-1 axis: a copy
              ((37,), (0,)),
              ((3, 5000), (1,)),            # rows longer than a UB tile (teach chip): chunked
              ((5000, 3), (0,)),            # a long reduced axis: chunked rows
              ((64, 33), (0,))]


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape, axes", REDUCTIONS, ids=[f"{s}-{a}" for s, a in REDUCTIONS])
@pytest.mark.parametrize("op", sorted(REDUCE))
def test_reductions_match_their_goldens(op, shape, axes, dtype):
    x = rand(shape, dtype, f"{op}{shape}{axes}", 2.0)
    y, _ = dispatch(op, x, chip=CHIP, axes=axes, keep_dims=False)
    close(y, REDUCE[op](x, axes or None), dtype, op)
    y, _ = dispatch(op, x, chip=CHIP, axes=axes, keep_dims=True)
    close(y, REDUCE[op](x, axes or None, True), dtype, op)


def test_a_reduction_over_hw_is_one_row_problem():
    assert merge_dims((8, 64, 7, 7), (2, 3)) == [(512, False), (49, True)]
    t = reduce_tiling((8, 64, 7, 7), np.float16, (2, 3), "mean", CHIP)
    assert (t.kind, t.rows, t.cols, t.count) == ("ar", 512, 49, 49)
    assert reduce_tiling((8, 64, 7, 7), np.float32, (0,), "sum", CHIP).kind == "ra"


def test_fp16_sums_accumulate_in_fp32():
    """4096 ones and a tail of 0.001s: an fp16 accumulator would stop at 2048 (its ulp there is
    2); the fp32 one gets 4096 + 4.096 and rounds once."""
    x = np.concatenate([np.ones(4096), np.full(4096, 0.001)]).astype(np.float16)
    y, _ = dispatch("ReduceSum", x, chip=CHIP, axes=(), keep_dims=False)
    close(y, G.sum(x), np.float16)


def test_reduce_max_propagates_nan():
    x = np.arange(40, dtype=np.float32).reshape(4, 10)
    x[2, 3] = np.nan
    y, _ = dispatch("ReduceMax", x, chip=CHIP, axes=(1,), keep_dims=False)
    np.testing.assert_array_equal(np.isnan(y), [False, False, True, False])


# -- timing mode, listing, bad input ---------------------------------------------------------
TIMED = [("Sub", (rand((64, 100), np.float16, "t1"), rand(100, np.float16, "t2")), {}),
         ("Erf", (rand((64, 100), np.float16, "t3"),), {}),
         ("Pows", (positive((64, 100), np.float32, "t4"),), {"exponent": 1.7}),
         ("Cast", (rand((64, 100), np.float32, "t5"),), {"dst_type": "float16"}),
         ("ReduceMean", (rand((8, 64, 7, 7), np.float16, "t6"),), {"axes": (2, 3), "keep_dims": False}),
         ("ReduceSum", (rand((300, 64), np.float32, "t7"),), {"axes": (0,), "keep_dims": True})]


@pytest.mark.parametrize("op, arrays, attrs", TIMED, ids=[c[0] for c in TIMED])
def test_timing_mode_gives_a_trace_with_vector_time_and_no_values(op, arrays, attrs):
    y, trace = dispatch(op, *arrays, chip="910", mode="timing", **attrs)
    assert y is None and trace.cycles > 0
    assert trace.pipe_ratios()["vec_ratio"] > 0 and trace.summary()["cycles"] == trace.cycles
    _, ft = dispatch(op, *arrays, chip="910", **attrs)
    assert ft.cycles == trace.cycles                       # both modes issue the same instructions


def test_the_registry_lists_every_new_op_with_a_summary():
    new = ["Sub", "RealDiv", "Maximum", "Minimum", *UNARY_OPS, "Pows", "Cast", *REDUCE]
    assert set(new) <= set(op_types())
    assert all(len(lookup(op).summary) > 10 for op in new)


BAD = [(lambda: dispatch("Exp", np.arange(6, dtype=np.int32), chip=CHIP), "int32; expected float16 or float32"),
       (lambda: dispatch("Sub", np.zeros((2, 3), np.float32), np.zeros(4, np.float32), chip=CHIP),
        "do not broadcast"),
       (lambda: dispatch("RealDiv", np.zeros(4, np.float16), np.zeros(4, np.float32), chip=CHIP),
        "both must be float16"),
       (lambda: dispatch("ReduceSum", np.zeros((2, 3), np.int32), chip=CHIP, axes=(1,), keep_dims=False),
        "int32; expected"),
       (lambda: dispatch("ReduceMax", np.zeros((2, 3), np.float32), chip=CHIP, axes=(2,), keep_dims=False),
        "axis 2 is out of range"),
       (lambda: dispatch("ReduceMean", np.zeros((2, 3), np.float32), chip=CHIP, axes=(1, -1), keep_dims=False),
        "name an axis twice"),
       (lambda: dispatch("Cast", np.zeros(4, np.float32), chip=CHIP, dst_type="bfloat16"), "no bfloat16"),
       (lambda: dispatch("Pows", np.zeros(4, np.float32), chip=CHIP, exponent=math.inf), "finite"),
       (lambda: dispatch("Pows", np.zeros(4, np.float32), chip=CHIP), "missing attribute exponent")]


@pytest.mark.parametrize("call, message", BAD, ids=[m for _, m in BAD])
def test_bad_input_gets_an_error_that_says_what_was_expected(call, message):
    with pytest.raises(NpuError, match=message):
        call()
