"""Add and Mul with numpy/torch broadcasting: bit-exact against numpy, shapes as torch's."""
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import npulab
import npulab.ops as ops
from npulab.kernels.broadcast import collapse
from fixtures import assert_close

DTYPES = st.sampled_from([np.float16, np.float32])
SETTINGS = settings(max_examples=30, deadline=None, derandomize=True)


@st.composite
def broadcast_pair(draw):
    out = draw(st.lists(st.integers(1, 6), min_size=1, max_size=4))
    def operand():
        nd = draw(st.integers(0, len(out)))
        return tuple(d if draw(st.booleans()) else 1 for d in out[len(out) - nd:])
    return operand(), operand()


@SETTINGS
@given(shapes=broadcast_pair(), dtype=DTYPES, chip=st.sampled_from(["teach", "910"]))
def test_add_and_mul_broadcast_bit_exact(shapes, dtype, chip):
    xs, ys = shapes
    rng = np.random.default_rng(len(xs) * 10 + len(ys))
    x = rng.standard_normal(xs).astype(dtype)
    y = rng.standard_normal(ys).astype(dtype)
    z, w = ops.add(x, y, chip=chip), ops.mul(x, y, chip=chip)
    assert z.shape == tuple(torch.broadcast_shapes(xs, ys)) and z.dtype == dtype
    assert np.array_equal(z, x + y)             # one rounding each, as numpy: exact
    assert np.array_equal(w, x * y)
    tz = (torch.tensor(x) + torch.tensor(y)).numpy() if dtype == np.float32 else None
    if tz is not None:
        assert np.array_equal(z, tz)


@pytest.mark.parametrize("xs, ys", [((40, 300), (300,)), ((300, 40), (300, 1)), ((1, 300), (40, 1)),
                                    ((2, 3, 50, 60), (3, 1, 60)), ((5000,), ())])
def test_broadcast_kinds_on_tiles_of_the_teaching_chip(xs, ys):
    rng = np.random.default_rng(1)
    x, y = rng.standard_normal(xs).astype(np.float32), rng.standard_normal(ys).astype(np.float32)
    assert np.array_equal(ops.add(x, y, chip="teach"), x + y)
    assert np.array_equal(ops.mul(y, x, chip="teach"), y * x)


def test_collapse_merges_dims_and_puts_the_fuller_operand_first():
    out, dims, swapped = collapse((8, 1, 4, 5), (3, 1, 1))
    assert out == (8, 3, 4, 5)
    assert dims == [(8, True, False), (3, False, True), (20, True, False)] and not swapped
    _, dims, swapped = collapse((5,), (2, 5))
    assert swapped and dims == [(2, True, False), (5, True, True)]


def test_same_shape_add_still_runs_the_add_kernel():
    x = np.ones(100, np.float16)
    _, trace = ops.add(x, x, chip="teach", return_trace=True)
    assert any("in_x" in n for n in trace.name) and "Add" in ops.op_types()


def test_broadcast_errors():
    with pytest.raises(npulab.ShapeError, match=r"mul: x has shape \(3,\) and y has \(4,\), which do not broadcast"):
        ops.mul(np.ones(3, np.float32), np.ones(4, np.float32))
    with pytest.raises(npulab.ShapeError, match="both must be float16 or both float32"):
        ops.mul(np.ones(3, np.float32), np.ones(3, np.float16))
    with pytest.raises(npulab.ShapeError, match="float16 or float32"):
        ops.add(np.ones((2, 3), np.int32), np.ones(3, np.int32))


def test_add_names_the_broadcast_rule():
    with pytest.raises(npulab.ShapeError, match=r"^add: x has shape \(3, 4\) and y has \(5,\), which do not "
                                                r"broadcast") as info:
        ops.add(np.ones((3, 4), np.float32), np.ones(5, np.float32))
    assert "must match" not in str(info.value)


@pytest.mark.parametrize("xs, ys", [((0, 4), (0, 4)), ((0, 4), (4,)), ((2, 0), (1,)), ((3, 1), (0,))])
@pytest.mark.parametrize("fn", [ops.add, ops.mul])
def test_empty_operands_give_an_empty_output(fn, xs, ys):
    x, y = np.ones(xs, np.float16), np.ones(ys, np.float16)
    z, trace = fn(x, y, return_trace=True)
    assert z.shape == tuple(torch.broadcast_shapes(xs, ys)) and z.size == 0 and z.dtype == np.float16
    assert trace is None
    with pytest.raises(npulab.ShapeError, match=r"x has shape \(0, 4\) and y has \(3,\), which do not broadcast"):
        fn(np.ones((0, 4), np.float16), np.ones(3, np.float16))     # empty, and still checked


@pytest.mark.parametrize("scalar", [2, 2.5, -1e-3, True, np.float64(0.75), np.array(3.0), np.array(2, np.int64),
                                    np.float32(1.5)])
@pytest.mark.parametrize("dtype", [np.float16, np.float32])
@pytest.mark.parametrize("name", ["add", "mul"])
def test_a_scalar_takes_the_arrays_dtype_as_in_torch(name, dtype, scalar):
    """torch computes fp16 x scalar with the scalar in fp32 and rounds once; the vector unit takes
    the scalar in fp16, so an fp16 result may be one ulp off when the scalar is no fp16 value."""
    x = np.random.default_rng(2).standard_normal((2, 7)).astype(dtype)
    t_scalar = torch.tensor(scalar) if isinstance(scalar, np.ndarray) else scalar
    op = getattr(torch, name)
    exact = dtype == np.float32 or float(np.float16(scalar)) == float(scalar)
    for got, want in [(getattr(ops, name)(x, scalar, chip="teach"), op(torch.tensor(x), t_scalar)),
                      (getattr(ops, name)(scalar, x, chip="teach"), op(t_scalar, torch.tensor(x)))]:
        assert got.dtype == dtype == want.numpy().dtype and got.shape == (2, 7)
        if exact:
            assert np.array_equal(got, want.numpy())
        else:
            assert_close(got, want.float().numpy())


def test_scalars_alone_or_with_int_arrays_are_still_refused():
    with pytest.raises(npulab.ShapeError, match="^add: x is float64 and y is float64; both must be float16"):
        ops.add(2.0, 3.0)
    with pytest.raises(npulab.ShapeError, match="^mul: x is int64; expected float16 or float32"):
        ops.mul(np.ones(3, np.int64), 2.0)
    with pytest.raises(npulab.ShapeError, match="both must be float16 or both float32"):
        ops.add(np.ones(3, np.float32), np.ones(1, np.float64))      # 1-D, not a scalar: no promotion
