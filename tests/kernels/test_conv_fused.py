"""Fused Conv+BN+ReLU and MatMul+BiasAdd(+ReLU) against PyTorch; the fused kernel against the
three kernels apart; the ResNet-50 bench table."""
from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as TF
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import npulab.ops as ops
from npulab.errors import ShapeError
from npulab.bench.conv import RESNET50_CONVS, conv_row, fused_vs_separate
from fixtures import assert_close

SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True)


def _t(a):
    return torch.tensor(np.asarray(a, dtype=np.float32))


def _bn_params(rng, c):
    return (rng.standard_normal(c).astype(np.float32), (rng.random(c) + 0.5).astype(np.float32),
            rng.standard_normal(c).astype(np.float32), rng.standard_normal(c).astype(np.float32))


# torch warns that padding='same' with an even kernel copies the input padded: the oracle's cost
@pytest.mark.filterwarnings("ignore:Using padding='same' with even kernel lengths:UserWarning")
@settings(max_examples=12, **SETTINGS)
@given(st.integers(1, 2), st.integers(1, 20), st.integers(1, 20), st.integers(1, 3), st.integers(1, 2),
       st.sampled_from([0, 1, "same"]), st.sampled_from([1, 2]), st.booleans(), st.booleans(),
       st.sampled_from([np.float16, np.float32]), st.integers(0, 2**31 - 1))
def test_conv_bn_relu_matches_torch(n, cin, cout, k, stride, padding, groups, bias, relu, dtype, seed):
    if padding == "same":
        stride = 1
    cin, cout = cin * groups, cout * groups
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, cin, 7, 6)).astype(dtype)
    w = rng.standard_normal((cout, cin // groups, k, k)).astype(dtype)
    b = rng.standard_normal(cout).astype(np.float32) if bias else None
    mean, var, gamma, beta = _bn_params(rng, cout)
    y = ops.conv2d_bn_relu(x, w, b, mean, var, gamma, beta, 1e-3, stride, padding, 1, groups,
                           relu=relu, chip="teach")
    c = TF.conv2d(_t(x), _t(w), None if b is None else _t(b), stride, padding, 1, groups)
    ref = TF.batch_norm(c, _t(mean), _t(var), _t(gamma), _t(beta), False, 0.1, 1e-3)
    ref = (torch.relu(ref) if relu else ref).numpy()
    assert y.dtype == dtype
    if relu:
        assert (y >= 0).all()
    assert_close(y, ref, unit="cube")


def test_conv_bn_relu_never_writes_the_conv_output():
    """One FixPipe write per output element: BN and ReLU happen on the way out of L0C."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 16, 8, 8)).astype(np.float16)
    w = rng.standard_normal((32, 16, 3, 3)).astype(np.float16)
    _, tr = ops.conv2d_bn_relu(x, w, None, *_bn_params(rng, 32), padding=1, chip="teach",
                               return_trace=True)
    out = 1 * 32 * 8 * 8 * 2
    assert tr.bytes_by_route()["L0C->GM"] == out
    assert not any(r.endswith("->UB") for r in tr.bytes_by_route())


def test_fused_beats_separate_on_a_resnet_layer():
    row = fused_vs_separate(batch=2)
    assert row["fused_fewer_bytes"] and row["fused_fewer_cycles"]
    assert row["gm_bytes"] < row["separate_gm_bytes"] and row["cycles"] < row["separate_cycles"]
    assert 0 < row["gm_bytes_ratio"] < 1 and 0 < row["cycles_ratio"] < 1
    assert row["separate_cycles"] == sum(row["separate_parts_cycles"].values())


def test_conv_bn_relu_errors():
    x = np.ones((1, 4, 6, 6), np.float16)
    w = np.ones((8, 4, 3, 3), np.float16)
    m = np.zeros(8, np.float32)
    with pytest.raises(ShapeError, match="running_mean and running_var are required"):
        ops.conv2d_bn_relu(x, w)
    with pytest.raises(ShapeError, match=r"running_var must have shape \(8,\)"):
        ops.conv2d_bn_relu(x, w, None, m, np.ones(4))
    with pytest.raises(ShapeError, match="float16 or float32"):
        ops.conv2d_bn_relu(x.astype(np.int8), w.astype(np.int8), None, m, m + 1)


@settings(max_examples=10, **SETTINGS)
@given(st.integers(1, 40), st.integers(1, 40), st.integers(1, 40), st.booleans(), st.booleans(),
       st.sampled_from([np.float16, np.float32]), st.integers(0, 2**31 - 1))
def test_linear_matches_torch(m, k, n, bias, relu, dtype, seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((2, m, k)).astype(dtype)
    w = rng.standard_normal((n, k)).astype(dtype)
    b = rng.standard_normal(n).astype(np.float32) if bias else None
    y = ops.linear(x, w, b, activation="relu" if relu else None, chip="teach")
    ref = TF.linear(_t(x), _t(w), None if b is None else _t(b))
    ref = (torch.relu(ref) if relu else ref).numpy()
    assert_close(y, ref, unit="cube")


def test_linear_int8_exact_and_errors():
    rng = np.random.default_rng(1)
    x = rng.integers(-128, 128, (5, 40)).astype(np.int8)
    w = rng.integers(-128, 128, (24, 40)).astype(np.int8)
    b = rng.integers(-100, 100, 24).astype(np.int32)
    y = ops.linear(x, w, b, chip="teach")
    np.testing.assert_array_equal(y, x.astype(np.int64) @ w.T.astype(np.int64) + b)
    with pytest.raises(ShapeError, match="activation must be None or 'relu'"):
        ops.linear(x, w, activation="gelu")
    with pytest.raises(ShapeError, match="must agree on K"):
        ops.linear(x, w[:, :3])


# -- the ResNet-50 bench table --------------------------------------------------------------------
def test_resnet50_table():
    assert len(RESNET50_CONVS) == 53
    by_name = {r[0]: r[1:] for r in RESNET50_CONVS}
    assert by_name["conv1"] == (3, 64, 7, 2, 3, 224)
    assert by_name["layer1.0.conv1"] == (64, 64, 1, 1, 0, 56)
    assert by_name["layer2.0.conv2"] == (128, 128, 3, 2, 1, 56)          # v1.5: stride in the 3x3
    assert by_name["layer3.0.downsample.0"] == (512, 1024, 1, 2, 0, 28)
    assert by_name["layer4.2.conv3"] == (512, 2048, 1, 1, 0, 7)
    assert sum(1 for r in RESNET50_CONVS if "downsample" in r[0]) == 4
    assert sum(1 for r in RESNET50_CONVS if r[3] == 3) == 16              # one 3x3 a bottleneck
    # the output of each bottleneck's conv3 is the next block's input
    macs = sum(c * o * k * k * ((h + 2 * p - k) // s + 1) ** 2 for _, c, o, k, s, p, h in RESNET50_CONVS)
    assert 4.0e9 < macs < 4.2e9                                           # ~4.1 GMACs at 224 x 224


def test_bench_row_format():
    row = conv_row(RESNET50_CONVS[-1], 1, "910")
    for key in ("op", "shape", "dtype", "chip", "tiling", "cycles", "lower_bound_cycles", "utilization",
                "roofline_utilization", "estimated"):
        assert key in row
    assert 0 < row["utilization"] <= row["roofline_utilization"] <= 1
    assert row["utilization"] == pytest.approx(row["lower_bound_cycles"] / row["cycles"], rel=1e-3)
