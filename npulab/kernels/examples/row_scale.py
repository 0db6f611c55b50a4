"""Row scale, ``z[r, :] = x[r, :] * gamma``: the row-wise kernel of lab 03, whose tiling the
learner writes (exercise 2: whole rows per core and per tile).

It is the last step of LayerNorm, kept so small that the tiling is the whole lesson: a tile
must hold whole rows, and UB holds ``gamma`` (one row, in UB for the whole run) besides the
``in_x`` and ``out_z`` queues. It is simpler than the package's row kernels
(:mod:`npulab.kernels.rows`: LayerNorm, RMSNorm, Softmax): rows are never split along their
columns (a row that does not fit UB cannot run), each row is copied and multiplied on its own
(no 2-D vector instructions over a tile of rows), the dtype is never widened, and the tiles are
all the same size (no ramp at the ends of a block).

* :class:`RowScaleTiling`: the TilingData (its host tiling function is the exercise);
* :func:`row_bytes`, :func:`row_demand`: a row's bytes in UB, the UB the kernel reserves;
* :class:`KernelRowScale`: one block; :func:`launch_row_scale`: every block, on numpy arrays.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from ... import lang
from ...arch import BLOCK_BYTES, DEFAULT_CHIP, ceil_div, round_up
from ...errors import ShapeError
from ...lang import VECIN, VECOUT, Queue, TPipe, data_copy, get_block_idx, launch


@dataclass(frozen=True)
class RowScaleTiling:
    """TilingData of the row-wise operator: whole rows per core, whole rows per tile."""
    rows: int
    cols: int
    rows_per_core: int     # rows of one block (the last block may get fewer)
    block_dim: int         # blocks launched
    rows_per_tile: int     # rows in one UB tile (one slot of each queue)
    buffer_num: int = 2    # slots of the in and out queues

    def to_dict(self) -> dict:
        return asdict(self)


def row_bytes(cols: int, dtype) -> int:
    """Bytes of one row in UB: whole 32-byte blocks."""
    b = cols * np.dtype(dtype).itemsize
    return round_up(b, BLOCK_BYTES)


def row_demand(rows_per_tile: int, cols: int, dtype, buffer_num: int = 2) -> int:
    """UB bytes KernelRowScale reserves: gamma + 2 queues x buffer_num x rows_per_tile rows."""
    rb = row_bytes(cols, dtype)
    return rb + 2 * buffer_num * rows_per_tile * rb


class KernelRowScale:
    """One block of z[r, :] = x[r, :] * gamma (gamma: one row, kept in UB for the whole run).

    UB holds: gamma (one row, a 1-slot queue) + in_x and out_z, ``buffer_num`` slots each of
    ``rows_per_tile`` rows."""

    def __init__(self, x, gamma, z, t: RowScaleTiling):
        r0 = get_block_idx() * t.rows_per_core
        self.rows = min(t.rows_per_core, t.rows - r0)          # the last block may be short
        self.cols, self.tile = t.cols, t.rows_per_tile
        c = t.cols
        self.x_gm, self.z_gm, self.gamma_gm = x[r0 * c:(r0 + self.rows) * c], z[r0 * c:(r0 + self.rows) * c], gamma
        self.dtype = x.dtype
        self.pipe = TPipe()
        self.in_g = Queue(VECIN, "gamma")
        self.in_x, self.out_z = Queue(VECIN, "in_x"), Queue(VECOUT, "out_z")
        rb = row_bytes(c, self.dtype)
        self.pipe.init_buffer(self.in_g, 1, rb)
        for q in (self.in_x, self.out_z):
            self.pipe.init_buffer(q, t.buffer_num, self.tile * rb)
        self.stride = rb // self.dtype.itemsize                  # elements between rows in UB

    def process(self) -> None:
        g = self.in_g.alloc_tensor(self.dtype)
        data_copy(g, self.gamma_gm, self.cols)
        self.in_g.enque(g)
        g = self.in_g.deque()
        for i in range(ceil_div(self.rows, self.tile)):
            n = min(self.tile, self.rows - i * self.tile)
            x = self.in_x.alloc_tensor(self.dtype)
            for r in range(n):                                  # row by row: rows sit 32-byte aligned
                data_copy(x[r * self.stride:], self.x_gm[(i * self.tile + r) * self.cols:], self.cols)
            self.in_x.enque(x)
            x, z = self.in_x.deque(), self.out_z.alloc_tensor(self.dtype)
            for r in range(n):
                lang.mul(z[r * self.stride:], x[r * self.stride:], g, self.cols)
            self.out_z.enque(z)
            self.in_x.free_tensor(x)
            z = self.out_z.deque()
            for r in range(n):
                data_copy(self.z_gm[(i * self.tile + r) * self.cols:], z[r * self.stride:], self.cols)
            self.out_z.free_tensor(z)
        self.in_g.free_tensor(g)


def launch_row_scale(x: np.ndarray, gamma: np.ndarray, t: RowScaleTiling, chip=DEFAULT_CHIP):
    """Launch KernelRowScale with tiling ``t`` over x (rows, cols) and gamma (cols,); returns
    (z of shape (rows, cols), trace). A row must be whole 32-byte blocks (the kernel copies
    row by row with ``data_copy``)."""
    if x.shape[1] * x.dtype.itemsize % BLOCK_BYTES:
        raise ShapeError(f"launch_row_scale: a row of {x.shape[1]} {x.dtype} is not whole 32-byte blocks")

    def kernel(xg, gg, zg, tt):
        KernelRowScale(xg, gg, zg, tt).process()

    (_, _, z, _), trace = launch(kernel, t.block_dim, x.reshape(-1), gamma, np.zeros(x.size, x.dtype), t,
                                 chip=chip)
    return z.reshape(x.shape), trace


__all__ = ["RowScaleTiling", "row_bytes", "row_demand", "KernelRowScale", "launch_row_scale"]
