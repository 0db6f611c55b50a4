"""RMSNorm of rows too long for the UB: each row streamed through in chunks, twice (lab 07's
challenge).

A row kernel (:mod:`npulab.kernels.rows`) keeps whole rows in a tile, so a row's statistic is
one reduction inside the UB. When one fp16 row with its slots and its fp32 copies does not fit
(16,384 values on the 910 need more than its 256 KiB), the row is cut into chunks of ``chunk``
values and read twice: the first pass sums the squares of every chunk into one fp32 value a
row, the second scales each chunk by that row's 1 / rms and gamma and writes it out. ops-nn's
RmsNorm does the same for long rows (``op_kernel/rms_norm_split_d.h``, KernelRmsNormSplitD, which
its host tiling picks with tiling key 1, RMSNORM_TILING_SPILT_D).

It is simpler than the package's RMSNorm: one row at a time (no 2-D instructions over a tile
of rows), no ramp at the ends of a block, gamma held in UB as fp32 for the whole run.

* :class:`ChunkTiling`, :func:`chunk_tiling`: rows over the cores, the chunk size;
* :func:`chunk_ub_bytes`: the UB the kernel reserves for a chunk size;
* :class:`KernelRmsNormChunked`: one block (``load`` / ``store`` move one chunk, ``process``
  is the two passes); :func:`launch_rms_norm_chunked`: every block, on numpy arrays.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ... import lang
from ...arch import BLOCK_BYTES, F32, ceil_div, round_up
from ...chips import get_chip
from ...errors import ShapeError
from ...lang import VECCALC, VECIN, VECOUT, Queue, TBuf, TPipe, get_block_idx
from ..tiling_data import Tiling
from ..vector_base import check_float, copy_elements, launch_vector

BUFFER_NUM = 2          # slots of the in and out queues: a chunk's copy overlaps the one before's compute


@dataclass(frozen=True)
class ChunkTiling(Tiling):
    """TilingData of the chunked RMSNorm: whole rows per core, ``chunk`` values of a row a tile."""
    rows: int
    cols: int
    dtype: str
    block_factor: int    # rows a block (the last block may get fewer)
    block_dim: int       # blocks launched
    chunk: int           # values of a row in one UB tile (the last chunk of a row may be shorter)
    buffer_num: int = BUFFER_NUM


def chunk_ub_bytes(chunk: int, cols: int, dtype, buffer_num: int = BUFFER_NUM) -> int:
    """UB bytes KernelRmsNormChunked reserves: ``buffer_num`` in and out slots of ``chunk``
    ``dtype`` values, one fp32 chunk to compute in, gamma as fp32 (a whole row) and two fp32
    per-row values (the running sum and a chunk's partial sum), each in whole 32-byte blocks."""
    item = np.dtype(dtype).itemsize
    slot = round_up(chunk * item, BLOCK_BYTES)
    return (2 * buffer_num * slot + round_up(chunk * 4, BLOCK_BYTES) + round_up(cols * 4, BLOCK_BYTES)
            + 2 * BLOCK_BYTES)


def chunk_tiling(rows: int, cols: int, dtype, chip, chunk: int, buffer_num: int = BUFFER_NUM) -> ChunkTiling:
    """Split ``rows`` over the chip's vector cores; each row runs in chunks of ``chunk`` values
    (a multiple of 16, so every chunk starts on a 32-byte block in fp16 and fp32)."""
    chip = get_chip(chip)
    dt = check_float("RMSNorm (chunked)", "input", dtype)
    if chunk < 16 or chunk % 16:
        raise ShapeError(f"RMSNorm (chunked): chunk={chunk} must be a positive multiple of 16 (whole 32-byte "
                         f"blocks of fp16)")
    block_factor = ceil_div(rows, chip.cores_for("aiv"))
    return ChunkTiling(rows, cols, dt.name, block_factor, ceil_div(rows, block_factor), min(chunk, cols),
                       buffer_num)


class KernelRmsNormChunked:
    """One block of y = x / sqrt(mean(x^2) + eps) * gamma, rows streamed in chunks.

    UB holds the in and out queues (``buffer_num`` slots of a chunk each), ``x32`` (one chunk in
    fp32, where every chunk is computed), ``gamma`` (fp32, the whole row, loaded once) and two
    per-row fp32 values, ``acc`` and ``part`` (32 bytes apart: vector operands start on blocks).
    ``CHUNK`` is the chunk size its host side asks for (:func:`chunk_tiling`).
    """
    CHUNK = 8192        # rows of 16,384 fp16 values on the 910: two chunks a row, the largest
                        # power of two whose chunk_ub_bytes fit its 256 KiB UB

    def __init__(self, x, gamma, y, t: ChunkTiling, eps: float):
        self.t, self.cols, self.chunk, self.eps = t, t.cols, t.chunk, eps
        start = get_block_idx() * t.block_factor
        self.nrows = min(t.block_factor, t.rows - start)
        self.x_gm = x[start * t.cols:(start + self.nrows) * t.cols]
        self.y_gm = y[start * t.cols:(start + self.nrows) * t.cols]
        self.dtype = np.dtype(t.dtype)
        self.pipe = TPipe()
        self.in_x, self.out_y = Queue(VECIN, "in_x"), Queue(VECOUT, "out_y")
        slot = round_up(t.chunk * self.dtype.itemsize, BLOCK_BYTES)
        self.pipe.init_buffer(self.in_x, t.buffer_num, slot)
        self.pipe.init_buffer(self.out_y, t.buffer_num, slot)
        bufs = {}
        for name, nbytes in (("x32", round_up(t.chunk * 4, BLOCK_BYTES)), ("gamma32", round_up(t.cols * 4, BLOCK_BYTES)),
                             ("stats", 2 * BLOCK_BYTES)):
            b = TBuf(VECCALC, name)
            self.pipe.init_buffer(b, nbytes)
            bufs[name] = b.get(F32)
        self.x32, self.gamma = bufs["x32"], bufs["gamma32"]
        self.acc, self.part = bufs["stats"], bufs["stats"][BLOCK_BYTES // 4:]
        for c0, w in self.chunks():                    # gamma: through the in queue, widened once
            self.gamma_chunk(gamma, c0, w)

    def chunks(self):
        """(first column, width) of each chunk of a row."""
        return [(c0, min(self.chunk, self.cols - c0)) for c0 in range(0, self.cols, self.chunk)]

    def gamma_chunk(self, gamma, c0: int, w: int) -> None:
        g = self.in_x.alloc_tensor(self.dtype)
        copy_elements(g, gamma[c0:], w)
        self.in_x.enque(g)
        g = self.in_x.deque()
        lang.cast(self.gamma[c0:], g, "none", w)
        self.in_x.free_tensor(g)

    def load(self, r: int, c0: int, w: int):
        """CopyIn and widen: values c0 .. c0 + w of row r into ``x32`` (fp32); returns x32."""
        x = self.in_x.alloc_tensor(self.dtype)
        copy_elements(x, self.x_gm[r * self.cols + c0:], w)
        self.in_x.enque(x)
        x = self.in_x.deque()
        lang.cast(self.x32, x, "none", w)
        self.in_x.free_tensor(x)
        return self.x32

    def store(self, r: int, c0: int, w: int, y32) -> None:
        """Round ``y32`` (w fp32 values) to the output dtype and CopyOut to row r, columns c0 ..."""
        y = self.out_y.alloc_tensor(self.dtype)
        lang.cast(y, y32, "rint", w)
        self.out_y.enque(y)
        y = self.out_y.deque()
        copy_elements(self.y_gm[r * self.cols + c0:], y, w)
        self.out_y.free_tensor(y)

    def process(self) -> None:
        for r in range(self.nrows):
            for k, (c0, w) in enumerate(self.chunks()):   # pass 1: the sum of squares, in fp32
                x32 = self.load(r, c0, w)
                lang.mul(x32, x32, x32, w)
                lang.reduce_sum_rows(self.acc if k == 0 else self.part, x32, 1, w)
                if k:
                    lang.add(self.acc, self.acc, self.part, 1)
            lang.muls(self.acc, self.acc, 1.0 / self.cols, 1)
            lang.adds(self.acc, self.acc, self.eps, 1)
            lang.sqrt(self.acc, self.acc, 1)
            lang.reciprocal(self.acc, self.acc, 1)        # 1 / rms, once a row
            for c0, w in self.chunks():                   # pass 2: read the row again, scale it
                x32 = self.load(r, c0, w)
                lang.mul_per_row(x32, x32, self.acc, 1, w)
                lang.mul(x32, x32, self.gamma[c0:], w)
                self.store(r, c0, w, x32)


def launch_rms_norm_chunked(cls, x: np.ndarray, gamma: np.ndarray, t: ChunkTiling, eps: float, chip,
                            mode: str = "functional"):
    """Launch ``cls`` (KernelRmsNormChunked or a subclass) over x (rows, cols); returns (y, trace)."""
    def kernel(x_gm, g_gm, y_gm, tt, e):
        cls(x_gm, g_gm, y_gm, tt, e).process()

    return launch_vector(kernel, [x, gamma], x.shape, x.dtype, t, float(eps), chip=chip, mode=mode)


__all__ = ["BUFFER_NUM", "ChunkTiling", "chunk_tiling", "chunk_ub_bytes", "KernelRmsNormChunked",
           "launch_rms_norm_chunked"]
