"""Row scale with a 2-D tiling, ``z[r, :] = x[r, :] * gamma``: the kernel of lab 03's challenge.

:mod:`.row_scale` gives every core whole rows, which leaves cores idle when there are fewer
rows than cores. Row scale does not need whole rows: element ``[r, c]`` only reads ``gamma[c]``,
so the columns can be cut too. Here each block is a rectangle of ``rows_per_core`` rows by
``cols_per_core`` columns (the block grid is row groups x column groups, ``block_dim`` their
product), and a row need not fit UB: a block walks its columns in chunks of ``cols_per_tile``,
copies each chunk of ``gamma`` once, and runs its rows through it in tiles of
``rows_per_tile`` rows. A tile moves by one strided copy each way (Ascend C ``DataCopy`` with
``DataCopyParams``: one burst a row, a row's stride in GM) and is scaled by one
``mul_per_col``.
A normalisation (LayerNorm, Softmax) could not cut its rows this way: it reduces along them.

* :class:`RowScale2DTiling`: the TilingData (its host tiling function is the challenge);
* :func:`demand_2d`: the UB bytes a block reserves; :func:`check_2d`: the host's "can implement";
* :class:`KernelRowScale2D`: one block; :func:`launch_row_scale_2d`: every block, on numpy arrays.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from ... import lang
from ...arch import BLOCK_BYTES, DEFAULT_CHIP, ceil_div
from ...chips import get_chip
from ...errors import AlignmentError, BufferOverflowError, ShapeError
from ...lang import VECIN, VECOUT, Queue, TPipe, data_copy, data_copy_strided, get_block_idx, launch

QUEUES = 2                 # in_x and out_z (gamma has its own one-slot queue)


@dataclass(frozen=True)
class RowScale2DTiling:
    """TilingData of the 2-D row scale: a block is rows_per_core x cols_per_core elements, a
    tile rows_per_tile x cols_per_tile of them."""
    rows: int
    cols: int
    rows_per_core: int     # rows of one block (the last row group may get fewer)
    cols_per_core: int     # columns of one block, whole 32-byte blocks (the last group may get fewer)
    rows_per_tile: int     # rows in one UB tile
    cols_per_tile: int     # columns in one UB tile, whole 32-byte blocks
    buffer_num: int = 2    # slots of each queue (gamma's too)

    @property
    def row_groups(self) -> int:
        return ceil_div(self.rows, self.rows_per_core)

    @property
    def col_groups(self) -> int:
        return ceil_div(self.cols, self.cols_per_core)

    @property
    def block_dim(self) -> int:
        """Blocks launched: one per (row group, column group)."""
        return self.row_groups * self.col_groups

    def to_dict(self) -> dict:
        return asdict(self)


def demand_2d(t: RowScale2DTiling, dtype) -> int:
    """UB bytes one block reserves: buffer_num slots of each queue, gamma's of cols_per_tile
    elements, in_x's and out_z's of rows_per_tile x cols_per_tile."""
    chunk = t.cols_per_tile * np.dtype(dtype).itemsize
    return t.buffer_num * (chunk + QUEUES * t.rows_per_tile * chunk)


def check_2d(t: RowScale2DTiling, dtype, chip) -> None:
    """The host's "can implement": raise an NpuError naming the field that cannot run."""
    chip, item = get_chip(chip), np.dtype(dtype).itemsize
    counts = (t.rows_per_core, t.cols_per_core, t.rows_per_tile, t.cols_per_tile, t.buffer_num)
    if any(isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1 for v in counts):
        raise ShapeError(f"row scale 2-D: every count must be a whole number of at least 1, got {t}")
    for name in ("cols_per_core", "cols_per_tile"):
        if getattr(t, name) * item % BLOCK_BYTES:
            raise AlignmentError(f"row scale 2-D: {name}={getattr(t, name)} x {item} B is not whole "
                                 f"{BLOCK_BYTES}-byte blocks: every block and tile of columns starts on "
                                 f"a 32-byte boundary")
    cores = chip.cores_for("aiv")
    if t.block_dim > cores:
        raise ShapeError(f"row scale 2-D: {t.row_groups} row groups x {t.col_groups} column groups = "
                         f"{t.block_dim} blocks, more than the {cores} vector cores of {chip.name}")
    need = demand_2d(t, dtype)
    if need > chip.buffers.ub:
        raise BufferOverflowError(f"row scale 2-D: a block reserves {need:,} B of UB ({t.buffer_num} slots "
                                  f"each of a gamma chunk and of in_x and out_z tiles of {t.rows_per_tile} x "
                                  f"{t.cols_per_tile}), UB holds {chip.buffers.ub:,} B")


class KernelRowScale2D:
    """One block: rows r0.. and columns c0.. of z = x * gamma. Column chunks outside, tiles of
    rows inside: each gamma chunk is copied once and serves every row of the block."""

    def __init__(self, x, gamma, z, t: RowScale2DTiling):
        rg, cg = divmod(get_block_idx(), t.col_groups)
        self.r0, c0 = rg * t.rows_per_core, cg * t.cols_per_core
        self.nrows = min(t.rows_per_core, t.rows - self.r0)       # the last row group may be short
        self.ncols = min(t.cols_per_core, t.cols - c0)            # and the last column group narrow
        self.cols, self.tile_r, self.tile_c = t.cols, t.rows_per_tile, t.cols_per_tile
        self.x_gm, self.z_gm, self.gamma_gm = x[c0:], z[c0:], gamma[c0:]
        self.dtype = x.dtype
        self.pipe = TPipe()
        self.in_g, self.in_x, self.out_z = Queue(VECIN, "gamma"), Queue(VECIN, "in_x"), Queue(VECOUT, "out_z")
        chunk = t.cols_per_tile * self.dtype.itemsize
        self.pipe.init_buffer(self.in_g, t.buffer_num, chunk)
        for q in (self.in_x, self.out_z):
            self.pipe.init_buffer(q, t.buffer_num, self.tile_r * chunk)

    def process(self) -> None:
        for j in range(ceil_div(self.ncols, self.tile_c)):
            c, w = j * self.tile_c, min(self.tile_c, self.ncols - j * self.tile_c)
            g = self.in_g.alloc_tensor(self.dtype)
            data_copy(g, self.gamma_gm[c:], w)
            self.in_g.enque(g)
            g = self.in_g.deque()
            for i in range(ceil_div(self.nrows, self.tile_r)):
                self.tile(g, (self.r0 + i * self.tile_r) * self.cols + c,
                          min(self.tile_r, self.nrows - i * self.tile_r), w)
            self.in_g.free_tensor(g)

    def tile(self, g, first: int, n: int, w: int) -> None:
        """CopyIn, Compute, CopyOut of n rows x w columns whose first element is x_gm[first]."""
        x = self.in_x.alloc_tensor(self.dtype)
        data_copy_strided(x, self.x_gm[first:], n, w, src_stride=self.cols)   # one burst a row
        self.in_x.enque(x)
        x, z = self.in_x.deque(), self.out_z.alloc_tensor(self.dtype)
        lang.mul_per_col(z, x, g, n, w)
        self.out_z.enque(z)
        self.in_x.free_tensor(x)
        z = self.out_z.deque()
        data_copy_strided(self.z_gm[first:], z, n, w, dst_stride=self.cols)
        self.out_z.free_tensor(z)


def launch_row_scale_2d(x: np.ndarray, gamma: np.ndarray, t: RowScale2DTiling, chip=DEFAULT_CHIP,
                        mode: str = "functional"):
    """Check tiling ``t`` (:func:`check_2d`), then launch KernelRowScale2D over x (rows, cols) and
    gamma (cols,); returns (z of shape (rows, cols), or None in timing mode, and the trace)."""
    if (t.rows, t.cols) != x.shape or gamma.shape != (x.shape[1],):
        raise ShapeError(f"row scale 2-D: x {x.shape}, gamma {gamma.shape} and the tiling's "
                         f"{(t.rows, t.cols)} must agree")
    if x.shape[1] * x.dtype.itemsize % BLOCK_BYTES:
        raise ShapeError(f"row scale 2-D: a row of {x.shape[1]} {x.dtype} is not whole 32-byte blocks")
    check_2d(t, x.dtype, chip)

    def kernel(xg, gg, zg, tt):
        KernelRowScale2D(xg, gg, zg, tt).process()

    (_, _, z, _), trace = launch(kernel, t.block_dim, x.reshape(-1), gamma, np.zeros(x.size, x.dtype), t,
                                 chip=chip, mode=mode, core_type="aiv")
    return (None if z is None else z.reshape(x.shape)), trace


__all__ = ["RowScale2DTiling", "demand_2d", "check_2d", "KernelRowScale2D", "launch_row_scale_2d"]
