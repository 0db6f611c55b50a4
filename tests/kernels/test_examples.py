"""The teaching kernels of npulab.kernels.examples compute what they claim, against the goldens
or an independent numpy construction, and use the buffers their docstrings describe: the row
scale over whole rows, SiLU with one, two or three queue slots, and the img2col matrix read back
from L0A."""
from __future__ import annotations

import numpy as np
import pytest

from fixtures import assert_close, rand
from npulab.chips import get_chip
from npulab.errors import ArgumentError, ShapeError
from npulab.kernels.examples import img2col, row_scale, silu
from npulab.ops import golden
from npulab.plot import copies_in, queue_slot_bytes, queue_slots

TEACH = get_chip("teach")


# -- row scale ----------------------------------------------------------------------------------
def _row_tiling(rows, cols, dtype, chip, rows_per_tile=None):
    rpc = -(-rows // chip.ai_cores)
    rb = -(-cols * np.dtype(dtype).itemsize // 32) * 32
    fit = (chip.buffers.ub - rb) // (4 * rb)
    return row_scale.RowScaleTiling(rows, cols, rpc, -(-rows // rpc), rows_per_tile or min(rpc, fit), 2)


@pytest.mark.parametrize("rows, cols, dtype, rows_per_tile", [(37, 256, np.float16, None),
                                                             (10, 64, np.float32, 1),
                                                             (9, 512, np.float16, 2)])
def test_row_scale_multiplies_every_row_by_gamma(rows, cols, dtype, rows_per_tile):
    x, g = rand((rows, cols), dtype, f"rows x {rows}"), rand(cols, dtype, f"gamma {cols}")
    t = _row_tiling(rows, cols, dtype, TEACH, rows_per_tile)
    z, trace = row_scale.launch_row_scale(x, g, t, chip="teach")
    assert z.dtype == x.dtype and z.shape == x.shape
    assert np.array_equal(z, x * g)                     # one rounding of the same product: exact
    top = max(a.offset + a.size for a in trace.allocations if a.core == 0 and a.buffer == "UB")
    slots = queue_slots(trace)
    assert slots == {"gamma": 1, "in_x": min(2, -(-t.rows_per_core // t.rows_per_tile)),
                     "out_z": min(2, -(-t.rows_per_core // t.rows_per_tile))}
    assert top == row_scale.row_demand(t.rows_per_tile, cols, dtype)   # gamma + 2 x 2 slots of the tile


def test_row_scale_sizes_and_refusal():
    assert row_scale.row_bytes(100, np.float16) == 224      # 200 B up to whole 32-byte blocks
    assert row_scale.row_demand(3, 256, np.float16) == 512 + 2 * 2 * 3 * 512
    assert row_scale.RowScaleTiling(4, 16, 2, 2, 1).to_dict()["buffer_num"] == 2
    x = np.zeros((4, 10), np.float16)                     # 20 B a row: not whole 32-byte blocks
    with pytest.raises(ShapeError, match="not whole 32-byte blocks"):
        row_scale.launch_row_scale(x, np.zeros(10, np.float16), row_scale.RowScaleTiling(4, 10, 2, 2, 1), "teach")


# -- SiLU -------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def silu_x():
    return rand(65536, np.float16, "silu x")


@pytest.mark.parametrize("cls, slots, tile", [(silu.SiluSingle, 1, TEACH.buffers.ub // 2 // 2),
                                              (silu.SiluDouble, 2, TEACH.buffers.ub // 4 // 2),
                                              (silu.silu_kernel(3), 3, silu.ub_tile(TEACH.buffers.ub, 3)),
                                              (silu.silu_kernel(2, 512), 2, 512)])
def test_silu_kernels_compute_silu_with_their_slots(silu_x, cls, slots, tile):
    z, trace = silu.launch_silu(cls, silu_x, "teach")
    assert_close(z, golden.silu(silu_x))                  # fp16 steps: within the fp16 row
    assert queue_slots(trace) == {"in_x": slots, "out_z": slots}
    assert queue_slot_bytes(trace) == {"in_x": tile * 2, "out_z": tile * 2}
    block = silu.silu_tiling(silu_x.size, "teach").block_factor
    assert copies_in(trace) == -(-block // tile)


def test_silu_variants_agree_and_double_buffering_pays(silu_x):
    z1, single = silu.launch_silu(silu.SiluSingle, silu_x, "teach")
    z2, double = silu.launch_silu(silu.SiluDouble, silu_x, "teach")
    assert np.array_equal(z1, z2)                        # the same fp16 steps, tile by tile
    assert double.cycles < single.cycles
    assert silu.SiluDouble.__name__ == "SiluDouble" and issubclass(silu.SiluDouble, silu.SiluStages)
    assert silu.ub_tile(TEACH.buffers.ub, 2) * 2 == silu.ub_tile(TEACH.buffers.ub, 1)
    t = silu.silu_tiling(1000, "teach")
    assert t.block_factor % 16 == 0 and t.block_dim * t.block_factor >= 1000 and t.ub_bytes == TEACH.buffers.ub


# -- img2col read back from L0A -----------------------------------------------------------------------
def _img2col_indices(x_shape, k, stride, pad):
    """The img2col matrix of NCHW flat indices (-1: padding), columns (c1, kh, kw, c0), C0 = 16,
    built with numpy alone."""
    n, c, h, w = x_shape
    oh, ow = (h + 2 * pad - k) // stride + 1, (w + 2 * pad - k) // stride + 1
    c1 = -(-c // 16)
    b, i, j = np.meshgrid(np.arange(n), np.arange(oh), np.arange(ow), indexing="ij")
    b, i, j = (v.reshape(-1, 1) for v in (b, i, j))
    q1, kh, kw, q0 = np.meshgrid(np.arange(c1), np.arange(k), np.arange(k), np.arange(16), indexing="ij")
    q1, kh, kw, q0 = (v.reshape(1, -1) for v in (q1, kh, kw, q0))
    ch, hh, ww = q1 * 16 + q0, i * stride - pad + kh, j * stride - pad + kw
    inside = (ch < c) & (0 <= hh) & (hh < h) & (0 <= ww) & (ww < w)
    flat = ((b * c + ch) * h + hh) * w + ww
    return np.where(inside, flat, -1)


@pytest.mark.parametrize("case", [((2, 3, 5, 5), 3, 1, 1), ((1, 20, 7, 6), 3, 2, 1), ((1, 4, 6, 6), 2, 2, 0)])
def test_img2col_on_npu_is_the_img2col_of_the_map(case):
    got = img2col.img2col_on_npu(*case)
    want = _img2col_indices(*case)
    assert got.dtype == np.int64 and got.shape == want.shape
    assert np.array_equal(got, want)


def test_img2col_on_npu_refuses_maps_fp16_cannot_index():
    with pytest.raises(ArgumentError, match="at most 2048"):
        img2col.img2col_on_npu((1, 16, 12, 12), 3, 1, 1)
