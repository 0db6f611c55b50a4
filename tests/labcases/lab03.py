"""Lab 03's newer exercise cases (see labcases/__init__.py): where more cores stop helping, and
the challenge's 2-D tiling. Its first exercises' cases are still in tests/labs/test_exercises.py.

The references are written from the lab's spec: the knee from the 910's chip figures (a core's
MTE2 rate carries x and y, 4 of the 6 bytes an element moves through HBM), the 2-D tiling from
the kernel's rules (row groups x column groups <= cores, columns in whole 32-byte blocks, UB
holding buffer_num slots of a gamma chunk and two tiles).
"""
from __future__ import annotations

import numpy as np

from npulab.chips import get_chip
from npulab.kernels.examples.row_scale_2d import RowScale2DTiling
from npulab.labs import lab03

C910 = get_chip("910")


def _knee() -> int:
    one_core = C910.pipes.mte2_bytes_per_cycle * 6 / 4          # HBM bytes a cycle one core asks for
    return min(k for k in lab03.SWEEP_CORES if k * one_core >= C910.gm_sustained_bytes_per_cycle)


KNEE = _knee()
SMALLER = max(k for k in lab03.SWEEP_CORES if k < KNEE)
LARGER = min(k for k in lab03.SWEEP_CORES if k > KNEE)


def _tiling_2d(kind="ok"):
    """The challenge's tiling from its rules, or a typical slip: "whole rows" is the default (the
    lab's whole_rows_2d), "all columns" cuts the columns over every core whatever the row
    groups, "unaligned" leaves the column groups off the 32-byte grid, "tiny" walks the columns
    in chunks of 512 elements."""
    def fn(rows, cols, dtype, chip):
        if kind == "whole rows":
            return lab03.whole_rows_2d(rows, cols, dtype, chip)
        item = np.dtype(dtype).itemsize
        pb, cores = 32 // item, chip.cores_for("aiv")
        rpc = -(-rows // cores)
        col_groups = cores if kind == "all columns" else cores // -(-rows // rpc)
        cpc = -(-cols // col_groups)
        cpc = cpc + 1 if kind == "unaligned" else -(-cpc // pb) * pb
        rpt = min(rpc, 2)
        fit = chip.buffers.ub // (2 * (1 + 2 * rpt) * item) // pb * pb
        cpt = min(512, cpc) if kind == "tiny" else min(fit, cpc)
        return RowScale2DTiling(rows, cols, rpc, cpc, rpt, cpt)
    return fn


def _tiling_2d_tuple(rows, cols, dtype, chip):
    return (rows, cols, 1, cols, 1, 16)


def _tiling_2d_blank(rows, cols, dtype, chip):
    ...


CASES: dict = {
    "03.knee_cores": (KNEE, [(lab03.SWEEP_CORES[-1], "sustains for all cores together"),
                             (LARGER, "already ask HBM"), (SMALLER, "each core has its own pipes"),
                             (3, "one of 1, 2, 4"), (str(KNEE), "whole number")], ...),
    "03.tiling_2d": (_tiling_2d(), [(_tiling_2d("whole rows"), "cut the columns over the cores"),
                                    (_tiling_2d("all columns"), "row groups x column groups"),
                                    (_tiling_2d("unaligned"), "32-byte boundary"),
                                    (_tiling_2d("tiny"), "fixed costs"),
                                    (_tiling_2d_tuple, "not a RowScale2DTiling")], _tiling_2d_blank),
}
