"""RMSNorm on the vector unit (ops-nn ``norm/rms_norm``, simplified): y = x / sqrt(mean(x^2) +
eps) * gamma over each row, a row kernel (:mod:`npulab.kernels.rows`)."""
from __future__ import annotations

import numpy as np

from ... import lang
from ...arch import BLOCK_BYTES, DEFAULT_CHIP, F32, round_up
from ..rows import RowKernel, RowTiling, launch_rows, row_tiling
from ..vector_base import BUFFER_NUM


class KernelRmsNorm(RowKernel):
    """y = x / sqrt(mean(x^2) + eps) * gamma over each row."""
    WORK_ROWS = 1
    STATS = 1

    def __init__(self, x, gamma, y, t: RowTiling, eps: float):
        super().__init__(x, y, t, "x")
        self.eps = eps
        (self.gamma,) = self.load_params([gamma], "gamma")

    def compute_rows(self, x32, out32, n):
        cols = self.cols
        (rstd,) = self.stats
        sq = self.work[0]
        lang.mul(sq, x32, x32, n * cols)
        lang.reduce_sum_rows(rstd, sq, n, cols)
        lang.muls(rstd, rstd, 1.0 / cols, n)
        lang.adds(rstd, rstd, self.eps, n)
        lang.sqrt(rstd, rstd, n)
        lang.reciprocal(rstd, rstd, n)
        if self.gamma is None:
            lang.mul_per_row(out32, x32, rstd, n, cols)
        else:
            lang.mul_per_row(x32, x32, rstd, n, cols)
            lang.mul_per_col(out32, x32, self.gamma, n, cols)


def rms_norm_kernel(x, gamma, y, t: RowTiling, eps: float) -> None:
    KernelRmsNorm(x, gamma, y, t, eps).process()


def rms_norm_tiling(rows: int, cols: int, dtype, chip=DEFAULT_CHIP, buffer_num: int = BUFFER_NUM,
                    tile_rows: int | None = None) -> RowTiling:
    wide = np.dtype(dtype) != F32
    fixed = round_up(cols * np.dtype(dtype).itemsize, BLOCK_BYTES) + (cols * 4 if wide else 0)
    return row_tiling(rows, cols, dtype, chip, what="RMSNorm", work_rows=1 + wide,
                      fixed_bytes=fixed, stats=1, buffer_num=buffer_num, tile_rows=tile_rows)


def launch_rms_norm(x, gamma, t: RowTiling, eps: float, chip=DEFAULT_CHIP, mode="functional"):
    return launch_rows(rms_norm_kernel, x, [gamma], t, chip, mode, float(eps))


__all__ = ["KernelRmsNorm", "rms_norm_kernel", "rms_norm_tiling", "launch_rms_norm"]
