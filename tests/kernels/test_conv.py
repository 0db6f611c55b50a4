"""Convolutions on the cube (img2col): against PyTorch on the CPU, int8 against an integer numpy
reference, the img2col load and the tiling on their own, and the errors."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch
import torch.nn.functional as TF
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from fixtures import assert_close

import npulab.ops as ops
from npulab import formats as F
from npulab.arch import round_up
from npulab.errors import BufferOverflowError, ShapeError
from npulab.kernels import conv as K
from npulab.kernels import search
from npulab.kernels.conv import (block_work, can_implement, candidates, default_tiling, enlarge,
                                 estimate_cycles, tile_boxes, tiled)
from npulab.ops import golden
from npulab.ops.registry import dispatcher, op_types

SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True)


def _torch(a):
    return torch.tensor(np.asarray(a, dtype=np.float32))


def _ref2d(x, w, b, stride, padding, dilation, groups):
    return TF.conv2d(_torch(x), _torch(w), None if b is None else _torch(b), stride, padding,
                     dilation, groups).numpy()



@st.composite
def conv2d_cases(draw):
    groups = draw(st.sampled_from([1, 1, 2, 3]))
    cin = groups * draw(st.integers(1, 6))
    cout = groups * draw(st.integers(1, 6))
    kh, kw = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    dilation = (draw(st.integers(1, 2)), draw(st.integers(1, 2)))
    same = draw(st.booleans())
    if same:
        stride, padding = (1, 1), "same"
    else:
        stride = (draw(st.integers(1, 2)), draw(st.integers(1, 2)))
        padding = (draw(st.integers(0, 2)), draw(st.integers(0, 2)))
    h = draw(st.integers(dilation[0] * (kh - 1) + 1, 9))
    w = draw(st.integers(dilation[1] * (kw - 1) + 1, 9))
    n = draw(st.integers(1, 3))
    dtype = draw(st.sampled_from([np.float16, np.float32]))
    bias = draw(st.booleans())
    return n, cin, cout, h, w, kh, kw, stride, padding, dilation, groups, dtype, bias


@settings(max_examples=20, **SETTINGS)
@given(conv2d_cases(), st.integers(0, 2**31 - 1))
def test_conv2d_matches_torch(case, seed):
    n, cin, cout, h, w, kh, kw, stride, padding, dilation, groups, dtype, bias = case
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, cin, h, w)).astype(dtype)
    wt = rng.standard_normal((cout, cin // groups, kh, kw)).astype(dtype)
    b = rng.standard_normal(cout).astype(np.float32) if bias else None
    y = ops.conv2d(x, wt, b, stride, padding, dilation, groups, chip="teach")
    assert y.dtype == dtype
    assert_close(y, _ref2d(x, wt, b, stride, padding, dilation, groups), unit="cube")


@pytest.mark.parametrize("mult", [1, 2])
def test_depthwise_conv2d(mult):
    rng = np.random.default_rng(mult)
    c = 20
    x = rng.standard_normal((2, c, 7, 6)).astype(np.float16)
    wt = rng.standard_normal((c * mult, 1, 3, 3)).astype(np.float16)
    b = rng.standard_normal(c * mult).astype(np.float32)
    y = ops.conv2d(x, wt, b, 1, 1, 1, c, chip="teach")
    assert_close(y, _ref2d(x, wt, b, 1, 1, 1, c), unit="cube")


def test_group_enlargement():
    assert enlarge(1, 64, 64, 16) == 1
    assert enlarge(32, 1, 1, 16) == 16          # depthwise fp16: 16 channels a group
    assert enlarge(32, 1, 1, 32) == 16          # int8: limited by the 16 output channels of N0
    assert enlarge(4, 8, 8, 16) == 2
    assert enlarge(3, 5, 7, 16) == 3            # never more groups than there are


@settings(max_examples=8, **SETTINGS)
@given(st.integers(1, 2), st.integers(1, 5), st.integers(1, 6), st.integers(1, 2), st.integers(1, 2),
       st.integers(0, 1), st.sampled_from([np.float16, np.float32]), st.integers(0, 2**31 - 1))
def test_conv3d_matches_torch(n, cin, cout, kd, stride, pad, dtype, seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, cin, 4, 5, 6)).astype(dtype)
    wt = rng.standard_normal((cout, cin, kd, 3, 2)).astype(dtype)
    b = rng.standard_normal(cout).astype(np.float32)
    y = ops.conv3d(x, wt, b, stride=(stride, 1, stride), padding=pad, chip="teach")
    ref = TF.conv3d(_torch(x), _torch(wt), _torch(b), (stride, 1, stride), pad).numpy()
    assert_close(y, ref, unit="cube")


def test_conv3d_groups_dilation():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((1, 4, 5, 5, 5)).astype(np.float32)
    wt = rng.standard_normal((6, 2, 2, 2, 2)).astype(np.float32)
    y = ops.conv3d(x, wt, None, 1, "same", 2, 2, chip="teach")
    assert_close(y, TF.conv3d(_torch(x), _torch(wt), None, 1, "same", 2, 2).numpy(), unit="cube")


@settings(max_examples=12, **SETTINGS)
@given(st.integers(1, 2), st.sampled_from([1, 2]), st.integers(1, 4), st.integers(1, 3),
       st.integers(1, 3), st.integers(0, 2), st.integers(0, 1), st.integers(1, 2),
       st.sampled_from([np.float16, np.float32]), st.integers(0, 2**31 - 1))
def test_conv_transpose2d_matches_torch(n, groups, cin_g, cout_g, stride, padding, out_pad, dilation,
                                        dtype, seed):
    out_pad = min(out_pad, max(stride, dilation) - 1)
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, cin_g * groups, 5, 4)).astype(dtype)
    wt = rng.standard_normal((cin_g * groups, cout_g, 3, 2)).astype(dtype)
    b = rng.standard_normal(cout_g * groups).astype(np.float32)
    y = ops.conv_transpose2d(x, wt, b, stride, padding, out_pad, groups, dilation, chip="teach")
    ref = TF.conv_transpose2d(_torch(x), _torch(wt), _torch(b), stride, padding, out_pad, groups,
                              dilation).numpy()
    assert_close(y, ref, unit="cube")


# -- int8 -----------------------------------------------------------------------------------
@settings(max_examples=10, **SETTINGS)
@given(st.sampled_from([1, 2]), st.integers(1, 40), st.integers(1, 24), st.integers(1, 3),
       st.integers(1, 2), st.integers(0, 1), st.integers(0, 2**31 - 1))
def test_conv2d_int8_is_exact(groups, cin_g, cout_g, k, stride, pad, seed):
    rng = np.random.default_rng(seed)
    x = rng.integers(-128, 128, (2, cin_g * groups, 6, 7)).astype(np.int8)
    wt = rng.integers(-128, 128, (cout_g * groups, cin_g, k, k)).astype(np.int8)
    b = rng.integers(-5000, 5000, cout_g * groups).astype(np.int32)
    y = ops.conv2d(x, wt, b, stride, pad, 1, groups, chip="teach")
    assert y.dtype == np.int32
    ref = golden.conv2d(x, wt, b, stride, pad, 1, groups)           # int64 taps: exact
    np.testing.assert_array_equal(y, ref)


@pytest.mark.parametrize("per_channel", [False, True])
def test_conv2d_int8_dequant_scale(per_channel):
    rng = np.random.default_rng(7)
    x = rng.integers(-128, 128, (2, 24, 6, 6)).astype(np.int8)
    wt = rng.integers(-128, 128, (40, 24, 3, 3)).astype(np.int8)
    b = rng.integers(-500, 500, 40).astype(np.int32)
    scale = (rng.random(40) * 1e-3 + 1e-4).astype(np.float32) if per_channel else 2e-4
    y = ops.conv2d(x, wt, b, 1, 1, chip="teach", scale=scale)
    acc = golden.conv2d(x, wt, b, 1, 1)
    s = np.asarray(scale, np.float32).reshape(-1, 1, 1) if per_channel else np.float32(scale)
    expected = acc.astype(np.float32) * s                  # int32 exact, then one fp32 multiply
    assert y.dtype == np.float16
    np.testing.assert_array_equal(y, expected.astype(np.float16))   # fixpipe rounds the same way
    y32 = ops.conv2d(x, wt, b, 1, 1, chip="teach", scale=scale, out_dtype=np.float32)
    np.testing.assert_array_equal(y32, expected)


# -- layouts, img2col and tiling ----------------------------------------------------------------
def test_pack_weight_is_fractal_z():
    rng = np.random.default_rng(0)
    w = rng.standard_normal((40, 21, 3, 2)).astype(np.float16)
    t = K.make_problem((1, 21, 1, 5, 5), (40, 21, 1, 3, 2), np.float16)
    packed = K.pack_weight(w[:, :, None], t)
    np.testing.assert_array_equal(packed[0], F.nchw_to_fractal_z(w))
    x = rng.standard_normal((2, 21, 5, 5)).astype(np.float16)
    np.testing.assert_array_equal(K.pack_input(x[:, :, None], t)[:, 0, :, 0], F.nchw_to_nc1hwc0(x))


# -- C04: the small-channel first-layer format ---------------------------------------------------
@pytest.mark.parametrize("case", [(2, 3, 16, 12, 8, 7, 2, 3, True), (1, 1, 8, 8, 20, 3, 1, 1, False),
                                  (2, 4, 12, 4, 32, 5, 1, 2, True), (1, 2, 9, 8, 16, 3, 2, 0, False)])
def test_c04_conv_matches_torch(case):
    """Cin <= 4 in float16 runs in C04 (K = taps x 4 padded once) and matches torch and the
    plain NC1HWC0 path."""
    n, cin, h, w, cout, k, s, p, bias = case
    rng = np.random.default_rng(cin * 7 + k)
    x = rng.standard_normal((n, cin, h, w)).astype(np.float16)
    wt = rng.standard_normal((cout, cin, k, k)).astype(np.float16)
    b = rng.standard_normal(cout).astype(np.float32) if bias else None
    t = K.make_problem((n, cin, 1, h, w), (cout, cin, 1, k, k), np.float16, (1, s, s),
                       ((0, 0), (p, p), (p, p)), has_bias=bias)
    assert t.c04 and t.c0 == 4 and t.c1 == 1 and t.k == round_up(k * k * 4, 16)
    for chip in ("teach", "910"):
        y = ops.conv2d(x, wt, b, s, p, chip=chip)
        assert_close(y, _ref2d(x, wt, b, s, p, 1, 1), unit="cube")
    plain = default_tiling(replace(t, c04=False), "teach")
    y_plain, _ = K.launch_conv(x[:, :, None], wt[:, :, None], plain,
                               bias=None if b is None else b.astype(np.float32))
    y_c04, _ = K.launch_conv(x[:, :, None], wt[:, :, None], default_tiling(t, "teach"),
                             bias=None if b is None else b.astype(np.float32))
    assert_close(y_c04[:, :, 0], y_plain[:, :, 0], unit="cube")


def test_pack_weight_c04_layout():
    """FRACTAL_Z_C04: column n of K row tap x 4 + c holds w[n, c, tap]; rows past taps x 4 and
    channels past Cin are zero (checked element by element, independently of the packing)."""
    rng = np.random.default_rng(3)
    w = rng.standard_normal((20, 3, 1, 3, 3)).astype(np.float16)
    t = K.make_problem((1, 3, 1, 8, 8), (20, 3, 1, 3, 3), np.float16)
    z = K.pack_weight(w, t)
    assert z.shape == (1, 48 // 16, 2, 16, 16)
    for kk in range(48):
        for nn in range(32):
            got = z[0, kk // 16, nn // 16, nn % 16, kk % 16]
            tap, c = divmod(kk, 4)
            want = w[nn, c, 0, tap // 3, tap % 3] if nn < 20 and c < 3 and tap < 9 else 0
            assert got == want, (kk, nn)


def test_c04_stem_does_less_cube_work():
    """The ResNet stem shape (3 channels, 7 x 7 / 2) at a small map: C04 multiplies K = 208
    columns instead of 16 x 49 = 784, and the kernel is faster."""
    prob = K.make_problem((1, 3, 1, 32, 32), (64, 3, 1, 7, 7), np.float16, (1, 2, 2),
                          ((0, 0), (3, 3), (3, 3)))
    c04 = K.simulate(default_tiling(prob, "910"), "910")
    plain = K.simulate(default_tiling(replace(prob, c04=False), "910"), "910")
    assert prob.k == 208 and replace(prob, c04=False).k == 784
    assert c04.summary()["cube_flops"] * 3 < plain.summary()["cube_flops"]
    assert c04.cycles < plain.cycles


def test_c04_errors():
    with pytest.raises(ShapeError, match="C04 format needs float16, at most 4 input channels"):
        K.make_problem((1, 5, 1, 8, 8), (8, 5, 1, 3, 3), np.float16, c04=True)
    with pytest.raises(ShapeError, match="W a multiple of 4"):
        K.make_problem((1, 3, 1, 9, 9), (8, 3, 1, 3, 3), np.float16, c04=True)
    assert not K.make_problem((1, 3, 1, 8, 8), (8, 3, 1, 3, 3), np.int8).c04
    assert not K.make_problem((1, 4, 1, 8, 8), (8, 2, 1, 3, 3), np.float16, groups=2).c04


# -- map_resident: a core's input rows stay in L1 ----------------------------------------------------
@pytest.mark.parametrize("case", [(3, 40, 9, 36, 3, 1, 1, 32, 16, 6, 1, True, False),
                                  (2, 20, 10, 16, 3, 2, 1, 16, 16, 4, 2, False, False),
                                  (2, 3, 16, 16, 7, 2, 3, 32, 16, 2, 1, True, True),
                                  (1, 64, 14, 32, 3, 1, 1, 48, 32, 2, 4, True, False)])
def test_map_resident_matches_torch_and_reads_less(case):
    """Teams whose cores keep their run of input rows in L1 (race-checked functional run): the
    same answer as torch, never more GM reads than reloading each tile's slab, fewer when
    neighbouring tiles share halo rows."""
    n, cin, h, cout, k, s, p, tm, tn, bd, c1s, res, c04 = case
    rng = np.random.default_rng(cin + k)
    x = rng.standard_normal((n, cin, h, h)).astype(np.float16)
    wt = rng.standard_normal((cout, cin, k, k)).astype(np.float16)
    prob = K.make_problem((n, cin, 1, h, h), (cout, cin, 1, k, k), np.float16, (1, s, s),
                          ((0, 0), (p, p), (p, p)), c04=c04)
    t = tiled(prob, tile_m=tm, tile_n=tn, block_dim=bd, c1_step=c1s, tile_k0=16, w_resident=res,
              schedule="teams", map_resident=True)
    y, tr = K.launch_conv(x[:, :, None], wt[:, :, None], t, chip="teach", check_races=True)
    assert_close(y[:, :, 0], _ref2d(x, wt, None, s, p, 1, 1), unit="cube")
    _, tr_slab = K.launch_conv(x[:, :, None], wt[:, :, None], t.with_tiles(map_resident=False),
                               chip="teach")
    assert tr.summary()["gm_read_bytes"] <= tr_slab.summary()["gm_read_bytes"]
    if s == 1:                                  # stride 1: neighbouring tiles share rows
        assert tr.summary()["gm_read_bytes"] < tr_slab.summary()["gm_read_bytes"]


def test_conv2d_runs_the_tiling_it_is_given_map_resident_included():
    """ops.conv2d(..., tiling=t) runs t's tiles, every one of them: a map-resident teams tiling
    reads the halo rows once through the public op as it does through the kernel (a field list
    copied by hand once dropped map_resident here), and a ConvTiles is taken as well."""
    rng = np.random.default_rng(11)
    x = rng.standard_normal((2, 20, 10, 10)).astype(np.float16)
    wt = rng.standard_normal((16, 20, 3, 3)).astype(np.float16)
    prob = K.make_problem((2, 20, 1, 10, 10), (16, 20, 1, 3, 3), np.float16, pads=((0, 0), (1, 1), (1, 1)))
    t = tiled(prob, tile_m=16, tile_n=16, block_dim=4, c1_step=1, tile_k0=16, w_resident=True,
              schedule="teams", map_resident=True)
    can_implement(t, "teach")
    y, tr = ops.conv2d(x, wt, None, 1, 1, chip="teach", tiling=t, return_trace=True)
    assert_close(y, _ref2d(x, wt, None, 1, 1, 1, 1), unit="cube")
    _, direct = K.launch_conv(x[:, :, None], wt[:, :, None], t, chip="teach")
    _, slab = K.launch_conv(x[:, :, None], wt[:, :, None], t.with_tiles(map_resident=False), chip="teach")
    reads = tr.summary()["gm_read_bytes"]
    assert reads == direct.summary()["gm_read_bytes"] < slab.summary()["gm_read_bytes"]
    assert tr.cycles == direct.cycles
    _, by_tiles = ops.conv2d(x, wt, None, 1, 1, chip="teach", tiling=t.tiles, return_trace=True)
    assert by_tiles.summary()["gm_read_bytes"] == reads and by_tiles.cycles == tr.cycles
    with pytest.raises(ShapeError, match="tiling must be None, ConvTiles or a ConvTiling"):
        ops.conv2d(x, wt, None, 1, 1, chip="teach", tiling=(16, 16))


def test_map_resident_needs_teams_and_2d():
    prob = K.make_problem((1, 16, 1, 8, 8), (16, 16, 1, 3, 3), np.float16, pads=((0, 0), (1, 1), (1, 1)))
    with pytest.raises(ShapeError, match="map_resident is for schedule='teams'"):
        can_implement(tiled(prob, tile_m=16, tile_n=16, map_resident=True, block_dim=2), "teach")


def test_boxes_cover_only_what_the_tile_reads():
    t = K.make_problem((1, 16, 1, 56, 56), (16, 16, 1, 1, 1), np.float16)
    boxes, elems = tile_boxes(t.geom, 1, 128, 16, 1)    # a 1x1 conv reads exactly its 128 pixels
    assert [(b[3], b[4]) for b in boxes] == [(128, 128)] and elems == 128 * 16
    t3 = K.make_problem((2, 16, 1, 7, 7), (16, 16, 1, 3, 3), np.float16, pads=((0, 0), (1, 1), (1, 1)))
    boxes, _ = tile_boxes(t3.geom, 2, 64, 16, 0)          # 64 rows span both 7x7 images
    assert [b[0] for b in boxes] == [0, 1] and boxes[0][4] == 49


@pytest.mark.parametrize("tiles", [(16, 16, 1, 16, False), (32, 32, 2, 32, True), (48, 16, 1, 48, True),
                                   (16, 32, 3, 16, False)])
def test_explicit_tilings_agree(tiles):
    """Tiles spanning images, several L1 steps, resident or streamed weights: one answer."""
    tm, tn, c1_step, k0, resident = tiles
    rng = np.random.default_rng(1)
    x = rng.standard_normal((3, 40, 5, 5)).astype(np.float16)
    wt = rng.standard_normal((36, 40, 3, 3)).astype(np.float16)
    base = default_tiling(K.make_problem((3, 40, 1, 5, 5), (36, 40, 1, 3, 3), np.float16,
                                         pads=((0, 0), (1, 1), (1, 1))), "teach")
    t = base.with_tiles(tile_m=tm, tile_n=tn, c1_step=c1_step, tile_k0=k0, w_resident=resident,
                        schedule="cyclic", ramp=0, taper=0)
    t = t.with_tiles(block_dim=min(2, t.core_loops))
    y, trace = ops.conv2d(x, wt, None, 1, 1, chip="teach", tiling=t, return_trace=True)
    assert_close(y, _ref2d(x, wt, None, 1, 1, 1, 1), unit="cube")
    assert trace.block_dim == t.block_dim


@pytest.mark.parametrize("tiles", [(32, 48, 2, 1, 0, 0), (48, 32, 1, 3, 1, 1), (64, 16, 3, 2, 0, 2)])
def test_team_tilings_agree(tiles):
    """Teams of cores per tile column, runs of rows cut with a ramp and a taper, resident
    weights loaded one L1 step at a time: the same answer as torch."""
    tm, tn, c1_step, k_steps, ramp, taper = tiles
    rng = np.random.default_rng(3)
    x = rng.standard_normal((3, 40, 6, 5)).astype(np.float16)
    wt = rng.standard_normal((36, 40, 3, 3)).astype(np.float16)
    base = K.make_problem((3, 40, 1, 6, 5), (36, 40, 1, 3, 3), np.float16, pads=((0, 0), (1, 1), (1, 1)))
    t = tiled(base, tile_m=tm, tile_n=tn, c1_step=c1_step, tile_k0=16 * k_steps, w_resident=True,
              schedule="teams", ramp=ramp, taper=taper)
    t = t.with_tiles(block_dim=t.columns * (2 // t.columns if t.columns <= 2 else 1))
    y, trace = ops.conv2d(x, wt, None, 1, 1, chip="teach", tiling=t, return_trace=True)
    assert_close(y, _ref2d(x, wt, None, 1, 1, 1, 1), unit="cube")
    assert trace.block_dim == t.block_dim
    fix = [nm for nm in trace.name if nm.startswith("fixpipe")]
    assert len(fix) == sum(len(block_work(t, b)) for b in range(t.block_dim))   # the teams' tiles ran
    # every output row of every column is computed exactly once
    rows = {}
    for b in range(t.block_dim):
        for grp, p0, m, n_idx, _ in block_work(t, b):
            for r in range(p0, p0 + m):
                rows[(grp, n_idx, r)] = rows.get((grp, n_idx, r), 0) + 1
    assert len(rows) == t.columns * t.problem.m and set(rows.values()) == {1}


def test_team_runs_ramp_and_taper():
    t = tiled(K.make_problem((1, 16, 1, 32, 32), (16, 16, 1, 1, 1), np.float16), tile_m=256,
              tile_n=16, schedule="teams", block_dim=2, ramp=1, taper=2)
    sizes = [m // 16 for _, _, m, _, _ in block_work(t, 0)]
    assert sum(sizes) == 32 and max(sizes) <= 16
    assert sizes[:2] == [1, 2] and sizes[-2:] == [4, 2]          # 1, 2, 4 ... up; ... 4, 2 down
    even = [m // 16 for _, _, m, _, _ in block_work(t.with_tiles(ramp=0, taper=0), 0)]
    assert even == [16, 16]


def test_resident_weights_cross_gm_once_per_core():
    """Teams keep their column's weights in L1: each core copies them from GM once, however
    many tiles it computes; streamed weights cross once per tile."""
    x = np.ones((2, 32, 1, 8, 8), np.float16)
    w = np.ones((32, 32, 1, 1, 1), np.float16)
    base = K.make_problem(x.shape, w.shape, np.float16)
    t = tiled(base, tile_m=32, tile_n=32, c1_step=1, tile_k0=16, w_resident=True, schedule="teams",
              block_dim=2)
    assert len(block_work(t, 0)) == 2                  # two tiles a core
    _, tr = K.launch_conv(x, w, t, chip="teach")
    assert tr.bytes_by_route()["GM->L1"] == x.nbytes + 2 * w.nbytes
    _, tr = K.launch_conv(x, w, t.with_tiles(w_resident=False), chip="teach")
    assert tr.bytes_by_route()["GM->L1"] == x.nbytes + 4 * w.nbytes


def test_search_beats_or_matches_the_estimate():
    """The default tiling's search simulates the best-estimated candidates: what it returns is
    never slower (simulated) than the estimate's favourite."""
    t = K.make_problem((8, 64, 1, 14, 14), (128, 64, 1, 3, 3), np.float16, pads=((0, 0), (1, 1), (1, 1)))
    picked = default_tiling(t, "910", search=True)
    best_est = min(candidates(t, "910"), key=lambda c: estimate_cycles(c, "910"))
    assert search.rank(t, "910")[0][2] == best_est
    assert K.simulate(picked, "910").cycles <= K.simulate(best_est, "910").cycles
    assert default_tiling(t, "910", search=True) is picked          # kept in memory


def test_img2col_costs_mte1_not_gm():
    """The map crosses GM once; the 9x expansion is paid on MTE1 (L1 -> L0A)."""
    rng = np.random.default_rng(2)
    x = rng.standard_normal((1, 16, 16, 16)).astype(np.float16)
    wt = rng.standard_normal((16, 16, 3, 3)).astype(np.float16)
    t = default_tiling(K.make_problem((1, 16, 1, 16, 16), (16, 16, 1, 3, 3), np.float16,
                                      pads=((0, 0), (1, 1), (1, 1))), "910")
    t = t.with_tiles(tile_m=256, tile_n=16, c1_step=1, tile_k0=48, block_dim=1)    # one tile
    _, tr = ops.conv2d(x, wt, None, 1, 1, chip="910", tiling=t, return_trace=True)
    by = tr.bytes_by_route()
    assert by["GM->L1"] == x.nbytes + wt.nbytes              # the map and the weights, once
    assert by["L1->L0A"] == 256 * 144 * 2                    # 9 taps x 16 channels a pixel, MTE1


def test_timing_mode_matches_functional_cycles():
    t = default_tiling(K.make_problem((2, 32, 1, 9, 9), (48, 32, 1, 3, 3), np.float16,
                                      pads=((0, 0), (1, 1), (1, 1))), "teach")
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 32, 1, 9, 9)).astype(np.float16)
    w = rng.standard_normal((48, 32, 1, 3, 3)).astype(np.float16)
    _, functional = K.launch_conv(x, w, t, chip="teach")
    assert K.simulate(t, "teach").cycles == functional.cycles


def test_can_implement_names_the_buffer():
    t = K.make_problem((1, 64, 1, 56, 56), (64, 64, 1, 3, 3), np.float16, pads=((0, 0), (1, 1), (1, 1)))
    big = tiled(t, tile_m=256, tile_n=64, c1_step=4, tile_k0=64)
    with pytest.raises(BufferOverflowError, match="L0A needs .* but holds"):
        can_implement(big, "teach")
    with pytest.raises(ShapeError, match="c1_step=9 must be in 1..C1=4"):
        can_implement(big.with_tiles(c1_step=9), "910")
    teams = tiled(t, tile_m=64, tile_n=16, tile_k0=16, schedule="teams", block_dim=2)   # 4 columns
    with pytest.raises(ShapeError, match="requires block_dim .2. to be a multiple of the 4 tile columns"):
        can_implement(teams, "910")


def test_registered_and_cached():
    assert {"Conv2D", "Conv3D", "Conv2DTranspose", "Conv2DBNRelu"} <= set(op_types())
    x = np.ones((1, 4, 5, 5), np.float16)
    w = np.ones((4, 4, 3, 3), np.float16)
    ops.conv2d(x, w, chip="teach")
    hits = dispatcher.hits
    ops.conv2d(x, w, chip="teach")
    assert dispatcher.hits == hits + 1


# -- errors -------------------------------------------------------------------------------------
@pytest.mark.parametrize("call, match", [
    (lambda x, w: ops.conv2d(x.astype(np.float64), w.astype(np.float64)), "dtype float64 is not supported"),
    (lambda x, w: ops.conv2d(x, w.astype(np.float32)), "they must have one dtype"),
    (lambda x, w: ops.conv2d(x[0], w), "input must be 4-D"),
    (lambda x, w: ops.conv2d(x, w[:, :3]), "expects 3 input channels"),
    (lambda x, w: ops.conv2d(x, w, groups=3), "groups=3 must divide"),
    (lambda x, w: ops.conv2d(x, w, stride=2, padding="same"), "padding='same' needs stride 1"),
    (lambda x, w: ops.conv2d(x, w, padding="full"), "padding must be 'same', 'valid'"),
    (lambda x, w: ops.conv2d(x, w, stride=0), "stride must be positive, got 0"),
    (lambda x, w: ops.conv2d(x, w, np.ones(3)), r"bias must have shape \(8,\)"),
    (lambda x, w: ops.conv2d(x, w, scale=0.5), "scale= .* is for int8"),
    (lambda x, w: ops.conv2d(x[:, :, :2, :2], w), "the dilated kernel must fit"),
    (lambda x, w: ops.conv2d(x.astype(np.int8), w.astype(np.int8), np.ones(8, np.float32)), "integer bias"),
    (lambda x, w: ops.conv_transpose2d(x, w), "has 8 input channels"),
    (lambda x, w: ops.conv_transpose2d(x, w[:4].transpose(1, 0, 2, 3).copy(), output_padding=1),
     "output_padding"),
])
def test_errors(call, match):
    x = np.ones((1, 4, 6, 6), np.float16)
    w = np.ones((8, 4, 3, 3), np.float16)
    with pytest.raises(ShapeError, match=match):
        call(x, w)


@pytest.mark.parametrize("call, match", [
    (lambda: ops.conv_transpose2d(np.ones((1, 4, 1, 1), np.float32), np.ones((4, 2, 1, 1), np.float32), padding=2),
     r"^conv_transpose2d: the output would be \(-3, -3\) for input \(1, 4, 1, 1\), weight \(4, 2, 1, 1\), "
     r"stride \(1, 1\), padding \(2, 2\), output_padding \(0, 0\), dilation \(1, 1\): .*lower the padding"),
    (lambda: ops.conv2d(np.ones((1, 2, 5, 5), np.float32), np.ones((3, 2, 7, 7), np.float32)),
     r"^conv2d: the output would be \(-1, -1\) for input \(1, 2, 5, 5\), weight \(3, 2, 7, 7\), stride "
     r"\(1, 1\), padding 0, dilation \(1, 1\): the dilated kernel must fit the padded input"),
    (lambda: ops.conv2d(np.ones((1, 2, 5, 5), np.float32), np.ones((3, 2, 3, 3), np.float32), dilation=3),
     r"^conv2d: .*dilation \(3, 3\): the dilated kernel must fit the padded input \(dilation x \(k - 1\) \+ 1 = "
     r"\(7, 7\), padded input \(5, 5\)\)"),
    (lambda: ops.conv3d(np.ones((1, 2, 3, 3, 3), np.float32), np.ones((3, 2, 4, 4, 4), np.float32), padding=(0, 1, 1)),
     r"^conv3d: the output would be \(0, 2, 2\) for input \(1, 2, 3, 3, 3\), weight \(3, 2, 4, 4, 4\), .*padding "
     r"\(0, 1, 1\)"),
    (lambda: ops.conv2d_bn_relu(np.ones((1, 2, 2, 2), np.float32), np.ones((3, 2, 3, 3), np.float32), None,
                                np.zeros(3), np.ones(3)),
     r"^conv2d_bn_relu: the output would be \(0, 0\) for input \(1, 2, 2, 2\)"),
])
def test_kernel_too_large_names_the_users_op_and_shapes(call, match):
    with pytest.raises(ShapeError, match=match) as info:
        call()
    assert "conv:" not in str(info.value)


@pytest.mark.parametrize("name, value", [("stride", True), ("stride", "2"), ("stride", 1.5), ("stride", (1, 2.0)),
                                         ("dilation", (1, 1, 1)), ("padding", [1, "1"]), ("groups", True)])
def test_int_arguments_are_ints(name, value):
    x, w = np.ones((1, 2, 5, 5), np.float32), np.ones((2, 2, 3, 3), np.float32)
    with pytest.raises(ShapeError, match=rf"^conv2d: {name} must be (an int or a tuple of 2 ints|a positive int)"):
        ops.conv2d(x, w, **{name: value})
    with pytest.raises(ShapeError, match=rf"^conv_transpose2d: {name} must be"):
        ops.conv_transpose2d(x, w, **{name: value})
    y = ops.conv2d(x, w, stride=(2,), padding=[1], dilation=np.int64(1), chip="teach")    # torch takes these
    assert y.shape == tuple(TF.conv2d(_torch(x), _torch(w), stride=(2,), padding=[1]).shape) == (1, 2, 3, 3)


@pytest.mark.parametrize("fn, x_shape, w_shape, kw", [
    (ops.conv2d, (0, 4, 6, 6), (8, 2, 3, 3), dict(stride=2, padding=1, groups=2)),
    (ops.conv3d, (0, 2, 3, 4, 4), (3, 2, 2, 2, 2), {}),
    (ops.conv_transpose2d, (0, 4, 3, 3), (4, 2, 3, 3), dict(stride=2, output_padding=1)),
])
@pytest.mark.parametrize("dtype", [np.float16, np.int8])
def test_empty_batch_gives_an_empty_output_without_a_launch(fn, x_shape, w_shape, kw, dtype):
    x, w = np.ones(x_shape, dtype), np.ones(w_shape, dtype)
    ref = getattr(TF, fn.__name__)(_torch(x), _torch(w), **kw)
    y, trace = fn(x, w, chip="teach", return_trace=True, **kw)
    assert y.shape == tuple(ref.shape) and y.dtype == (np.int32 if dtype == np.int8 else dtype)
    assert trace is None
    with pytest.raises(ShapeError, match=r"the input \(1, 0, 3, 3\) has an empty channel or spatial axis"):
        ops.conv2d(np.ones((1, 0, 3, 3), np.float32), np.ones((2, 0, 1, 1), np.float32))


def test_conv2d_relu_in_the_epilogue():
    rng = np.random.default_rng(4)
    x = rng.standard_normal((1, 3, 6, 6)).astype(np.float16)
    w = rng.standard_normal((5, 3, 3, 3)).astype(np.float16)
    b = rng.standard_normal(5).astype(np.float32)
    ref = _ref2d(x, w, b, 1, 1, 1, 1)
    assert (ref < 0).any()
    y, trace = ops.conv2d(x, w, b, padding=1, relu=True, chip="teach", return_trace=True)
    assert_close(y, np.maximum(ref, 0), unit="cube")
    assert y.min() == 0


@pytest.mark.parametrize("case", [
    # n, cin, cout, (d, h, w), (sd, sh, sw), dtype, tile_m, c1_step, schedule
    (2, 20, 24, (1, 9, 7), (1, 2, 2), np.float16, 32, 1, "cyclic"),
    (1, 16, 16, (1, 8, 8), (1, 3, 2), np.float32, 16, 2, "teams"),
    (2, 33, 8, (3, 5, 6), (2, 2, 3), np.float16, 48, 2, "cyclic"),
    (1, 40, 16, (1, 11, 13), (1, 2, 2), np.int8, 64, 1, "teams")])
def test_strided_1x1_conv_reads_only_the_pixels_it_uses(case):
    """A 1 x 1 conv with a stride and no padding copies every s-th pixel of every s-th row in
    strided bursts and runs as a stride-1 conv on them (race-checked): the answer is torch's
    (the integer reference for int8), and GM reads are exactly those pixels' bytes."""
    n, cin, cout, (d, h, w), stride, dt, tm, c1s, schedule = case
    rng = np.random.default_rng(cin)
    if dt == np.int8:
        x = rng.integers(-128, 128, (n, cin, d, h, w)).astype(dt)
        wt = rng.integers(-128, 128, (cout, cin, 1, 1, 1)).astype(dt)
    else:
        x = rng.standard_normal((n, cin, d, h, w)).astype(dt)
        wt = rng.standard_normal((cout, cin, 1, 1, 1)).astype(dt)
    prob = K.make_problem(x.shape, wt.shape, dt, stride)
    assert prob.gm_geom is not None and "strided_read" in tiled(prob).recipe()
    g = prob.geom
    assert (g.d, g.h, g.w, g.stride) == (g.od, g.oh, g.ow, (1, 1, 1))
    assert (prob.x_geom.d, prob.x_geom.h, prob.x_geom.w) == (d, h, w)
    bd = 3 if schedule == "teams" else 4
    t = tiled(prob, tile_m=tm, tile_n=16, c1_step=c1s, tile_k0=prob.k0, block_dim=bd, schedule=schedule)
    can_implement(t, "teach")
    y, tr = K.launch_conv(x, wt, t, chip="teach", check_races=True)
    if dt == np.int8:
        ref = TF.conv3d(torch.tensor(x.astype(np.float64)), torch.tensor(wt.astype(np.float64)),
                        None, stride).numpy()
        np.testing.assert_array_equal(y, ref.astype(np.int64))
    else:
        ref = TF.conv3d(_torch(x), _torch(wt), None, stride).numpy()
        assert_close(y, ref, unit="cube")
    used = n * prob.c1 * prob.c0 * g.d * g.h * g.w * x.itemsize
    weights = tr.summary()["gm_read_bytes"] - used
    assert 0 <= weights <= prob.k * prob.n1 * 16 * x.itemsize * t.block_dim   # the rest is weights


def test_strided_read_only_for_unpadded_1x1():
    for k, pad, stride in ((3, 0, 2), (1, 1, 2), (1, 0, 1)):
        prob = K.make_problem((1, 16, 1, 8, 8), (16, 16, 1, k, k), np.float16, (1, stride, stride),
                              ((0, 0), (pad, pad), (pad, pad)))
        assert prob.gm_geom is None and prob.x_geom is prob.geom
