"""The 2-D row scale (npulab.kernels.examples.row_scale_2d): every element of x scaled by its
column's gamma, whatever the block grid and tiles (tails in rows, in columns and in chunks), the
UB it reserves as demand_2d says, and the tilings it cannot run refused with the rule broken."""
from __future__ import annotations

import numpy as np
import pytest

from fixtures import rand
from npulab.chips import get_chip
from npulab.errors import AlignmentError, BufferOverflowError, ShapeError
from npulab.kernels.examples.row_scale_2d import RowScale2DTiling, check_2d, demand_2d, launch_row_scale_2d

TEACH, C910 = get_chip("teach"), get_chip("910")


@pytest.mark.parametrize("rows, cols, dtype, rpc, cpc, rpt, cpt, chip", [
    (3, 1024, np.float16, 2, 1024, 2, 816, "teach"),       # a short last row group, a short last chunk
    (5, 512, np.float32, 5, 264, 3, 96, "teach"),          # two column groups, the last narrower
    (2, 4096, np.float16, 1, 256, 1, 256, "910"),          # 32 blocks of one row each
    (7, 96, np.float16, 4, 48, 3, 16, "910"),              # tails everywhere
])
def test_every_element_is_scaled_by_its_columns_gamma(rows, cols, dtype, rpc, cpc, rpt, cpt, chip):
    x, g = rand((rows, cols), dtype, f"x {rows}x{cols}"), rand(cols, dtype, f"gamma {cols}")
    t = RowScale2DTiling(rows, cols, rpc, cpc, rpt, cpt)
    z, trace = launch_row_scale_2d(x, g, t, chip=chip)
    assert z.dtype == x.dtype and z.shape == x.shape
    assert np.array_equal(z, x * g)                         # one rounding of the same product: exact
    assert t.block_dim == -(-rows // rpc) * -(-cols // cpc)
    top = max(a.offset + a.size for a in trace.allocations if a.core == 0 and a.buffer == "UB")
    assert top <= get_chip(chip).buffers.ub
    item = np.dtype(dtype).itemsize
    assert demand_2d(t, dtype) == 2 * (cpt * item + 2 * rpt * cpt * item)


def test_more_cores_busy_is_faster_on_few_long_rows():
    x, g = np.zeros((2, 1 << 16), np.float16), np.zeros(1 << 16, np.float16)
    two = RowScale2DTiling(2, 1 << 16, 1, 1 << 16, 1, 8192)
    all_cores = RowScale2DTiling(2, 1 << 16, 2, 1 << 11, 2, 1 << 11)
    cycles = [launch_row_scale_2d(x, g, t, chip="910", mode="timing")[1].cycles for t in (two, all_cores)]
    assert cycles[1] < cycles[0]


@pytest.mark.parametrize("t, error, words", [
    (RowScale2DTiling(3, 1024, 2, 1000, 1, 16), AlignmentError, "cols_per_core=1000"),
    (RowScale2DTiling(3, 1024, 2, 1024, 1, 24), AlignmentError, "cols_per_tile=24"),
    (RowScale2DTiling(3, 1024, 1, 1024, 1, 16), ShapeError, "more than the 2 vector cores"),
    (RowScale2DTiling(3, 1024, 2, 1024, 2, 1024), BufferOverflowError, "UB holds 16,384 B"),
    (RowScale2DTiling(3, 1024, 0, 1024, 1, 16), ShapeError, "at least 1"),
])
def test_tilings_that_cannot_run_are_refused_with_the_rule(t, error, words):
    with pytest.raises(error, match=words):
        check_2d(t, np.float16, TEACH)
    with pytest.raises(error):
        launch_row_scale_2d(np.zeros((3, 1024), np.float16), np.zeros(1024, np.float16), t, chip="teach")


def test_shapes_must_agree():
    t = RowScale2DTiling(3, 1024, 2, 1024, 1, 16)
    with pytest.raises(ShapeError, match="must agree"):
        launch_row_scale_2d(np.zeros((3, 512), np.float16), np.zeros(512, np.float16), t, chip="teach")
