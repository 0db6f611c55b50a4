"""Add and Mul with numpy/torch broadcasting: bit-exact against numpy, shapes as torch's."""
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import npulab
import npulab.ops as ops
from npulab.kernels.broadcast import collapse

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
    with pytest.raises(npulab.ShapeError, match=r"shapes \(3,\) and \(4,\) do not broadcast"):
        ops.mul(np.ones(3, np.float32), np.ones(4, np.float32))
    with pytest.raises(npulab.ShapeError, match="both must be float16 or both float32"):
        ops.mul(np.ones(3, np.float32), np.ones(3, np.float16))
    with pytest.raises(npulab.ShapeError, match="float16 or float32"):
        ops.add(np.ones((2, 3), np.int32), np.ones(3, np.int32))
