"""LayerNorm, RMSNorm and BatchNorm (inference) against PyTorch on the CPU."""
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import npulab
import npulab.ops as ops
from npulab.kernels.norm import layer_norm_tiling
from fixtures import assert_close

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
    # gamma / beta broadcast to a whole tile (one FusedMulAdd / Mul / Add over the tile) or kept
    # as one row (the per-column forms, one instruction a group of 8 rows): the same numbers
    from npulab.kernels.norm import launch_layer_norm
    from npulab.kernels.vector_base import ramp_tiles
    x = _rand((40, 96), dtype, 21, shift=1.5)
    w = _rand(96, dtype, 22) if affine in ("both", "weight") else None
    b = _rand(96, dtype, 23) if affine in ("both", "bias") else None
    ref = F.layer_norm(_t(x), (96,), _t(w), _t(b), eps=1e-5).numpy()
    for tile in (True, False):
        t = layer_norm_tiling(40, 96, dtype, "teach", param_tile=tile)
        assert t.param_rows == (2 if tile else 0)
        y, _ = launch_layer_norm(x, w, b, t, 1e-5, "teach")
        assert_close(y, ref)
        _, tr = launch_layer_norm(x, w, b, t, 1e-5, "teach", "timing")
        names = [n.split()[0] for n, c in zip(tr.name, tr.core) if c == 0]
        tiles = ramp_tiles(t.block_factor, t.tile_rows, 1, t.ramp)
        per_col = sum(-(-n // 8) for n in tiles)         # groups of 8 rows a tile
        affine_ops = {"both": ("fused_mul_add", "fused_mul_add_per_col"), "weight": ("mul", "mul_per_col"),
                      "bias": ("add", "add_per_col"), "none": (None, None)}[affine]
        if affine != "none":
            whole, by_col = affine_ops
            if tile:
                assert names.count(by_col) == 0 and names.count(whole) >= len(tiles)
            else:
                assert names.count(by_col) == per_col
    # rows that do not start on a 32-byte block keep the per-column form
    assert layer_norm_tiling(40, 90, dtype, "910").param_rows == 0


def test_layer_norm_param_tile_only_when_it_costs_no_rows():
    # the default (None) broadcasts gamma / beta to a tile only when the UB leaves the tile rows
    # as they are: a small fp32 tile keeps it, BERT's fp16 rows on the 910 do without
    small = layer_norm_tiling(40, 96, np.float32, "teach")
    assert small.param_rows == 2 and small.tile_rows == layer_norm_tiling(40, 96, np.float32, "teach",
                                                                         param_tile=False).tile_rows
    bert = layer_norm_tiling(32 * 128, 768, np.float16, "910")
    forced = layer_norm_tiling(32 * 128, 768, np.float16, "910", param_tile=True)
    assert bert.param_rows == 0 and forced.param_rows == 2 and forced.tile_rows < bert.tile_rows


@pytest.mark.parametrize("chip", ["910", "910b"])
def test_fp16_layer_norm_hard_rows(chip):
    # rows where a one-pass variance (E[x^2] - mean^2) loses every digit in fp32: a mean 2,000
    # times the spread, constant rows; plus BERT-like rows, and large gamma and beta that
    # cancel. The two-pass fp32 statistics keep all of them within the fp16 tolerance. (A mean
    # 50,000 times the spread, say 1000 with one value an fp16 ulp away, is past fp32 itself:
    # one ulp of the mean is then 1/300 of a standard deviation, in torch's fp32 reference too.)
    rng = np.random.default_rng(5)
    cols = 768
    rows = [rng.standard_normal(cols) * 0.5 + 1000.0,
            np.full(cols, 1000.0), np.full(cols, -3.0),
            rng.standard_normal(cols), rng.standard_normal(cols) * 40 - 7]
    x = np.stack(rows * 4).astype(np.float16)
    w = (rng.standard_normal(cols) * 4).astype(np.float16)
    b = (-w.astype(np.float32) * rng.standard_normal(cols)).astype(np.float16)
    y = ops.layer_norm(x, (cols,), w, b, eps=1e-5, chip=chip)
    assert_close(y, F.layer_norm(_t(x), (cols,), _t(w), _t(b), eps=1e-5).numpy())


@pytest.mark.parametrize("cols", [768, 96, 80])
def test_fp16_layer_norm_interleaved_tiles_compute_the_same(cols):
    # tiles whose vector steps interleave (RowKernel.process_interleaved, in_flight > 1) run the
    # same fp32 arithmetic however many are in flight: the same bits out, within the tolerance
    # of torch on hard rows (a mean far above the spread, gamma and beta that cancel); and
    # fewer automatic PIPE_V barriers, since one orders a step of every tile in flight. Against
    # one tile at a time (in_flight=1) the variance sums a row's squares in quarters instead
    # of halves, another fp32 rounding; cols=80 folds in halves there too (a quarter of its
    # row is not a 32-byte block), the same bits as one tile at a time
    from npulab.kernels.norm import launch_layer_norm
    rng = np.random.default_rng(8)
    rows = 200
    x = (rng.standard_normal((rows, cols)) * np.where(np.arange(rows) % 3 == 0, 0.5, 30.0)[:, None]
         + np.where(np.arange(rows) % 2 == 0, 100.0, -2.0)[:, None]).astype(np.float16)
    w = (rng.standard_normal(cols) * 4).astype(np.float16)
    b = (-w.astype(np.float32) * rng.standard_normal(cols)).astype(np.float16)
    ref = F.layer_norm(_t(x), (cols,), _t(w), _t(b), eps=1e-5).numpy()
    outs, barriers = [], []
    for d in (1, 2, 3):
        t = layer_norm_tiling(rows, cols, np.float16, "910", tile_rows=4, param_tile=False, in_flight=d)
        assert t.in_flight == d and t.buffer_num > d - 1
        y, tr = launch_layer_norm(x, w, b, t, 1e-5, "910")
        assert_close(y, ref)
        outs.append(y)
        barriers.append(sum(1 for i in np.flatnonzero((tr.core == 0) & (tr.kind == 1))
                            if tr.name[i] == "pipe_barrier V (auto)"))
    assert np.array_equal(outs[1], outs[2])
    if cols == 80:
        assert np.array_equal(outs[0], outs[1])
    assert barriers[0] > barriers[1] > barriers[2]


def test_layer_norm_interleaves_fp16_tiles_by_default_where_they_fit():
    bert = layer_norm_tiling(32 * 128, 768, np.float16, "910")
    one = layer_norm_tiling(32 * 128, 768, np.float16, "910", in_flight=1, param_tile=False)
    assert bert.in_flight >= 2 and bert.tile_rows == one.tile_rows and bert.param_rows == 0
    assert bert.buffer_num > bert.in_flight
    assert layer_norm_tiling(32 * 128, 768, np.float32, "910").in_flight == 1
    assert layer_norm_tiling(32 * 128, 768, np.float16, "910", param_tile=True).in_flight == 1
    assert layer_norm_tiling(40, 90, np.float16, "910").in_flight == 1       # halves not on blocks
    with pytest.raises(npulab.errors.ShapeError, match="in_flight"):
        from npulab.kernels.norm import launch_layer_norm
        t = layer_norm_tiling(64, 768, np.float32, "910", in_flight=2)
        launch_layer_norm(np.zeros((64, 768), np.float32), None, None, t, 1e-5, "910", "timing")


@pytest.mark.parametrize("dtype", [np.float16, np.float32])
def test_empty_batches_give_empty_outputs(dtype):
    x = np.zeros((0, 4), dtype)
    w = np.ones(4, dtype)
    for y, ref in [(ops.layer_norm(x, 4, w, w), F.layer_norm(_t(x), (4,), _t(w), _t(w))),
                   (ops.rms_norm(x, [4], w), F.rms_norm(_t(x), (4,), _t(w))),
                   (ops.batch_norm(np.zeros((2, 3, 0), dtype), np.zeros(3, dtype), np.ones(3, dtype)),
                    F.batch_norm(torch.zeros(2, 3, 0), torch.zeros(3), torch.ones(3))),
                   (ops.batch_norm(np.zeros((0, 3, 2, 2), dtype), np.zeros(3, dtype), np.ones(3, dtype), w[:3]),
                    F.batch_norm(torch.zeros(0, 3, 2, 2), torch.zeros(3), torch.ones(3), torch.ones(3)))]:
        assert y.shape == tuple(ref.shape) and y.size == 0 and y.dtype == dtype
    y, trace = ops.layer_norm(np.zeros((2, 0, 3), dtype), 3, return_trace=True)
    assert y.shape == (2, 0, 3) and trace is None
    with pytest.raises(npulab.ShapeError, match=r"layer_norm: normalized_shape \(4,\) must be the last"):
        ops.layer_norm(np.zeros((0, 5), dtype), 4)         # an empty batch is still checked


def test_nothing_to_normalise_is_an_error():
    with pytest.raises(npulab.ShapeError, match=r"^layer_norm: normalized_shape \(0,\) has no elements"):
        ops.layer_norm(np.zeros((3, 0), np.float32), 0)
    with pytest.raises(npulab.ShapeError, match=r"^rms_norm: normalized_shape \(2, 0\) has no elements"):
        ops.rms_norm(np.zeros((3, 2, 0), np.float32), (2, 0))


def test_batch_norm_names_the_vector_that_is_wrong():
    x = np.ones((4, 3), np.float32)
    m, v = np.zeros(3, np.float32), np.ones(3, np.float32)
    with pytest.raises(npulab.ShapeError, match=r"^batch_norm: bias has shape \(4,\); expected \(3,\)"):
        ops.batch_norm(x, m, v, None, np.zeros(4, np.float32))
    with pytest.raises(npulab.ShapeError, match=r"^batch_norm: weight has shape \(2,\); expected \(3,\)"):
        ops.batch_norm(x, m, v, np.ones(2, np.float32), np.zeros(3, np.float32))
    with pytest.raises(npulab.ShapeError, match="^batch_norm: bias is float16 and the input float32"):
        ops.batch_norm(x, m, v, None, np.zeros(3, np.float16))
    y = ops.batch_norm(x, m, v, None, np.full(3, 0.5, np.float32), chip="teach")    # bias without weight
    assert_close(y, F.batch_norm(_t(x), _t(m), _t(v), None, torch.full((3,), 0.5)).numpy())
