"""Normalisations on the vector unit: LayerNorm, RMSNorm (row kernels) and BatchNorm (inference).

What you learn here (lab 07):

* a *row kernel*: the input is viewed as (rows, cols) with the normalised axes last; rows are
  split over the cores (``block_factor``) and each block into tiles of ``tile_rows`` whole rows,
  so every reduction stays inside one tile: no cross-core or cross-tile sums;
* reductions along a row use the 2-D vector forms (``reduce_sum_rows``: WholeReduceSum over
  each repeat, then over the partials), and per-row statistics are broadcast back with
  ``sub_per_row`` / ``mul_per_row`` (Brcb, then a block stride of one row: one instruction
  sweeps 8 rows, a repeat taking one block of each; lang.vector), per-column ones (gamma,
  beta: one row reused by every row) with the ``*_per_col`` forms, block stride 0;
* LayerNorm's variance comes from the centred values, their squares summed as they are made:
  each row's two halves squared and added in one pass (``mul_rows``, ``mul_add_dst_rows``:
  Mul, then MulAddDst), so half as many values are left to reduce; 1 / sqrt(var + eps) is one
  ``Rsqrt``; y * gamma + beta is one ``FusedMulAdd`` (per column, or over the tile when gamma
  and beta are copied into every row of a tile, ``param_tile``);
* fp16 kernels widen each tile to fp32 with ``cast``, compute in fp32 and round once on the way
  out, as ops-nn's LayerNorm and RMSNorm do (the cast is a vector pass and is paid for); the
  freed fp16 slot holds LayerNorm's squares;
* a tile's steps are a chain: each reads what the step before wrote, so each waits for that
  step's start-up behind an automatic PIPE_V barrier (lang.vector). fp16 LayerNorm therefore
  keeps two or more tiles in the vector unit at once and runs their steps round-robin
  (``in_flight``, RowKernel.process_interleaved): one barrier then orders a step of every tile
  in flight, and the start-ups they wait for are shared.

Host side: :func:`row_tiling` sizes the tiles from the UB the chip has; the ``check_*``
functions validate inputs; the ``launch_*`` functions run a kernel with a tiling.
Mirrors hicann/ops-nn ``norm/layer_norm_v4``, ``norm/rms_norm`` and ``norm/batch_norm_v3``
(op_host tiling beside op_kernel), simplified.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

from .. import lang
from ..chips import get_chip
from ..errors import ShapeError
from ..lang import vector as V
from ..lang import VECCALC, VECIN, VECOUT, TPipe, Queue, TBuf, data_copy, data_copy_pad, get_block_idx
from ..arch import DEFAULT_CHIP, ceil_div, round_up

BLOCK_BYTES = 32            # one DMA block; every UB tensor starts on one
MIN_TILES_PER_BLOCK = 16    # split a block at least this finely so copies and compute overlap
                            # (fewer, larger tiles pay fewer vector start-ups but more fill and
                            # drain; 16 is the best at BERT sizes on the 910, see bench_vector)
MIN_TILES_WIDENED = 8       # the same for fp16 tiles widened to fp32 (vector-bound: larger
                            # tiles amortise the instructions' start-ups), rounded down to whole
                            # groups of GROUP_ROWS rows; 8 is the best for fp16 LayerNorm and
                            # Softmax on the 910 and the 910b (bench_vector)
MAX_IN_FLIGHT = 4           # fp16 LayerNorm tiles interleaved at most (layer_norm_tiling)
GROUP_ROWS = 8              # rows one instruction sweeps in the vector forms that take a repeat's
                            # 8 blocks from 8 rows (lang.vector._issue_rows)
# three slots a queue: a read pays its copy start-up on top of its bytes, and with two slots
# the next read often starts too late to finish before the vector unit wants it. In Ascend C
# the slot count is InitBuffer's ``num`` (uint8_t; 1 = single, 2 = double buffering; every
# queue's num in a kernel adds up to at most 64: CANN API reference, TPipe::InitBuffer).
BUFFER_NUM = 3
SUPPORTED = (np.dtype(np.float16), np.dtype(np.float32))
F32 = np.dtype(np.float32)



def check_float(what: str, name: str, dtype) -> np.dtype:
    dt = np.dtype(dtype)
    if dt not in SUPPORTED:
        raise ShapeError(f"{what}: {name} is {dt}; expected float16 or float32")
    return dt


@dataclass(frozen=True)
class RowTiling:
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

    def to_dict(self) -> dict:
        return asdict(self)

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
    tile_rows = the most that fits, but at most 1/MIN_TILES_PER_BLOCK of a block
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
            tile_rows = min(fit, ceil_div(block_factor, MIN_TILES_PER_BLOCK))
        else:
            r = ceil_div(block_factor, MIN_TILES_WIDENED)
            tile_rows = min(fit, r // GROUP_ROWS * GROUP_ROWS if r >= GROUP_ROWS else r)
    elif not 1 <= tile_rows <= fit:
        raise ShapeError(f"{what}: tile_rows={tile_rows} must be between 1 and {fit} (what fits the UB)")
    ub = fixed_bytes + tile_rows * per_row + slack
    return RowTiling(rows, cols, dt.name, block_factor, block_dim, tile_rows, buffer_num, ub, ramp,
                     int(param_rows), narrow, exp16, int(in_flight))


def ramp_tiles(total: int, tile: int, unit: int = 1, ramp: int = 2) -> list[int]:
    """Sizes of the tiles that cover ``total`` items (multiples of ``unit``, at most ``tile``):
    ``ramp`` tiles of tile/2**ramp, ..., tile/2 first, then full tiles, then the same ramp in
    reverse. Nothing can overlap the first tile's copy-in or the last tile's compute and
    copy-out, so a pipeline of equal tiles pays one tile's read and one tile's write on top of
    the streaming time; small first and last tiles make that fill and drain short, while the
    tiles between stay large and amortise the start-up of every copy and vector instruction
    (an ordinary loop with a per-iteration count in Ascend C). Falls back to equal tiles when
    ``total`` is too short for a ramp."""
    total, tile, unit = int(total), int(tile), max(1, int(unit))
    if total <= 0:
        return []
    head = [max(unit, round_up(tile >> k, unit)) for k in range(ramp, 0, -1)] if ramp > 0 else []
    head = [h for h in head if h < tile]
    if sum(head) * 2 + tile > total or not head:
        n = ceil_div(total, tile)
        base = round_up(ceil_div(total, n), unit)
        sizes = [base] * (total // base)
        if total - sum(sizes):
            sizes.append(total - sum(sizes))
        return sizes
    mid = total - 2 * sum(head)
    n = ceil_div(mid, tile)
    base = min(tile, round_up(ceil_div(mid, n), unit))
    body = [base] * (mid // base)
    rest = mid - sum(body)
    if rest:
        body.append(rest)
    return head + body + head[::-1]


def copy(dst, src, count: int) -> None:
    """data_copy when whole 32-byte blocks move, data_copy_pad for a tail."""
    if count * src.itemsize % BLOCK_BYTES:
        data_copy_pad(dst, src, count)
    else:
        data_copy(dst, src, count)


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
            copy(raw[k * per:], p, self.cols)
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
        copy(x, self.x_gm[r0 * self.cols:], n * self.cols)
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
        copy(self.y_gm[r0 * self.cols:], y, n * self.cols)
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


# -- LayerNorm -------------------------------------------------------------------------------
class KernelLayerNorm(RowKernel):
    """y = (x - mean) / sqrt(var + eps) * gamma + beta over each row (biased variance), in
    fp32: mean, x - mean, the variance of the centred values (two-pass, as ops-nn and Ascend C's
    LayerNorm compute it), then (x - mean) * rstd and the affine step.

    With ``t.param_rows`` = 2, gamma and beta are copied into every row of a whole fp32 tile
    once a block, so the affine step y * gamma + beta is one FusedMulAdd over the tile (a few
    long instructions); with 0 they stay one row reused by every row
    (``fused_mul_add_per_col``: block stride 0, one instruction a group of 8 rows)."""
    WORK_ROWS = 1
    STATS = 2

    def folds(self) -> bool:
        """The squares of a row's two halves are summed as they are made when the halves start
        on 32-byte blocks (fp32: cols a multiple of 16)."""
        return fold_halves(self.cols)

    def work_sizes(self):
        if self.folds():
            # the squares are n x cols/2 fp32: for fp16 in the freed fp16 slot, beside the
            # widened copy (one a tile in flight); for fp32 half a tile
            tile = self.t.tile_rows * self.cols
            return [tile * 4] * self.t.in_flight if self.wide else [tile * 2]
        return super().work_sizes()

    #: the interleaved form (``tile_steps``) sums the squares of a row's FOLD parts as it makes
    #: them (one Mul, then FOLD - 1 MulAddDst) when the parts start on 32-byte blocks, else of
    #: its halves: a MulAddDst costs what a Mul does, and each one more leaves fewer values to
    #: reduce (a quarter of a row instead of a half); 4 is the best for BERT rows (bench_vector)
    FOLD = 4

    def fold_parts(self) -> int:
        return self.FOLD if self.cols % (8 * self.FOLD) == 0 else 2

    @property
    def STEPS(self) -> int:                       # noqa: N802 - RowKernel's name
        """Dependent vector steps of one tile in ``tile_steps`` (for the interleaving's stagger)."""
        return 14 + self.fold_parts()

    def __init__(self, x, gamma, beta, y, t: RowTiling, eps: float):
        if t.in_flight > 1:
            if not (np.dtype(t.dtype) != F32 and fold_halves(t.cols)):
                raise ShapeError(f"LayerNorm: in_flight={t.in_flight} needs an fp16 input whose rows fold in "
                                 f"halves (cols a multiple of 16), got {t.dtype} cols={t.cols}")
            if t.buffer_num <= t.in_flight:
                raise ShapeError(f"LayerNorm: in_flight={t.in_flight} tiles each hold an in slot until "
                                 f"their variance is summed; buffer_num={t.buffer_num} must be larger")
            self.STATS = 2 * t.in_flight
        super().__init__(x, y, t, "x")
        self.eps = eps
        self.gamma, self.beta = self.load_params([gamma, beta], "gamma_beta")
        if t.in_flight > 1:
            # var + eps = sum * (1 / cols) + eps as one FusedMulAdd: 1 / cols in a vector of
            # one value a row, eps in one repeat (fused_mul_add_const); the same two roundings
            # as Muls then Adds
            buf = TBuf(VECCALC, "scale_eps")
            self.pipe.init_buffer(buf, (self.stat_len + 64) * 4)
            c = buf.get(F32)
            self.inv_cols, self.eps_rep = c, c[self.stat_len:]
            lang.duplicate(self.inv_cols, 1.0 / t.cols, self.stat_len)
            lang.duplicate(self.eps_rep, eps, 64)
        self.tiled = [None, None]
        present = [k for k, p in enumerate((self.gamma, self.beta)) if p is not None]
        if t.param_rows and present:
            if t.param_rows < len(present):
                raise ShapeError(f"LayerNorm: param_rows={t.param_rows} fp32 rows a tile row, and gamma "
                                 f"and beta need {len(present)}; use layer_norm_tiling")
            if t.cols * 4 % BLOCK_BYTES:
                raise ShapeError(f"LayerNorm: param_rows needs rows that start on 32-byte blocks "
                                 f"(cols a multiple of 8), got cols={t.cols}")
            buf = TBuf(VECCALC, "gamma_beta_tile")
            span = t.tile_rows * t.cols
            self.pipe.init_buffer(buf, len(present) * span * 4)
            tiles = buf.get(F32)
            for j, k in enumerate(present):
                self.tiled[k] = tiles[j * span:]
                self.broadcast_rows(self.tiled[k], (self.gamma, self.beta)[k], t.tile_rows)

    def compute_rows(self, x32, out32, n):
        cols = self.cols
        mean, rstd = self.stats
        lang.reduce_sum_rows(mean, x32, n, cols)
        lang.muls(mean, mean, 1.0 / cols, n)
        lang.sub_per_row(x32, x32, mean, n, cols)               # x - mean (in place)
        half = cols // 2
        if self.folds():
            # the variance from the centred values: the squares of each row's two halves
            # summed as they are made (Mul, then MulAddDst), half as many values to reduce
            sq = self.spare if self.wide else self.work[0]
            V.mul_rows(sq, x32, x32, n, half, dst_stride=half, src_stride=cols)
            V.mul_add_dst_rows(sq, x32[half:], x32[half:], n, half, dst_stride=half, src_stride=cols)
            lang.reduce_sum_rows(rstd, sq, n, half)
        else:
            sq = self.work[0]
            lang.mul(sq, x32, x32, n * cols)
            lang.reduce_sum_rows(rstd, sq, n, cols)
        lang.muls(rstd, rstd, 1.0 / cols, n)                    # biased variance, as torch
        lang.adds(rstd, rstd, self.eps, n)
        V.rsqrt(rstd, rstd, n)                                  # 1 / sqrt(var + eps): Rsqrt
        g, b = self.tiled
        count = n * cols
        if g is not None and b is not None:
            # y = (x - mean) * rstd, then y * gamma + beta as one FusedMulAdd over the tile
            lang.mul_per_row(out32, x32, rstd, n, cols)
            V.fused_mul_add(out32, g, b, count)
        elif g is not None:
            lang.mul_per_row(x32, x32, rstd, n, cols)
            lang.mul(out32, x32, g, count)
        elif b is not None:
            lang.mul_per_row(x32, x32, rstd, n, cols)
            lang.add(out32, x32, b, count)
        # the per-column forms: gamma and beta one row reused by every row (repeat stride 0);
        # FusedMulAdd does y * gamma + beta in one pass, a pass fewer than a Mul and an Add
        elif self.gamma is not None and self.beta is not None:
            lang.mul_per_row(out32, x32, rstd, n, cols)
            V.fused_mul_add_per_col(out32, self.gamma, self.beta, n, cols)
        elif self.gamma is not None:
            lang.mul_per_row(x32, x32, rstd, n, cols)
            lang.mul_per_col(out32, x32, self.gamma, n, cols)
        elif self.beta is not None:
            lang.mul_per_row(x32, x32, rstd, n, cols)
            lang.add_per_col(out32, x32, self.beta, n, cols)
        else:
            lang.mul_per_row(out32, x32, rstd, n, cols)

    def tile_steps(self, n: int, k: int):
        """compute_rows for an fp16 tile of n rows whose halves fold, one dependent vector step
        per ``next`` (RowKernel.process_interleaved), with buffer set k: the same
        instructions and numerics, but var + eps in one FusedMulAdd and the affine step per
        column (no gamma / beta tiles: every tile in flight would need its own UB)."""
        cols, half, count = self.cols, self.cols // 2, n * self.cols
        mean, rstd = self.stats[2 * k], self.stats[2 * k + 1]
        x32 = self.work[k]
        x = self.in_x.deque()
        lang.cast(x32, x, "none", count)
        yield
        yield from lang.reduce_sum_rows.steps(mean, x32, n, cols)
        lang.muls(mean, mean, 1.0 / cols, n)
        yield
        yield from lang.sub_per_row.steps(x32, x32, mean, n, cols)      # x - mean (in place)
        sq = x.reinterpret_cast(F32)                 # the fp16 slot, widened, holds the squares
        parts = self.fold_parts()
        w = cols // parts
        V.mul_rows(sq, x32, x32, n, w, dst_stride=w, src_stride=cols)
        yield
        for j in range(1, parts):
            V.mul_add_dst_rows(sq, x32[j * w:], x32[j * w:], n, w, dst_stride=w, src_stride=cols)
            yield
        yield from lang.reduce_sum_rows.steps(rstd, sq, n, w)
        self.in_x.free_tensor(x)
        V.fused_mul_add_const(rstd, self.inv_cols, self.eps_rep, n)    # var + eps
        yield
        V.rsqrt(rstd, rstd, n)
        yield
        yield from lang.mul_per_row.steps(x32, x32, rstd, n, cols)      # (x - mean) / std
        if self.gamma is not None or self.beta is not None:
            if self.gamma is not None and self.beta is not None:
                V.fused_mul_add_per_col(x32, self.gamma, self.beta, n, cols)
            elif self.gamma is not None:
                lang.mul_per_col(x32, x32, self.gamma, n, cols)
            else:
                lang.add_per_col(x32, x32, self.beta, n, cols)
            yield
        y = self.out_y.alloc_tensor(self.dtype)
        lang.cast(y, x32, "rint", count)
        self.out_y.enque(y)


def fold_halves(cols: int, itemsize: int = 4) -> bool:
    """A row of ``cols`` values can be folded in two halves that start on 32-byte blocks."""
    return cols % 2 == 0 and (cols // 2) * itemsize % BLOCK_BYTES == 0


def layer_norm_kernel(x, gamma, beta, y, t: RowTiling, eps: float) -> None:
    KernelLayerNorm(x, gamma, beta, y, t, eps).process()


def layer_norm_tiling(rows: int, cols: int, dtype, chip=DEFAULT_CHIP, buffer_num: int = BUFFER_NUM,
                      tile_rows: int | None = None, param_tile: bool | None = None,
                      in_flight: int | None = None, ramp: int | None = None) -> RowTiling:
    """LayerNorm: fp32 scratch for the squares of x - mean (half a row when a row's halves fold,
    KernelLayerNorm), plus the fp32 copy of an fp16 tile (whose freed fp16 slot then holds the
    squares); gamma and beta kept for the block as one fp32 row each, and with ``param_tile``
    (when fp32 rows start on 32-byte blocks: cols a multiple of 8) broadcast to a whole fp32
    tile each (two more fp32 rows a tile row), so the affine step is one FusedMulAdd over the
    tile instead of one a group of 8 rows. None (the default): the tile when it costs no tile
    rows (the UB is not what limits them), else the rows.

    ``in_flight``: fp16 tiles whose dependent vector steps interleave
    (RowKernel.process_interleaved), each with its own fp32 tile; gamma and beta then stay
    one row. None (the default): for fp16 rows that fold in halves, unless ``param_tile`` is
    True, the most tiles up to MAX_IN_FLIGHT that fit the UB at the tile rows the kernel
    would use with one (so the interleaving never costs tile rows), else 1."""
    wide = np.dtype(dtype) != F32
    fixed = 2 * round_up(cols * np.dtype(dtype).itemsize, BLOCK_BYTES) + (2 * cols * 4 if wide else 0)
    if wide:
        work = 1 if fold_halves(cols) else 2
    else:
        work = 0.5 if fold_halves(cols) else 1
    aligned = cols * 4 % BLOCK_BYTES == 0

    def make(params: bool) -> RowTiling:
        return row_tiling(rows, cols, dtype, chip, what="LayerNorm", work_rows=work,
                          fixed_bytes=fixed, stats=2, buffer_num=buffer_num, tile_rows=tile_rows,
                          param_rows=2 if params and aligned else 0, ramp=ramp)
    if in_flight is None:
        in_flight = 1
        if wide and fold_halves(cols) and param_tile is not True:
            want = make(False).tile_rows if tile_rows is None else tile_rows
            for d in range(MAX_IN_FLIGHT, 1, -1):
                try:
                    return layer_norm_tiling(rows, cols, dtype, chip, buffer_num, want, False, d, ramp)
                except ShapeError:
                    pass
    if in_flight > 1:
        # every tile in flight has its fp32 tile and its two statistics; 1 / cols is one more
        # value a row and eps one repeat (KernelLayerNorm)
        return row_tiling(rows, cols, dtype, chip, what="LayerNorm", work_rows=work * in_flight,
                          fixed_bytes=fixed + 64 * 4 + BLOCK_BYTES, stats=2 * in_flight + 1,
                          buffer_num=max(buffer_num, in_flight + 1), tile_rows=tile_rows, ramp=ramp,
                          in_flight=in_flight)
    if param_tile is None:
        rows_only = make(False)
        if not aligned:
            return rows_only
        try:
            tiled = make(True)
        except ShapeError:
            return rows_only
        return tiled if tiled.tile_rows == rows_only.tile_rows else rows_only
    return make(bool(param_tile))


def check_layer_norm(x_shape, x_dtype, normalized_shape, w_spec=None, b_spec=None) -> int:
    """Validate LayerNorm inputs; returns cols = prod(normalized_shape)."""
    dt = check_float("layer_norm", "input", x_dtype)
    ns = tuple(int(d) for d in normalized_shape)
    if not ns or tuple(x_shape[len(x_shape) - len(ns):]) != ns or len(ns) > len(x_shape):
        raise ShapeError(f"layer_norm: normalized_shape {ns} must be the last dimensions of the "
                         f"input, whose shape is {tuple(x_shape)}")
    for name, spec in (("weight", w_spec), ("bias", b_spec)):
        if spec is not None:
            if tuple(spec[0]) != ns:
                raise ShapeError(f"layer_norm: {name} has shape {tuple(spec[0])}; expected normalized_shape {ns}")
            if np.dtype(spec[1]) != dt:
                raise ShapeError(f"layer_norm: {name} is {np.dtype(spec[1])} and the input {dt}; they must match")
    return int(np.prod(ns))


def _run_rows(kernel, x, params, t: RowTiling, chip, mode, *extra):
    y = np.zeros_like(x)
    flat = [None if p is None else np.ascontiguousarray(p).reshape(-1) for p in params]
    args = [np.ascontiguousarray(x).reshape(-1), *flat, y.reshape(-1), t, *extra]
    k = 1 + len(params)                     # y: the launcher's own array, written in place
    outs, trace = lang.launch(kernel, t.block_dim, *args, chip=chip, mode=mode, core_type="aiv",
                              donate=(k,), outputs=(k,))
    out = outs[k]
    return (out.reshape(x.shape) if out is not None else None), trace


def launch_layer_norm(x, gamma, beta, t: RowTiling, eps: float, chip=DEFAULT_CHIP, mode="functional"):
    """Run LayerNorm with a tiling the host made; x is (..., cols). Returns (y, trace)."""
    return _run_rows(layer_norm_kernel, x, [gamma, beta], t, chip, mode, float(eps))


# -- RMSNorm ---------------------------------------------------------------------------------
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
    return _run_rows(rms_norm_kernel, x, [gamma], t, chip, mode, float(eps))


# -- BatchNorm (inference) -------------------------------------------------------------------
@dataclass(frozen=True)
class BatchNormTiling:
    """NCHW viewed as N x C planes of H*W; a tile = one image, ``tile_c`` channels, ``tile_hw``
    elements of each plane (rows start on 32-byte blocks in UB: ``row_stride``)."""
    n: int
    c: int
    hw: int
    dtype: str
    tile_c: int          # channels a tile (a multiple of 8, or all of C)
    tile_hw: int         # plane elements a tile
    row_stride: int      # UB elements between the rows of a tile (tile_hw rounded up to a block)
    work_items: int      # N x ceil(C / tile_c) x ceil(HW / tile_hw)
    items_per_block: int
    block_dim: int
    buffer_num: int

    def to_dict(self) -> dict:
        return asdict(self)


def batch_norm_tiling(n: int, c: int, hw: int, dtype, chip=DEFAULT_CHIP, buffer_num: int = 2) -> BatchNormTiling:
    chip = get_chip(chip)
    dt = check_float("BatchNorm", "input", dtype)
    if min(n, c, hw) < 1:
        raise ShapeError(f"BatchNorm: empty input (N, C, H*W) = ({n}, {c}, {hw})")
    per_block = BLOCK_BYTES // dt.itemsize
    c_al = round_up(c, 8)
    fixed = 4 * round_up(c * dt.itemsize, BLOCK_BYTES) + 6 * c_al * 4 + 16 * BLOCK_BYTES
    free = chip.buffers.ub - fixed
    per_elem = 2 * buffer_num * dt.itemsize + (4 if dt != F32 else 0)
    if free < 8 * per_block * per_elem:
        raise ShapeError(f"BatchNorm: {c} channels need {fixed:,} B of UB for the statistics and "
                         f"chip '{chip.name}' has {chip.buffers.ub:,} B")
    elems = free // per_elem                          # tile_c x row_stride elements at most
    hw_al = round_up(hw, per_block)
    tile_c = c if c * hw_al <= elems else max(8, min(c, elems // hw_al) // 8 * 8)
    if tile_c > c:
        tile_c = c
    tile_hw = hw if tile_c * hw_al <= elems else max(per_block, (elems // tile_c) // per_block * per_block)
    row_stride = round_up(tile_hw, per_block)
    items = n * ceil_div(c, tile_c) * ceil_div(hw, tile_hw)
    ipb = ceil_div(items, chip.cores_for("aiv"))
    return BatchNormTiling(n, c, hw, dt.name, tile_c, tile_hw, row_stride, items, ipb,
                           ceil_div(items, ipb), buffer_num)


def setup_item_kernel(k, x, y, t, tile: int) -> None:
    """The set-up every work-item vector kernel starts with (BatchNorm here, Softmax's RA form):
    on ``k``, this block's share of ``t.work_items`` (``first``, ``count``), a TPipe, the in and
    out queues of ``tile`` elements with ``t.buffer_num`` slots, and an fp32 tile ``x32`` when
    the dtype is widened."""
    k.t, k.x_gm, k.y_gm = t, x, y
    k.dtype = np.dtype(t.dtype)
    k.wide = k.dtype != F32
    k.first = get_block_idx() * t.items_per_block
    k.count = max(0, min(t.items_per_block, t.work_items - k.first))
    k.pipe = TPipe()
    k.in_x, k.out_y = Queue(VECIN, "in_x"), Queue(VECOUT, "out_y")
    k.pipe.init_buffer(k.in_x, t.buffer_num, tile * k.dtype.itemsize)
    k.pipe.init_buffer(k.out_y, t.buffer_num, tile * k.dtype.itemsize)
    if k.wide:
        w = TBuf(VECCALC, "x32")
        k.pipe.init_buffer(w, tile * 4)
        k.x32 = w.get(F32)


class KernelBatchNorm:
    """y[n, c] = x[n, c] * a[c] + b[c], a = weight / sqrt(var + eps), b = bias - mean * a
    (a and b computed on the vector unit once a block)."""

    def __init__(self, x, mean, var, weight, bias, y, t: BatchNormTiling, eps: float):
        self.eps = eps
        setup_item_kernel(self, x, y, t, t.tile_c * t.row_stride)
        self.params(mean, var, weight, bias)

    def params(self, mean, var, weight, bias):
        c = self.t.c
        item = self.dtype.itemsize
        span = round_up(c * item, BLOCK_BYTES) // item
        c8 = round_up(c, 8)
        q = Queue(VECIN, "in_stats")
        self.pipe.init_buffer(q, 1, 4 * span * item)
        raw = q.alloc_tensor(self.dtype)
        for k, g in enumerate((mean, var, weight, bias)):
            if g is not None:
                copy(raw[k * span:], g, c)
        q.enque(raw)
        raw = q.deque()
        buf = TBuf(VECCALC, "scale_shift")
        self.pipe.init_buffer(buf, 6 * c8 * 4)
        p = buf.get(F32)
        m32, v32, a, b, w32, b32 = (p[k * c8:] for k in range(6))

        def widen(dst, k):                                       # parameter k as fp32
            if self.wide:
                lang.cast(dst, raw[k * span:], "none", c)
            else:
                lang.adds(dst, raw[k * span:], 0.0, c)
        widen(m32, 0)
        widen(v32, 1)
        lang.adds(v32, v32, self.eps, c)
        lang.sqrt(v32, v32, c)
        lang.reciprocal(a, v32, c)                                # a = 1 / sqrt(var + eps)
        if weight is not None:
            widen(w32, 2)
            lang.mul(a, a, w32, c)                                # a = weight / sqrt(var + eps)
        lang.mul(b, m32, a, c)
        lang.muls(b, b, -1.0, c)                                  # b = -mean * a
        if bias is not None:
            widen(b32, 3)
            lang.add(b, b, b32, c)                                # b = bias - mean * a
        q.free_tensor(raw)
        self.a, self.b = a, b

    def _item(self, k):
        t = self.t
        nc = ceil_div(t.c, t.tile_c)
        nh = ceil_div(t.hw, t.tile_hw)
        n, rest = divmod(k, nc * nh)
        ci, hi = divmod(rest, nh)
        c0, h0 = ci * t.tile_c, hi * t.tile_hw
        return n, c0, min(t.tile_c, t.c - c0), h0, min(t.tile_hw, t.hw - h0)

    def process(self):
        t = self.t
        for k in range(self.first, self.first + self.count):
            n, c0, nc, h0, nh = self._item(k)
            base = (n * t.c + c0) * t.hw + h0
            x = self.in_x.alloc_tensor(self.dtype)
            if nh == t.hw and t.row_stride == t.hw:
                copy(x, self.x_gm[base:], nc * t.hw)               # whole planes: one copy
            else:
                for r in range(nc):
                    copy(x[r * t.row_stride:], self.x_gm[base + r * t.hw:], nh)
            self.in_x.enque(x)
            x = self.in_x.deque()
            y = self.out_y.alloc_tensor(self.dtype)
            src, dst = (self.x32, self.x32) if self.wide else (x, y)
            if self.wide:
                lang.cast(self.x32, x, "none", (nc - 1) * t.row_stride + nh)
            lang.mul_per_row(dst, src, self.a[c0:], nc, nh, t.row_stride)
            lang.add_per_row(dst, dst, self.b[c0:], nc, nh, t.row_stride)
            if self.wide:
                lang.cast(y, self.x32, "rint", (nc - 1) * t.row_stride + nh)
            self.in_x.free_tensor(x)
            self.out_y.enque(y)
            y = self.out_y.deque()
            if nh == t.hw and t.row_stride == t.hw:
                copy(self.y_gm[base:], y, nc * t.hw)
            else:
                for r in range(nc):
                    copy(self.y_gm[base + r * t.hw:], y[r * t.row_stride:], nh)
            self.out_y.free_tensor(y)


def batch_norm_kernel(x, mean, var, weight, bias, y, t: BatchNormTiling, eps: float) -> None:
    KernelBatchNorm(x, mean, var, weight, bias, y, t, eps).process()


def launch_batch_norm(x, mean, var, weight, bias, t: BatchNormTiling, eps: float, chip=DEFAULT_CHIP,
                      mode="functional"):
    """x: (N, C, *spatial). Returns (y, trace)."""
    y = np.zeros_like(x)
    flat = [None if p is None else np.ascontiguousarray(p).reshape(-1) for p in (mean, var, weight, bias)]
    outs, trace = lang.launch(batch_norm_kernel, t.block_dim, np.ascontiguousarray(x).reshape(-1), *flat,
                              y.reshape(-1), t, float(eps), chip=chip, mode=mode, core_type="aiv",
                              donate=(5,), outputs=(5,))
    return (outs[5].reshape(x.shape) if outs[5] is not None else None), trace
