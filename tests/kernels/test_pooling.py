"""MaxPool2d, AvgPool2d and the fused AvgPool + Scale against PyTorch on the CPU."""
import numpy as np
import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import npulab
import npulab.ops as ops
from fixtures import assert_close

F = torch.nn.functional
DTYPES = st.sampled_from([np.float16, np.float32])
SETTINGS = settings(max_examples=20, deadline=None, derandomize=True)


def _rand(shape, dtype, seed):
    return (np.random.default_rng(seed).standard_normal(shape) * 2).astype(dtype)


@st.composite
def pool_case(draw, dilation=True):
    k = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    s = draw(st.one_of(st.none(), st.tuples(st.integers(1, 3), st.integers(1, 3))))
    p = (draw(st.integers(0, k[0] // 2)), draw(st.integers(0, k[1] // 2)))
    d = (draw(st.integers(1, 2)), draw(st.integers(1, 2))) if dilation else (1, 1)
    shape = (draw(st.integers(1, 2)), draw(st.integers(1, 3)), draw(st.integers(3, 12)), draw(st.integers(3, 12)))
    return shape, k, s, p, d, draw(st.booleans())


def _torch_or_none(fn):
    try:
        return fn()
    except RuntimeError:            # torch rejects the case (output would be empty)
        return None


@SETTINGS
@given(case=pool_case(), dtype=DTYPES, chip=st.sampled_from(["teach", "910"]))
def test_max_pool2d_matches_torch(case, dtype, chip):
    shape, k, s, p, d, ceil = case
    x = _rand(shape, dtype, sum(shape) + sum(k))
    ref = _torch_or_none(lambda: F.max_pool2d(torch.tensor(x.astype(np.float32)), k, s, p, d, ceil).numpy())
    assume(ref is not None and ref.size)
    y = ops.max_pool2d(x, k, s, p, d, ceil, chip=chip)
    assert np.array_equal(y.astype(np.float32), ref)          # max is exact in any dtype


@SETTINGS
@given(case=pool_case(dilation=False), dtype=DTYPES, count_include_pad=st.booleans(),
       chip=st.sampled_from(["teach", "910"]))
def test_avg_pool2d_matches_torch(case, dtype, count_include_pad, chip):
    shape, k, s, p, _, ceil = case
    x = _rand(shape, dtype, sum(shape) * 3 + sum(k))
    ref = _torch_or_none(lambda: F.avg_pool2d(torch.tensor(x.astype(np.float32)), k, s, p, ceil,
                                              count_include_pad).numpy())
    assume(ref is not None and ref.size)
    y = ops.avg_pool2d(x, k, s, p, ceil, count_include_pad, chip=chip)
    assert_close(y, ref)


@pytest.mark.parametrize("dtype", [np.float16, np.float32])
def test_fused_avg_pool_scale_equals_pool_then_scale_and_costs_no_more(dtype):
    x = _rand((2, 4, 14, 14), dtype, 5)
    y, fused = ops.avg_pool2d_scale(x, 3, 0.25, 2, 1, chip="teach", return_trace=True)
    ref = 0.25 * F.avg_pool2d(torch.tensor(x.astype(np.float32)), 3, 2, 1).numpy()
    assert_close(y, ref)
    pooled, t_pool = ops.avg_pool2d(x, 3, 2, 1, chip="teach", return_trace=True)
    _, t_scale = ops.mul(pooled, np.array([0.25], dtype), chip="teach", return_trace=True)
    gm = lambda t: t.summary()["gm_read_bytes"] + t.summary()["gm_write_bytes"]
    assert fused.cycles < t_pool.cycles + t_scale.cycles
    assert gm(fused) < gm(t_pool) + gm(t_scale)


def test_resnet_stem_max_pool_on_910():
    x = _rand((1, 4, 112, 112), np.float32, 11)
    y = ops.max_pool2d(x, 3, 2, 1)
    assert np.array_equal(y, F.max_pool2d(torch.tensor(x), 3, 2, 1).numpy())


def test_pool_errors():
    x = np.ones((1, 1, 6, 6), np.float32)
    with pytest.raises(npulab.ShapeError, match="NCHW"):
        ops.max_pool2d(np.ones((6, 6), np.float32), 2)
    with pytest.raises(npulab.ShapeError, match="padding .* half the kernel size"):
        ops.max_pool2d(x, 2, padding=2)
    with pytest.raises(npulab.ShapeError, match="larger than the input plane"):
        ops.avg_pool2d(x, 7)
    with pytest.raises(npulab.ShapeError, match="must be positive"):
        ops.max_pool2d(x, 2, stride=0)
    with pytest.raises(npulab.ShapeError, match="whole plane"):
        ops.max_pool2d(np.ones((1, 1, 100, 100), np.float32), 2, chip="teach")
    with pytest.raises(npulab.ShapeError, match="divisor_override"):
        ops.avg_pool2d(x, 2, divisor_override=3)
    with pytest.raises(npulab.ShapeError, match="scale must be a number"):
        ops.avg_pool2d_scale(x, 2, "big")


@pytest.mark.parametrize("name, value", [("kernel_size", 2.5), ("kernel_size", "2"), ("kernel_size", True),
                                         ("kernel_size", (2, 2.0)), ("kernel_size", (2, 2, 2)), ("stride", "1"),
                                         ("stride", 1.0), ("padding", (0, False)), ("dilation", [1, None])])
def test_pool_arguments_must_be_ints(name, value):
    x = np.ones((1, 1, 6, 6), np.float32)
    args = dict(kernel_size=2)
    args[name] = value
    with pytest.raises(npulab.ShapeError, match=rf"^max_pool2d: {name} must be an int or a tuple of 2 ints, got"):
        ops.max_pool2d(x, **args)
    if name != "dilation":
        with pytest.raises(npulab.ShapeError, match=rf"^avg_pool2d: {name} must be an int or a tuple of 2 ints"):
            ops.avg_pool2d(x, **args)


def test_pool_arguments_as_torch_takes_them():
    x = _rand((1, 2, 6, 6), np.float32, 3)
    y = ops.max_pool2d(x, (2,), [1, 2], np.int64(1), (1,), chip="teach")
    assert np.array_equal(y, F.max_pool2d(torch.tensor(x), (2,), [1, 2], 1, (1,)).numpy())
    y = ops.avg_pool2d(x, [3, 2], (), 1, chip="teach")                     # stride () = kernel_size
    assert_close(y, F.avg_pool2d(torch.tensor(x), [3, 2], [], 1).numpy())
    with pytest.raises(npulab.ShapeError, match="^max_pool2d: padding must be >= 0, got -1"):
        ops.max_pool2d(x, 2, 2, -1)


@pytest.mark.parametrize("fn", [ops.max_pool2d, ops.avg_pool2d])
@pytest.mark.parametrize("dtype", [np.float16, np.float32])
def test_empty_batch_pools_to_an_empty_output(fn, dtype):
    x = np.ones((0, 3, 7, 5), dtype)
    y, trace = fn(x, 3, 2, 1, ceil_mode=True, return_trace=True)
    ref = getattr(F, fn.__name__)(torch.tensor(x.astype(np.float32)), 3, 2, 1, ceil_mode=True)
    assert y.shape == tuple(ref.shape) == (0, 3, 4, 3) and y.dtype == dtype and trace is None
    with pytest.raises(npulab.ShapeError, match=r"empty input of shape \(1, 0, 7, 5\)"):
        fn(np.ones((1, 0, 7, 5), dtype), 3)                 # as torch: only the batch may be empty
    with pytest.raises(npulab.ShapeError, match="padding .* half the kernel size"):
        fn(x, 2, padding=2)                                 # an empty batch is still checked
