"""The row kernels' base: LayerNorm, RMSNorm and Softmax over the last axis share it (lab 07).

A *row kernel* views its input as (rows, cols) with the normalised or reduced axes last; rows
are split over the cores (``block_factor``) and each block into tiles of ``tile_rows`` whole
rows, so every reduction stays inside one tile: no cross-core or cross-tile sums.

* :class:`RowTiling` and :func:`row_tiling`: the host side, sizing the tiles from the UB the chip
  has;
* :class:`RowKernel`: one block's CopyIn -> Compute -> CopyOut over its tiles; a subclass
  writes ``compute_rows``. fp16 kernels widen each tile to fp32 with ``cast``, compute in fp32
  and round once on the way out, as ops-nn's LayerNorm and RMSNorm do (the cast is a vector
  pass and is paid for). A tile's steps are a chain: each reads what the step before wrote, so
  each waits for that step's start-up behind an automatic PIPE_V barrier (lang.vector);
  ``process_interleaved`` keeps two or more tiles in the vector unit at once and runs their
  steps round-robin, so one barrier orders a step of every tile in flight;
* :func:`launch_rows`: launch a row kernel on numpy arrays.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .. import lang
from ..arch import BLOCK_BYTES, F32, ceil_div, round_up
from ..chips import get_chip
from ..errors import ShapeError
from ..lang import VECCALC, VECIN, VECOUT, Queue, TBuf, TPipe, get_block_idx
from .tiling_data import Tiling
from .vector_base import BUFFER_NUM, TILES_PER_BLOCK, check_float, copy_elements, launch_vector, ramp_tiles

MIN_TILES_WIDENED = 8       # TILES_PER_BLOCK for fp16 tiles widened to fp32 (vector-bound: larger
                            # tiles amortise the instructions' start-ups), rounded down to whole
                            # groups of GROUP_ROWS rows; 8 is the best for fp16 LayerNorm and
                            # Softmax on the 910 and the 910b (npulab bench kernels --family vector)
GROUP_ROWS = 8              # rows one instruction sweeps in the vector forms that take a repeat's
                            # 8 blocks from 8 rows (lang.vector_rows._issue_rows)


@dataclass(frozen=True)
class RowTiling(Tiling):
    """TilingData of a row kernel: (rows, cols) split into blocks of rows and tiles of rows."""
    rows: int           # rows of the (rows, cols) view
    cols: int           # elements a row (the normalised / reduced size)
    dtype: str          # input and output dtype
    block_factor: int   # rows a block (the last block may get fewer)
    block_dim: int      # blocks launched
    tile_rows: int      # rows a UB tile
    buffer_num: int     # slots of the in and out queues: 2 = double buffering, 3 = triple
    ub_bytes: int       # UB the kernel reserves (for the reader; checked against the chip)
    ramp: int = 2       # halvings of the tiles at both ends of a block (ramp_tiles)
    param_rows: int = 0  # fp32 parameter rows (gamma, beta) broadcast to a whole tile once a block
    narrow: bool = False  # fp16: run the kernel's leading steps in fp16 before widening
                          # (Softmax: the row max, exact in fp16, and x - max); see KernelSoftmaxAR
    exp16: bool = False   # fp16 Softmax with narrow: exp and the scaling by 1 / sum in fp16 too,
                          # only the sum widened (KernelSoftmaxAR)
    in_flight: int = 1    # tiles whose vector steps interleave (RowKernel.process_interleaved)

    @property
    def np_dtype(self) -> np.dtype:
        return np.dtype(self.dtype)


def row_tiling(rows: int, cols: int, dtype, chip, *, what: str, work_rows: float, fixed_bytes: int = 0,
               stats: int = 2, buffer_num: int = BUFFER_NUM, tile_rows: int | None = None,
               ramp: int | None = None, param_rows: int = 0, narrow: bool = False,
               exp16: bool = False, in_flight: int = 1) -> RowTiling:
    """Split ``rows`` rows of ``cols`` elements over the cores and into UB tiles.

    A tile of r rows holds ``buffer_num`` in slots and ``buffer_num`` out slots of r x cols
    ``dtype``, plus ``work_rows`` fp32 scratch rows of r x cols (the kernel's temporaries; 0.5 =
    half a row);
    ``fixed_bytes`` is what the kernel keeps for the whole block (gamma, beta); ``stats`` fp32
    values a row hold per-row statistics (mean, 1/std, ...); ``param_rows`` fp32 rows a tile row
    hold parameters broadcast to the whole tile (LayerNorm's gamma and beta, see
    KernelLayerNorm); ``narrow`` (fp16) adds an fp16 statistic a row. ``in_flight`` is recorded
    for the kernel; ``work_rows`` and ``stats`` must already count every tile in flight.
    tile_rows = the most that fits, but at most 1/TILES_PER_BLOCK of a block
    (1/MIN_TILES_WIDENED for fp16, in whole groups of GROUP_ROWS rows); the kernel runs smaller
    tiles at both ends (ramp_tiles: ``ramp`` halvings, default 2 for fp32 and 1 for fp16, whose
    vector-bound tiles gain less from a short fill than they pay in start-ups).
    """
    chip = get_chip(chip)
    dt = check_float(what, "input", dtype)
    if rows < 1 or cols < 1:
        raise ShapeError(f"{what}: need at least one row and one column, got rows={rows}, cols={cols}")
    if buffer_num < 1:
        raise ShapeError(f"{what}: buffer_num must be at least 1, got {buffer_num}")
    block_factor = ceil_div(rows, chip.cores_for("aiv"))
    block_dim = ceil_div(rows, block_factor)
    narrow = bool(narrow) and dt != F32
    exp16 = bool(exp16) and narrow
    per_row = (2 * buffer_num * cols * dt.itemsize + (work_rows + param_rows) * cols * F32.itemsize
               + stats * 4 + 2 * narrow + 2 * exp16)
    slack = (2 * buffer_num + int(math.ceil(work_rows)) + param_rows + 5) * BLOCK_BYTES   # 32-byte rounding
    per_row = int(math.ceil(per_row))
    free = chip.buffers.ub - fixed_bytes - slack
    fit = free // per_row
    if fit < 1:
        raise ShapeError(
            f"{what}: one row of {cols} elements needs {per_row + fixed_bytes + slack:,} B of UB "
            f"({2 * buffer_num} {dt} slots + {work_rows + param_rows} fp32 scratch and parameter rows + "
            f"{fixed_bytes:,} B kept), "
            f"and chip '{chip.name}' has {chip.buffers.ub:,} B. Normalise fewer elements at once "
            f"(a smaller last dimension) or use a chip with a larger UB.")
    if ramp is None:
        ramp = 2 if dt == F32 else 1
    if tile_rows is None:
        # a widened (fp16) tile is vector-bound: there, larger tiles amortise the vector
        # start-ups better than more tiles hide the fill and drain
        if dt == F32:
            tile_rows = min(fit, ceil_div(block_factor, TILES_PER_BLOCK))
        else:
            r = ceil_div(block_factor, MIN_TILES_WIDENED)
            tile_rows = min(fit, r // GROUP_ROWS * GROUP_ROWS if r >= GROUP_ROWS else r)
    elif not 1 <= tile_rows <= fit:
        raise ShapeError(f"{what}: tile_rows={tile_rows} must be between 1 and {fit} (what fits the UB)")
    ub = fixed_bytes + tile_rows * per_row + slack
    return RowTiling(rows, cols, dt.name, block_factor, block_dim, tile_rows, buffer_num, ub, ramp,
                     int(param_rows), narrow, exp16, int(in_flight))


class RowKernel:
    """One block of a row kernel: CopyIn -> Compute -> CopyOut over tiles of whole rows.

    Subclasses implement ``compute_rows(x32, out32, n)``: x32 holds n rows (fp32, may be
    overwritten), the result goes to out32 (fp32). For fp16 the tile is cast to fp32 first and
    back at the end; for fp32 x32 is the input slot itself and out32 the output slot.
    """
    WORK_ROWS = 1           # fp32 scratch rows a tile (beyond the fp16 -> fp32 copy)
    STATS = 1               # per-row fp32 statistics vectors

    def __init__(self, x, y, t: RowTiling, name: str):
        self.t = t
        self.cols = t.cols
        start = get_block_idx() * t.block_factor
        self.nrows = min(t.block_factor, t.rows - start)
        self.x_gm = x[start * t.cols: (start + self.nrows) * t.cols]
        self.y_gm = y[start * t.cols: (start + self.nrows) * t.cols]
        self.dtype = t.np_dtype
        self.wide = self.dtype != F32
        self.pipe = TPipe()
        self.in_x, self.out_y = Queue(VECIN, f"in_{name}"), Queue(VECOUT, f"out_{name}")
        tile = t.tile_rows * t.cols
        self.pipe.init_buffer(self.in_x, t.buffer_num, tile * self.dtype.itemsize)
        self.pipe.init_buffer(self.out_y, t.buffer_num, tile * self.dtype.itemsize)
        self.work = []
        for k, nbytes in enumerate(self.work_sizes()):
            b = TBuf(VECCALC, f"work{k}")
            self.pipe.init_buffer(b, nbytes)
            self.work.append(b.get(F32))
        stat = TBuf(VECCALC, "stats")
        self.stat_len = round_up(t.tile_rows, BLOCK_BYTES // 4)
        self.pipe.init_buffer(stat, self.STATS * self.stat_len * 4)
        st = stat.get(F32)
        self.stats = [st[k * self.stat_len:] for k in range(self.STATS)]

    def work_sizes(self) -> list[int]:
        """Bytes of each fp32 scratch buffer: WORK_ROWS whole tiles, and the fp32 copy of an
        fp16 tile (the last one)."""
        return [self.t.tile_rows * self.t.cols * 4] * (self.WORK_ROWS + (1 if self.wide else 0))

    # -- parameters (gamma, beta, ...): one row each, loaded once a block, widened to fp32 --
    def load_params(self, params, name="params"):
        """Copy the 1-D GM tensors ``params`` (None skipped) into UB once; returns fp32 tensors."""
        present = [p for p in params if p is not None]
        if not present:
            self.param_q = None
            return [None] * len(params)
        n = len(present)
        item = self.dtype.itemsize
        span = round_up(self.cols * item, BLOCK_BYTES)
        self.param_q = Queue(VECIN, f"in_{name}")
        self.pipe.init_buffer(self.param_q, 1, n * span)
        raw = self.param_q.alloc_tensor(self.dtype)
        per = span // item
        for k, p in enumerate(present):
            copy_elements(raw[k * per:], p, self.cols)
        self.param_q.enque(raw)
        raw = self.param_q.deque()
        self.param_raw = raw
        if self.wide:
            buf = TBuf(VECCALC, f"{name}32")
            span32 = round_up(self.cols * 4, BLOCK_BYTES)
            self.pipe.init_buffer(buf, n * span32)
            p32 = buf.get(F32)
            out = [p32[k * (span32 // 4):] for k in range(n)]
            for k in range(n):
                lang.cast(out[k], raw[k * per:], "none", self.cols)
        else:
            out = [raw[k * per:] for k in range(n)]
        it = iter(out)
        return [None if p is None else next(it) for p in params]

    def free_params(self):
        if getattr(self, "param_q", None) is not None:
            self.param_q.free_tensor(self.param_raw)

    # -- the pipeline ----------------------------------------------------------------------
    def process(self) -> None:
        if self.t.in_flight > 1:
            return self.process_interleaved()
        r0 = 0
        for n in ramp_tiles(self.nrows, self.t.tile_rows, 1, self.t.ramp):
            self.copy_in(r0, n)
            self.compute(n)
            self.copy_out(r0, n)
            r0 += n
        self.free_params()

    def process_interleaved(self) -> None:
        """The pipeline with ``t.in_flight`` tiles in the vector unit at once.

        A tile's compute is a chain of dependent vector steps, and each step waits for the
        previous one's result: its start-up (latency) before it, behind an automatic PIPE_V
        barrier (lang.vector). Steps of *different* tiles are independent, so this loop runs
        ``tile_steps`` of up to ``in_flight`` tiles round-robin, one step of each a round, a
        new tile starting ``steps / in_flight`` steps after the one before it: one barrier then
        orders a round's steps of every tile, and the start-ups a tile waits for are shared.
        Copies in run ahead as far as the in queue's slots allow; a tile's copy out follows its
        last step."""
        sizes = ramp_tiles(self.nrows, self.t.tile_rows, 1, self.t.ramp)
        starts = [sum(sizes[:k]) for k in range(len(sizes))]
        d = self.t.in_flight
        lag = ceil_div(self.STEPS, d)
        free_sets = list(range(d))
        issued = 0                          # tiles whose copy in has been issued
        active = []                         # [steps generator, steps done, tile, buffer set]
        nxt = 0
        while nxt < len(sizes) or active:
            while issued < len(sizes) and not all(self.in_x.held):
                self.copy_in(starts[issued], sizes[issued])
                issued += 1
            if nxt < len(sizes) and free_sets and (not active or active[-1][1] >= lag):
                k = free_sets.pop(0)
                active.append([self.tile_steps(sizes[nxt], k), 0, nxt, k])
                nxt += 1
            for a in list(active):
                if next(a[0], StopIteration) is StopIteration:
                    active.remove(a)
                    free_sets.append(a[3])
                    self.copy_out(starts[a[2]], sizes[a[2]])
                else:
                    a[1] += 1
        self.free_params()

    def tile_steps(self, n: int, k: int):   # pragma: no cover - abstract
        """A generator: one tile of n rows (already copied in, buffer set k), one dependent
        vector step per ``next``; the last step enqueues the output."""
        raise NotImplementedError

    def copy_in(self, r0: int, n: int) -> None:
        x = self.in_x.alloc_tensor(self.dtype)
        copy_elements(x, self.x_gm[r0 * self.cols:], n * self.cols)
        self.in_x.enque(x)

    def compute(self, n: int) -> None:
        x = self.in_x.deque()
        y = self.out_y.alloc_tensor(self.dtype)
        count = n * self.cols
        if self.wide:
            self.narrow_rows(x, n)
            x32 = self.work[-1]
            lang.cast(x32, x, "none", count)
            # once widened, the fp16 slot is scratch for compute_rows: n * cols / 2 fp32 values
            self.spare = x.reinterpret_cast(F32)
            self.compute_rows(x32, x32, n)
            self.spare = None
            self.in_x.free_tensor(x)
            lang.cast(y, x32, "rint", count)
        else:
            self.compute_rows(x, y, n)
            self.in_x.free_tensor(x)
        self.out_y.enque(y)

    def copy_out(self, r0: int, n: int) -> None:
        y = self.out_y.deque()
        copy_elements(self.y_gm[r0 * self.cols:], y, n * self.cols)
        self.out_y.free_tensor(y)

    def narrow_rows(self, x, n: int) -> None:
        """Steps run on the fp16 tile ``x`` (n rows, in place) before it is widened; none by
        default (see KernelSoftmaxAR)."""

    def compute_rows(self, x32, out32, n: int) -> None:   # pragma: no cover - abstract
        raise NotImplementedError

    def broadcast_rows(self, dst, row, rows: int) -> None:
        """dst[r, :] = row for r < rows (fp32): one Adds (x + 0, a vector copy) of the first
        row, then doubling copies of the rows already filled: about log2(rows) + 1 Adds."""
        cols = self.cols
        lang.adds(dst, row, 0.0, cols)
        done = 1
        while done < rows:
            k = min(done, rows - done)
            lang.adds(dst[done * cols:], dst, 0.0, k * cols)
            done += k


def fold_halves(cols: int, itemsize: int = 4) -> bool:
    """A row of ``cols`` values can be folded in two halves that start on 32-byte blocks."""
    return cols % 2 == 0 and (cols // 2) * itemsize % BLOCK_BYTES == 0


def launch_rows(kernel, x, params, t: RowTiling, chip, mode, *extra):
    """Launch row kernel ``kernel(x, *params, y, t, *extra)``; y has x's shape and dtype."""
    return launch_vector(kernel, [x, *params], x.shape, x.dtype, t, *extra, chip=chip, mode=mode)


__all__ = ["RowTiling", "row_tiling", "RowKernel", "fold_halves", "launch_rows", "MIN_TILES_WIDENED",
           "GROUP_ROWS"]
