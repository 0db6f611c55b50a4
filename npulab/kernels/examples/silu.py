"""SiLU, ``z = x * sigmoid(x) = x / (1 + exp(-x))``, single and double buffered: the kernels
lab 04 compares, and the stages its exercise keeps while the learner rewrites ``__init__`` to
give each queue two slots.

SiLU rather than Add because its vector work (4 instructions, 2 of them slow) takes about as
long as its copies: with the three pipes balanced, overlapping them matters most. It is simpler
than the package's SiLU (:mod:`npulab.kernels.activation`): it computes in the input's fp16
(no widening to fp32), with one queue slot or two (not three), every tile the same size (no
ramp at the ends of a block) and ``data_copy`` only (the tile is whole 32-byte blocks), so the
only thing that changes between the runs is the slots.

* :class:`SiluTiling`, :func:`silu_tiling`: the host split (blocks over cores, and the UB the
  kernel may use); :func:`ub_tile`: the largest tile whose queues fit it;
* :class:`SiluStages`: CopyIn / Compute / CopyOut of one block; a subclass's ``__init__``
  sets up the queues (``in_x``, ``out_z``), the tile and the block's slice of GM;
* :class:`SiluSingle` (one slot per queue, the whole UB), :class:`SiluDouble` (two slots, half
  the tile each) and :func:`silu_kernel` for any (buffer_num, tile);
* :func:`launch_silu`: launch such a class on every block.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ... import lang
from ...arch import BLOCK_BYTES, DEFAULT_CHIP, ceil_div, round_up
from ...chips import get_chip
from ...lang import VECIN, VECOUT, Queue, TPipe, data_copy, get_block_idx, launch
from ..elementwise import KernelAdd

QUEUES = 2                # in_x, out_z


@dataclass(frozen=True)
class SiluTiling:
    total: int            # elements
    block_factor: int     # elements per block (the last may be short)
    block_dim: int        # blocks
    ub_bytes: int         # UB the kernel may reserve


def silu_tiling(n: int, chip=DEFAULT_CHIP) -> SiluTiling:
    """``n`` elements over the chip's cores in whole 32-byte blocks (fp16), and the chip's UB."""
    c = get_chip(chip)
    bf = round_up(ceil_div(n, c.ai_cores), 16)
    return SiluTiling(n, bf, ceil_div(n, bf), c.buffers.ub)


def ub_tile(ub_bytes: int, buffer_num: int, itemsize: int = 2) -> int:
    """The largest tile (elements) whose 2 queues x ``buffer_num`` slots fit ``ub_bytes``, in
    whole 32-byte blocks: with two slots, half the single-buffered tile."""
    return ub_bytes // (QUEUES * buffer_num) // BLOCK_BYTES * BLOCK_BYTES // itemsize


class SiluStages:
    """process / copy_in / compute / copy_out of one block; ``__init__`` is the subclass's."""

    #: the tile loop of Add's kernel, unchanged: copy_in, compute, copy_out, tile after tile
    process = KernelAdd.process

    def copy_in(self, i: int, count: int) -> None:
        x = self.in_x.alloc_tensor(self.dtype)
        data_copy(x, self.x_gm[i * self.tile:], count)         # MTE2: GM -> UB
        self.in_x.enque(x)

    def compute(self, count: int) -> None:
        x = self.in_x.deque()
        z = self.out_z.alloc_tensor(self.dtype)
        lang.muls(z, x, -1.0, count)                          # z = -x
        lang.exp(z, z, count)                                 # z = exp(-x)    (slow: 4 cycles a repeat)
        lang.adds(z, z, 1.0, count)                           # z = 1 + exp(-x)
        lang.div(z, x, z, count)                              # z = x / (1 + exp(-x))   (slow)
        self.out_z.enque(z)
        self.in_x.free_tensor(x)

    def copy_out(self, i: int, count: int) -> None:
        z = self.out_z.deque()
        data_copy(self.z_gm[i * self.tile:], z, count)         # MTE3: UB -> GM
        self.out_z.free_tensor(z)


class SiluSingle(SiluStages):
    """Single buffered: one slot per queue, each as large as UB allows."""

    def __init__(self, x, z, tiling):
        start = get_block_idx() * tiling.block_factor
        self.length = min(tiling.block_factor, tiling.total - start)
        self.x_gm, self.z_gm = x[start:start + self.length], z[start:start + self.length]
        self.dtype = x.dtype
        self.tile = tiling.ub_bytes // (2 * 1) // 32 * 32 // self.dtype.itemsize   # 2 queues x 1 slot
        self.pipe = TPipe()
        self.in_x, self.out_z = Queue(VECIN, "in_x"), Queue(VECOUT, "out_z")
        self.pipe.init_buffer(self.in_x, 1, self.tile * self.dtype.itemsize)
        self.pipe.init_buffer(self.out_z, 1, self.tile * self.dtype.itemsize)


def silu_kernel(buffer_num: int, tile: int | None = None, name: str | None = None) -> type:
    """A SiluStages class with ``buffer_num`` slots per queue of ``tile`` elements (None: the
    largest that fits the tiling's UB, :func:`ub_tile`)."""

    class Silu(SiluStages):
        def __init__(self, x, z, tiling):
            start = get_block_idx() * tiling.block_factor
            self.length = min(tiling.block_factor, tiling.total - start)
            self.x_gm, self.z_gm = x[start:start + self.length], z[start:start + self.length]
            self.dtype = x.dtype
            self.tile = ub_tile(tiling.ub_bytes, buffer_num, self.dtype.itemsize) if tile is None else tile
            self.pipe = TPipe()
            self.in_x, self.out_z = Queue(VECIN, "in_x"), Queue(VECOUT, "out_z")
            for q in (self.in_x, self.out_z):
                self.pipe.init_buffer(q, buffer_num, self.tile * self.dtype.itemsize)

    Silu.__name__ = Silu.__qualname__ = name or f"Silu_bn{buffer_num}_tile{tile}"
    return Silu


#: Double buffered: two slots per queue in the same UB, so half the tile (lab 04's exercise 1
#: writes this ``__init__`` out in full)
SiluDouble = silu_kernel(2, name="SiluDouble")


def launch_silu(cls, x: np.ndarray, chip=DEFAULT_CHIP, mode: str = "functional"):
    """Launch ``cls(x, z, tiling).process()`` on every block of :func:`silu_tiling`; returns
    (z, trace)."""
    t = silu_tiling(x.size, chip)

    def kernel(xg, zg, tt):
        cls(xg, zg, tt).process()

    (_, z, _), trace = launch(kernel, t.block_dim, x, np.zeros_like(x), t, chip=chip, mode=mode)
    return z, trace


__all__ = ["QUEUES", "SiluTiling", "silu_tiling", "ub_tile", "SiluStages", "SiluSingle", "SiluDouble",
           "silu_kernel", "launch_silu"]
