"""y = p(x) = c[0] + c[1] x + ... + c[D] x^D element-wise in fp16: lab 01's challenge, where a
compute-bound vector kernel gets faster only by issuing fewer passes over its tile.

The kernel is CopyIn / Compute / CopyOut over queues of two slots (lab 02 and 04 take that
apart); what changes between runs is the *body*, the vector instructions Compute issues on one
tile: ``body(y, x, work, consts, count)`` writes p(x) into ``y`` for the first ``count``
elements of the tile ``x``, with

* ``work``: two scratch tiles of the tile's size (fp16, UB);
* ``consts``: one tensor per coefficient, ``consts[k]`` one repeat (256 bytes) holding
  ``COEFFS[k]`` everywhere, filled once per block by ``duplicate`` (what
  ``lang.fused_mul_add_const`` takes);
* the coefficients as numbers: :data:`COEFFS` (lowest degree first), the Taylor series of
  ``exp`` to degree :data:`DEGREE`, so the result is easy to check (|x| <= 1).

Every instruction of a body is one pass over the tile: its cost is its repeats, whatever it
computes, so the passes a body issues set its time once the copies are hidden.

* :func:`power_form`: the textbook sum of c[k] x^k, three passes a degree;
* :func:`poly_tiling`, :class:`KernelPoly`, :func:`launch_poly`: the host split and the kernel.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

from ... import lang
from ...arch import BLOCK_BYTES, DEFAULT_CHIP, ceil_div, round_up
from ...chips import get_chip
from ...errors import ShapeError
from ...lang import VECCALC, VECIN, VECOUT, Queue, TBuf, TPipe, get_block_idx, launch

DEGREE = 15
COEFFS = tuple(1.0 / math.factorial(k) for k in range(DEGREE + 1))    # exp(x) = sum x^k / k!
BUFFER_NUM = 2           # slots of in_x and out_y
WORK_TILES = 2           # scratch tiles a body may use
TILES_PER_BLOCK = 4      # a block is cut into at least this many tiles, so copies overlap compute


def power_form(y, x, work, consts, count: int) -> None:
    """y = c0 + c1 x + c2 x^2 + ...: keep the power p = x^k and add c[k] p, degree by degree.
    Three instructions a degree (Muls, Add, Mul), so 3 D passes over the tile."""
    p, t = work
    lang.duplicate(y, COEFFS[0], count)           # y = c0
    lang.muls(p, x, 1.0, count)                   # p = x
    for k in range(1, DEGREE + 1):
        lang.muls(t, p, COEFFS[k], count)         # t = c[k] x^k
        lang.add(y, y, t, count)                  # y += t
        if k < DEGREE:
            lang.mul(p, p, x, count)              # p = x^(k+1)


def golden(x: np.ndarray) -> np.ndarray:
    """p(x) in float64 (the reference the check compares with)."""
    return np.polynomial.polynomial.polyval(x.astype(np.float64), COEFFS)


@dataclass(frozen=True)
class PolyTiling:
    total: int           # elements
    block_factor: int    # elements per block (the last may be short)
    block_dim: int       # blocks
    tile: int            # elements per UB tile


def poly_tiling(n: int, chip=DEFAULT_CHIP) -> PolyTiling:
    """``n`` fp16 elements over the chip's vector cores in whole 32-byte blocks; a tile is at
    most what the UB holds (two queues of two slots, two work tiles, the constants) and at most
    1 / TILES_PER_BLOCK of a block."""
    c = get_chip(chip)
    per_block = BLOCK_BYTES // 2
    bf = round_up(ceil_div(n, c.cores_for("aiv")), per_block)
    const_bytes = len(COEFFS) * c.vector.repeat_bytes
    ub_tile = (c.buffers.ub - const_bytes) // (2 * BUFFER_NUM + WORK_TILES) // BLOCK_BYTES * BLOCK_BYTES // 2
    tile = min(ub_tile, round_up(ceil_div(bf, TILES_PER_BLOCK), per_block))
    return PolyTiling(n, bf, ceil_div(n, bf), tile)


class KernelPoly:
    """One block of y = p(x): CopyIn, Compute (``body`` on the tile), CopyOut, tile after tile."""

    def __init__(self, x, y, t: PolyTiling, body: Callable):
        start = get_block_idx() * t.block_factor
        self.length = min(t.block_factor, t.total - start)
        self.x_gm, self.y_gm = x[start:start + self.length], y[start:start + self.length]
        self.tile, self.body = t.tile, body
        self.pipe = TPipe()
        self.in_x, self.out_y = Queue(VECIN, "in_x"), Queue(VECOUT, "out_y")
        for q in (self.in_x, self.out_y):
            self.pipe.init_buffer(q, BUFFER_NUM, self.tile * 2)
        work = TBuf(VECCALC, "work")
        self.pipe.init_buffer(work, WORK_TILES * self.tile * 2)
        w = work.get(np.float16)
        self.work = [w[i * self.tile:(i + 1) * self.tile] for i in range(WORK_TILES)]
        per_repeat = get_chip(lang.running_chip()).vector.repeat_bytes // 2
        consts = TBuf(VECCALC, "consts")
        self.pipe.init_buffer(consts, len(COEFFS) * per_repeat * 2)
        cb = consts.get(np.float16)
        self.consts = [cb[k * per_repeat:(k + 1) * per_repeat] for k in range(len(COEFFS))]
        for k, c in enumerate(COEFFS):
            lang.duplicate(self.consts[k], c, per_repeat)

    def process(self) -> None:
        for i in range(ceil_div(self.length, self.tile)):
            count = min(self.tile, self.length - i * self.tile)
            a = self.in_x.alloc_tensor(np.float16)
            lang.data_copy(a, self.x_gm[i * self.tile:], count)
            self.in_x.enque(a)
            a = self.in_x.deque()
            b = self.out_y.alloc_tensor(np.float16)
            self.body(b, a, self.work, self.consts, count)
            self.out_y.enque(b)
            self.in_x.free_tensor(a)
            b = self.out_y.deque()
            lang.data_copy(self.y_gm[i * self.tile:], b, count)
            self.out_y.free_tensor(b)


def launch_poly(body: Callable, x: np.ndarray, chip=DEFAULT_CHIP, mode: str = "functional"):
    """Run ``body`` as the Compute stage of y = p(x) over ``x`` (fp16, 1-D, whole 32-byte blocks
    a block); returns (y or None in timing mode, trace)."""
    x = np.ascontiguousarray(x, np.float16).reshape(-1)
    if x.size == 0 or x.nbytes % BLOCK_BYTES:
        raise ShapeError(f"poly: x has {x.size} fp16 elements, expected a positive multiple of "
                         f"{BLOCK_BYTES // 2} (whole 32-byte blocks)")
    t = poly_tiling(x.size, chip)

    def kernel(xg, yg, tt):
        KernelPoly(xg, yg, tt, body).process()

    (_, y, _), trace = launch(kernel, t.block_dim, x, np.zeros_like(x), t, chip=chip, mode=mode,
                              core_type="aiv", outputs=(1,))
    return y, trace


__all__ = ["DEGREE", "COEFFS", "BUFFER_NUM", "WORK_TILES", "power_form", "golden", "PolyTiling",
           "poly_tiling", "KernelPoly", "launch_poly"]
