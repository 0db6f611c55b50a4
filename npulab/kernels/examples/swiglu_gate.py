"""The gate of SwiGLU, ``z = silu(a) * b = a / (1 + exp(-a)) * b``: two inputs, one output, five
vector instructions a tile (two of them slow). Lab 04's challenge double-buffers it.

SwiGLU (the feed-forward block of LLaMA-style models) computes ``silu(x W) * (x V)``; the two
matmuls run on the cube, and this elementwise gate joins their results. With two inputs and an
output it has three queues (``in_a``, ``in_b``, ``out_z``), so a UB of a given size holds a
shorter tile than SiLU's two queues do, and GM carries three bytes for each of SiLU's two.

Like :mod:`npulab.kernels.examples.silu` it computes in fp16, with ``data_copy`` only (the tile
is whole 32-byte blocks) and every tile the same size but the last, so only the slots and the
tile change between runs:

* :class:`GateStages`: CopyIn / Compute / CopyOut of one block; a subclass's ``__init__`` sets
  up the queues, the tile and the block's slices of GM (the tiling is SiLU's,
  :func:`~npulab.kernels.examples.silu.silu_tiling`);
* :class:`GateFirst`: a first version, one slot per queue and a short tile of ``FIRST_TILE``
  elements; :func:`gate_kernel` for any (buffer_num, tile);
* :func:`launch_gate`: launch such a class on every block.
"""
from __future__ import annotations

import numpy as np

from ... import lang
from ...arch import DEFAULT_CHIP
from ...lang import VECIN, VECOUT, Queue, TPipe, data_copy, get_block_idx, launch
from ..elementwise import KernelAdd
from .silu import silu_tiling

QUEUES = 3                # in_a, in_b, out_z
FIRST_TILE = 256          # elements a tile in the first version: 512 B a slot, far below what UB holds


class GateStages:
    """process / copy_in / compute / copy_out of one block; ``__init__`` is the subclass's."""

    #: the tile loop of Add's kernel, unchanged: copy_in, compute, copy_out, tile after tile
    process = KernelAdd.process

    def copy_in(self, i: int, count: int) -> None:
        a, b = self.in_a.alloc_tensor(self.dtype), self.in_b.alloc_tensor(self.dtype)
        data_copy(a, self.a_gm[i * self.tile:], count)          # MTE2: GM -> UB
        data_copy(b, self.b_gm[i * self.tile:], count)
        self.in_a.enque(a)
        self.in_b.enque(b)

    def compute(self, count: int) -> None:
        a, b = self.in_a.deque(), self.in_b.deque()
        z = self.out_z.alloc_tensor(self.dtype)
        lang.muls(z, a, -1.0, count)                          # z = -a
        lang.exp(z, z, count)                                 # z = exp(-a)     (slow)
        lang.adds(z, z, 1.0, count)                           # z = 1 + exp(-a)
        lang.div(z, a, z, count)                              # z = silu(a)     (slow)
        lang.mul(z, z, b, count)                              # z = silu(a) * b
        self.out_z.enque(z)
        self.in_a.free_tensor(a)
        self.in_b.free_tensor(b)

    def copy_out(self, i: int, count: int) -> None:
        z = self.out_z.deque()
        data_copy(self.z_gm[i * self.tile:], z, count)         # MTE3: UB -> GM
        self.out_z.free_tensor(z)


def gate_kernel(buffer_num, tile: int, name: str | None = None) -> type:
    """A GateStages class with ``buffer_num`` slots of ``tile`` elements in each of its three
    queues (or a tuple: the slots of ``in_a``, ``in_b`` and ``out_z``)."""
    slots = tuple(buffer_num) if isinstance(buffer_num, (tuple, list)) else (buffer_num,) * QUEUES

    class Gate(GateStages):
        def __init__(self, a, b, z, tiling):
            start = get_block_idx() * tiling.block_factor
            self.length = min(tiling.block_factor, tiling.total - start)
            self.a_gm, self.b_gm = a[start:start + self.length], b[start:start + self.length]
            self.z_gm = z[start:start + self.length]
            self.dtype = a.dtype
            self.tile = tile
            self.pipe = TPipe()
            self.in_a, self.in_b = Queue(VECIN, "in_a"), Queue(VECIN, "in_b")
            self.out_z = Queue(VECOUT, "out_z")
            for q, n in zip((self.in_a, self.in_b, self.out_z), slots):
                self.pipe.init_buffer(q, n, self.tile * self.dtype.itemsize)

    Gate.__name__ = Gate.__qualname__ = name or f"Gate_bn{'_'.join(map(str, slots))}_tile{tile}"
    return Gate


class GateFirst(GateStages):
    """The first version: one slot per queue, ``FIRST_TILE`` elements a tile."""

    def __init__(self, a, b, z, tiling):
        start = get_block_idx() * tiling.block_factor
        self.length = min(tiling.block_factor, tiling.total - start)
        self.a_gm, self.b_gm = a[start:start + self.length], b[start:start + self.length]
        self.z_gm = z[start:start + self.length]
        self.dtype = a.dtype
        self.tile = FIRST_TILE
        self.pipe = TPipe()
        self.in_a, self.in_b, self.out_z = Queue(VECIN, "in_a"), Queue(VECIN, "in_b"), Queue(VECOUT, "out_z")
        for q in (self.in_a, self.in_b, self.out_z):
            self.pipe.init_buffer(q, 1, self.tile * self.dtype.itemsize)


def launch_gate(cls, a: np.ndarray, b: np.ndarray, chip=DEFAULT_CHIP, mode: str = "functional"):
    """Launch ``cls(a, b, z, tiling).process()`` on every block of SiLU's tiling; returns
    (z, trace)."""
    t = silu_tiling(a.size, chip)

    def kernel(ag, bg, zg, tt):
        cls(ag, bg, zg, tt).process()

    (_, _, z, _), trace = launch(kernel, t.block_dim, a, b, np.zeros_like(a), t, chip=chip, mode=mode)
    return z, trace


__all__ = ["QUEUES", "FIRST_TILE", "GateStages", "GateFirst", "gate_kernel", "launch_gate"]
