"""ReLU, GELU (erf and tanh), SiLU and softmax (any axis) against PyTorch on the CPU."""
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import npulab
import npulab.ops as ops
from npulab.kernels.activation import activation_tiling
from fixtures import assert_close

F = torch.nn.functional
DTYPES = st.sampled_from([np.float16, np.float32])
SHAPES = st.lists(st.integers(1, 9), min_size=1, max_size=4)
SETTINGS = settings(max_examples=15, deadline=None, derandomize=True)


def _rand(shape, dtype, seed, scale=3.0):
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(dtype)


def _seed(shape):
    return int(np.prod(shape)) * 7 + len(shape)


ACTS = {
    "relu": (ops.relu, F.relu),
    "silu": (ops.silu, F.silu),
    "gelu": (ops.gelu, F.gelu),
    "gelu_tanh": (lambda x, chip: ops.gelu(x, "tanh", chip=chip), lambda x: F.gelu(x, approximate="tanh")),
}


@SETTINGS
@given(shape=SHAPES, dtype=DTYPES, name=st.sampled_from(sorted(ACTS)), chip=st.sampled_from(["teach", "910"]))
def test_activations_match_torch(shape, dtype, name, chip):
    x = _rand(shape, dtype, _seed(shape))
    ours, theirs = ACTS[name]
    y = ours(x, chip=chip)
    assert y.dtype == dtype and y.shape == x.shape
    assert_close(y, theirs(torch.tensor(x.astype(np.float32))).numpy())


@pytest.mark.parametrize("name", sorted(ACTS))
def test_activations_over_a_wide_range_in_many_tiles(name):
    # -12 .. 12 covers GELU's tails (the erf polynomial, exp overflow in the tanh form) and
    # 3000 elements on the teaching chip run several tiles a block
    x = np.linspace(-12, 12, 3000, dtype=np.float32)
    ours, theirs = ACTS[name]
    y, trace = (ours(x, chip="teach", return_trace=True) if name != "gelu_tanh"
                else ops.gelu(x, "tanh", chip="teach", return_trace=True))
    assert_close(y, theirs(torch.tensor(x)).numpy())
    t = activation_tiling(3000, np.float32, "relu", "teach")
    assert t.tile < t.block_factor
    assert trace.summary()["vec_ratio"] > 0


def test_relu_is_exact_and_gelu_erf_takes_longer_than_tanh():
    x = _rand((64, 64), np.float16, 1)
    assert np.array_equal(ops.relu(x, chip="teach"), np.maximum(x, np.float16(0)))
    _, t_erf = ops.gelu(x, chip="teach", return_trace=True)
    _, t_tanh = ops.gelu(x, "tanh", chip="teach", return_trace=True)
    # the erf form is a longer chain of dependent vector instructions: each waits for the
    # previous one's start-up (latency, an automatic PIPE_V barrier between them), so it takes
    # longer, though its repeats occupy the pipe for fewer cycles (no Div)
    assert t_erf.cycles > t_tanh.cycles
    assert _auto_barriers(t_erf) > _auto_barriers(t_tanh)


def _auto_barriers(trace) -> int:
    return sum(1 for i in np.flatnonzero(trace.kind == 1) if trace.name[i] == "pipe_barrier V (auto)")


@SETTINGS
@given(shape=SHAPES, dtype=DTYPES, data=st.data(), chip=st.sampled_from(["teach", "910"]))
def test_softmax_any_dim_matches_torch(shape, dtype, data, chip):
    dim = data.draw(st.integers(-len(shape), len(shape) - 1))
    x = _rand(shape, dtype, _seed(shape), scale=4.0)
    y = ops.softmax(x, dim, chip=chip)
    assert_close(y, F.softmax(torch.tensor(x.astype(np.float32)), dim).numpy())


def test_softmax_is_stable_for_large_inputs():
    x = np.array([[1000.0, 1001.0, 1002.0, -1000.0] * 10] * 3, np.float32)
    y = ops.softmax(x, -1, chip="teach")
    assert np.all(np.isfinite(y))
    assert_close(y, F.softmax(torch.tensor(x), -1).numpy())
    y0 = ops.softmax(x, 0, chip="teach")
    assert_close(y0, F.softmax(torch.tensor(x), 0).numpy())


def test_activation_errors():
    with pytest.raises(npulab.ShapeError, match="approximate must be 'none' or 'tanh'"):
        ops.gelu(np.ones(4, np.float32), approximate="sigmoid")
    with pytest.raises(npulab.ShapeError, match="float16 or float32"):
        ops.relu(np.ones(4, np.int32))
    with pytest.raises(npulab.ShapeError, match=r"dim=3 is out of range for an input with 2 dims"):
        ops.softmax(np.ones((2, 3), np.float32), 3)
    with pytest.raises(npulab.ShapeError, match="dim must be an integer"):
        ops.softmax(np.ones((2, 3), np.float32), 1.5)
    with pytest.raises(npulab.ShapeError, match="Use a shorter softmax axis"):
        ops.softmax(np.ones((5000, 2), np.float32), 0, chip="teach")


def test_bench_vector_rows_have_the_bench_fields():
    from npulab.bench.vector import bench_vector
    rows = bench_vector("teach", shape=(2, 8, 64), dtypes=(np.float32,))
    assert [(r["op"], r.get("approximate")) for r in rows] == [("LayerNorm", None), ("SoftmaxV2", None),
                                                              ("Gelu", "none"), ("Gelu", "tanh")]
    for r in rows:
        assert {"op", "shape", "dtype", "chip", "tiling", "cycles", "lower_bound_cycles", "utilization"} <= set(r)
        assert 0 < r["utilization"] <= 1 and r["lower_bound_cycles"] < r["cycles"]


FP16_ALL = np.arange(65536, dtype=np.uint32).astype(np.uint16).view(np.float16)
FP16_ALL = FP16_ALL[np.isfinite(FP16_ALL)]                # every finite fp16 value, both zeros


@pytest.mark.parametrize("approximate, act", [("none", "gelu_erf"), ("tanh", "gelu_tanh")])
@pytest.mark.parametrize("compute_dtype", [None, np.float32])
def test_fp16_gelu_on_every_fp16_value(approximate, act, compute_dtype):
    # fp16 GELU runs in fp16 by default (both forms; ops-nn widens the erf form); the widened
    # path stays available. Every finite fp16 input: tails, huge |x| (x^2 overflows fp16),
    # subnormals and zeros
    from npulab.kernels.activation import launch_activation
    t = activation_tiling(FP16_ALL.size, np.float16, act, "910", compute_dtype=compute_dtype)
    assert t.compute_dtype == ("float16" if compute_dtype is None else "float32")
    with np.errstate(over="ignore"):
        y, _ = launch_activation(FP16_ALL, t, "910")
    assert not np.isnan(y).any()
    assert_close(y, F.gelu(torch.tensor(FP16_ALL.astype(np.float32)), approximate=approximate).numpy())


def test_gelu_erf_fp32_far_tails_and_near_zero():
    tiny = np.geomspace(1e-30, 1e-3, 400)
    huge = np.geomspace(5.0, 1e30, 400)
    x = np.concatenate([tiny, -tiny, huge, -huge, [0.0]]).astype(np.float32)
    y = ops.gelu(x, chip="910")
    assert not np.isnan(y).any()
    assert_close(y, F.gelu(torch.tensor(x)).numpy())


SOFTMAX_PATHS = ((True, True), (True, False), (False, False))      # (narrow, exp16)


def test_fp16_softmax_max_and_subtract_in_fp16_or_widened():
    # the default fp16 AR kernel takes the row max, x - max, exp and the scaling in fp16 and
    # only the sum in fp32 (exp16); narrow without exp16 widens after x - max; narrow=False (as
    # ops-nn) does every step in fp32. All three match torch on rows of very different
    # scales, and each step moved to fp16 spends less vector time
    from npulab.kernels.softmax import launch_softmax, softmax_ar_tiling
    rng = np.random.default_rng(11)
    scales = np.array([1e-3, 0.5, 4.0, 30.0, 300.0, 3000.0, 20000.0])[:, None]
    x = np.clip(rng.standard_normal((7 * 9, 768)) * np.repeat(scales, 9, axis=0), -65504, 65504).astype(np.float16)
    ref = F.softmax(torch.tensor(x.astype(np.float32)), -1).numpy()
    for chip in ("910", "910b"):
        cycles = []
        for narrow, exp16 in SOFTMAX_PATHS:
            t = softmax_ar_tiling(x.shape[0], 768, np.float16, chip, narrow=narrow, exp16=exp16)
            assert (t.narrow, t.exp16) == (narrow, exp16)
            y, _ = launch_softmax(x, t, chip)
            assert_close(y, ref)
            _, tr = launch_softmax(x, t, chip, "timing")
            cycles.append(int(tr.busy_cycles(0)[5]))
        assert cycles[0] < cycles[1] < cycles[2]
    assert softmax_ar_tiling(8, 768, np.float16, "910").exp16          # the default
    assert not softmax_ar_tiling(8, 768, np.float16, "910", narrow=False, exp16=True).exp16


@pytest.mark.parametrize("narrow, exp16", SOFTMAX_PATHS)
def test_fp16_softmax_on_every_fp16_value(narrow, exp16):
    # every finite fp16 value v in a row [v, 0, ..., 0] (so exp sees v and -v after the max is
    # taken off), and the sorted values 32 to a row (rows of every spread); 32 columns fold in
    # two 16-value halves, as 768 does
    from npulab.kernels.softmax import launch_softmax, softmax_ar_tiling
    cols = 32
    one = np.zeros((FP16_ALL.size, cols), np.float16)
    one[:, 0] = FP16_ALL
    ordered = np.sort(FP16_ALL.astype(np.float32)).astype(np.float16)
    dense = np.resize(ordered, (-(-ordered.size // cols)) * cols).reshape(-1, cols)
    x = np.concatenate([one, dense])
    t = softmax_ar_tiling(x.shape[0], cols, np.float16, "910", narrow=narrow, exp16=exp16)
    y, _ = launch_softmax(x, t, "910")
    assert not np.isnan(y).any()
    assert_close(y, F.softmax(torch.tensor(x.astype(np.float32)), -1).numpy())
