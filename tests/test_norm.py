"""LayerNorm, RMSNorm and BatchNorm (inference) against PyTorch on the CPU."""
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import npulab
import npulab.ops as ops
from npulab.kernels.norm import layer_norm_tiling
from tolerances import assert_close

F = torch.nn.functional
DTYPES = st.sampled_from([np.float16, np.float32])
SETTINGS = settings(max_examples=15, deadline=None, derandomize=True)


def _t(a):
    return None if a is None else torch.tensor(np.asarray(a, np.float32))


def _rand(shape, dtype, seed, scale=2.0, shift=0.0):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(shape) * scale + shift).astype(dtype)


@SETTINGS
@given(lead=st.lists(st.integers(1, 5), min_size=0, max_size=2), norm=st.lists(st.integers(1, 20), min_size=1, max_size=2),
       dtype=DTYPES, affine=st.sampled_from(["none", "weight", "both"]), chip=st.sampled_from(["teach", "910"]))
def test_layer_norm_matches_torch(lead, norm, dtype, affine, chip):
    seed = sum(lead) * 100 + sum(norm)
    x = _rand(tuple(lead) + tuple(norm), dtype, seed, shift=1.5)
    w = _rand(norm, dtype, seed + 1) if affine != "none" else None
    b = _rand(norm, dtype, seed + 2) if affine == "both" else None
    y = ops.layer_norm(x, tuple(norm), w, b, eps=1e-5, chip=chip)
    ref = F.layer_norm(_t(x), tuple(norm), _t(w), _t(b), eps=1e-5).numpy()
    assert y.dtype == dtype
    assert_close(y, ref)


def test_layer_norm_bert_row_in_many_tiles_with_trace():
    x = _rand((3, 37, 96), np.float32, 3)
    w, b = _rand(96, np.float32, 4), _rand(96, np.float32, 5)
    y, trace = ops.layer_norm(x, 96, w, b, chip="teach", return_trace=True)
    assert_close(y, F.layer_norm(_t(x), (96,), _t(w), _t(b)).numpy())
    t = layer_norm_tiling(3 * 37, 96, np.float32, "teach")
    assert t.tile_rows < t.block_factor       # more than one tile a block: the pipeline is exercised
    assert trace.summary()["vec_ratio"] > 0


@SETTINGS
@given(rows=st.integers(1, 40), cols=st.integers(1, 80), dtype=DTYPES, weight=st.booleans(),
       eps=st.sampled_from([None, 1e-6]))
def test_rms_norm_matches_torch(rows, cols, dtype, weight, eps):
    x = _rand((rows, cols), dtype, rows * 100 + cols)
    w = _rand(cols, dtype, cols) if weight else None
    y = ops.rms_norm(x, [cols], w, eps=eps, chip="teach")
    ref_eps = float(np.finfo(dtype).eps) if eps is None else eps
    assert_close(y, F.rms_norm(_t(x), (cols,), _t(w), eps=ref_eps).numpy())


@SETTINGS
@given(n=st.integers(1, 3), c=st.integers(1, 20), h=st.integers(1, 9), w=st.integers(1, 9),
       dtype=DTYPES, affine=st.booleans(), chip=st.sampled_from(["teach", "910"]))
def test_batch_norm_inference_matches_torch(n, c, h, w, dtype, affine, chip):
    seed = n * 1000 + c * 100 + h * 10 + w
    x = _rand((n, c, h, w), dtype, seed)
    mean, var = _rand(c, dtype, seed + 1), (np.abs(_rand(c, dtype, seed + 2)) + 0.5).astype(dtype)
    wt, bs = (_rand(c, dtype, seed + 3), _rand(c, dtype, seed + 4)) if affine else (None, None)
    y = ops.batch_norm(x, mean, var, wt, bs, chip=chip)
    ref = F.batch_norm(_t(x), _t(mean), _t(var), _t(wt), _t(bs), training=False, eps=1e-5).numpy()
    assert_close(y, ref)


def test_batch_norm_plane_larger_than_ub_is_split():
    x = _rand((1, 3, 40, 40), np.float32, 9)          # a 6.4 KB plane on a 16 KiB UB
    mean, var = _rand(3, np.float32, 1), np.full(3, 2.0, np.float32)
    y = ops.batch_norm(x, mean, var, chip="teach")
    assert_close(y, F.batch_norm(_t(x), _t(mean), _t(var), training=False).numpy())


def test_norm_errors_name_the_problem():
    x = np.ones((4, 8), np.float32)
    with pytest.raises(npulab.ShapeError, match=r"normalized_shape \(7,\) must be the last dimensions"):
        ops.layer_norm(x, (7,))
    with pytest.raises(npulab.ShapeError, match=r"weight has shape \(4,\); expected normalized_shape \(8,\)"):
        ops.layer_norm(x, (8,), np.ones(4, np.float32))
    with pytest.raises(npulab.ShapeError, match="float16 or float32"):
        ops.layer_norm(x.astype(np.float64), (8,))
    with pytest.raises(npulab.ShapeError, match="bias is float16 and the input float32"):
        ops.layer_norm(x, (8,), None, np.ones(8, np.float16))
    with pytest.raises(npulab.ShapeError, match="UB"):
        ops.layer_norm(np.ones((2, 5000), np.float32), (5000,), chip="teach")
    with pytest.raises(npulab.ShapeError, match="training=True is not supported"):
        ops.batch_norm(np.ones((1, 2, 3, 3), np.float32), np.zeros(2, np.float32), np.ones(2, np.float32), training=True)
    with pytest.raises(npulab.ShapeError, match=r"running_var has shape \(3,\); expected \(2,\)"):
        ops.batch_norm(np.ones((1, 2, 3, 3), np.float32), np.zeros(2, np.float32), np.ones(3, np.float32))
    with pytest.raises(npulab.ShapeError, match="rms_norm"):
        ops.rms_norm(x, (3,))


@pytest.mark.parametrize("affine", ["both", "weight", "bias", "none"])
@pytest.mark.parametrize("dtype", [np.float16, np.float32])
def test_layer_norm_gamma_beta_tile_and_per_column_forms_agree(affine, dtype):
    # gamma / beta broadcast to a whole tile (one FusedMulAdd a tile) or kept as one row
    # (per-column forms): the same numbers, and the tile form issues fewer vector instructions
    from npulab.kernels.norm import launch_layer_norm
    from npulab.sim.isa import Kind, Pipe
    x = _rand((40, 96), dtype, 21, shift=1.5)
    w = _rand(96, dtype, 22) if affine in ("both", "weight") else None
    b = _rand(96, dtype, 23) if affine in ("both", "bias") else None
    ref = F.layer_norm(_t(x), (96,), _t(w), _t(b), eps=1e-5).numpy()
    instr = {}
    for tile in (True, False):
        t = layer_norm_tiling(40, 96, dtype, "teach", param_tile=tile)
        assert t.param_rows == (2 if tile else 0)
        y, _ = launch_layer_norm(x, w, b, t, 1e-5, "teach")
        assert_close(y, ref)
        _, tr = launch_layer_norm(x, w, b, t, 1e-5, "teach", "timing")
        instr[tile] = int(((tr.core == 0) & (tr.pipe == Pipe.V) & (tr.kind == Kind.WORK) & (tr.end > tr.start)).sum())
    if affine != "none":
        assert instr[True] < instr[False]
    # rows that do not start on a 32-byte block keep the per-column form
    assert layer_norm_tiling(40, 90, dtype, "910").param_rows == 0
