"""A GM-to-GM copy, ``y = x``, through the UB: the kernel of lab 00's challenge, where the only
levers are how many cores copy and how many bytes each copy moves.

Nothing is computed, so the time is all data movement, and the chip file's figures predict it:

* one core's MTE2 moves at most ``pipes.mte2_bytes_per_cycle`` a cycle (and its MTE3 as many
  back), while GM sustains ``gm_sustained_bytes_per_cycle`` for the whole chip: a few cores
  cannot fill GM, and past some number of cores they share it;
* every copy lands ``pipes.mte2_startup_cycles`` after it starts: a core whose copies are small
  spends its time waiting for them, not moving bytes.

The kernel is CopyIn / Compute / CopyOut as every vector kernel of the labs: MTE2 copies a tile
GM -> UB into ``in_x``, the vector pipe copies it UB -> UB into ``out_y`` (a copy kernel in
Ascend C can bind one queue to both ends, ``TQueBind<VECIN, VECOUT>``; npulab's queues each
have one producer and one consumer), MTE3 writes it UB -> GM. Each queue has two slots, so the
UB holds :data:`UB_TILES` tiles at once.

* :class:`CopyPlan`: the launch's choices, ``block_dim`` cores and ``tile_bytes`` a copy;
* :func:`check_plan`: a plan the kernel can run (whole 32-byte blocks, the tiles fit the UB);
* :func:`launch_copy`: run the copy of ``x``; returns (y, trace).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...arch import BLOCK_BYTES, DEFAULT_CHIP, ceil_div, round_up
from ...chips import get_chip
from ...errors import ShapeError
from ...lang import VECIN, VECOUT, Queue, TPipe, data_copy, get_block_idx, launch

BUFFER_NUM = 2                       # slots per queue
UB_TILES = 2 * BUFFER_NUM            # in_x and out_y, two slots each


@dataclass(frozen=True)
class CopyPlan:
    """How the copy is launched: ``block_dim`` cores, each copying its share of ``x`` in tiles
    of ``tile_bytes`` (the default: one core, 1 KiB copies, what a first try often is)."""
    block_dim: int = 1
    tile_bytes: int = 1024


def check_plan(plan: CopyPlan, chip=DEFAULT_CHIP) -> None:
    """Raise ShapeError unless ``plan`` can run on ``chip``: a positive ``block_dim`` of at most
    the chip's vector cores, ``tile_bytes`` whole 32-byte blocks whose :data:`UB_TILES` copies
    fit one core's UB."""
    c = get_chip(chip)
    cores = c.cores_for("aiv")
    if not isinstance(plan, CopyPlan):
        raise ShapeError(f"copy: the plan must be a CopyPlan(block_dim, tile_bytes), got {plan!r}")
    bd, tb = plan.block_dim, plan.tile_bytes
    if not isinstance(bd, (int, np.integer)) or isinstance(bd, bool) or not 1 <= bd <= cores:
        raise ShapeError(f"copy: block_dim={bd!r}, expected a whole number from 1 to the {c.name}'s "
                         f"{cores} vector cores")
    if not isinstance(tb, (int, np.integer)) or isinstance(tb, bool) or tb <= 0 or tb % BLOCK_BYTES:
        raise ShapeError(f"copy: tile_bytes={tb!r}, expected a positive multiple of {BLOCK_BYTES} "
                         f"(copies move whole 32-byte blocks)")
    if UB_TILES * tb > c.buffers.ub:
        raise ShapeError(f"copy: {UB_TILES} tiles of {tb:,} B need {UB_TILES * tb:,} B of UB and the "
                         f"{c.name}'s UB has {c.buffers.ub:,} B: lower tile_bytes")


class KernelCopy:
    """One block of y = x: its slice of GM, tile after tile."""

    def __init__(self, x, y, plan: CopyPlan, per_block: int):
        start = get_block_idx() * per_block
        self.length = max(0, min(per_block, x.size - start))
        self.x_gm, self.y_gm = x[start:start + self.length], y[start:start + self.length]
        self.dtype = x.dtype
        self.tile = plan.tile_bytes // self.dtype.itemsize
        self.pipe = TPipe()
        self.in_x, self.out_y = Queue(VECIN, "in_x"), Queue(VECOUT, "out_y")
        for q in (self.in_x, self.out_y):
            self.pipe.init_buffer(q, BUFFER_NUM, plan.tile_bytes)

    def process(self) -> None:
        for i in range(ceil_div(self.length, self.tile)):
            count = min(self.tile, self.length - i * self.tile)
            a = self.in_x.alloc_tensor(self.dtype)
            data_copy(a, self.x_gm[i * self.tile:], count)          # MTE2: GM -> UB
            self.in_x.enque(a)
            a = self.in_x.deque()
            b = self.out_y.alloc_tensor(self.dtype)
            data_copy(b, a, count)                                   # V: UB -> UB
            self.out_y.enque(b)
            self.in_x.free_tensor(a)
            b = self.out_y.deque()
            data_copy(self.y_gm[i * self.tile:], b, count)          # MTE3: UB -> GM
            self.out_y.free_tensor(b)


def launch_copy(x: np.ndarray, plan: CopyPlan = CopyPlan(), chip=DEFAULT_CHIP, mode: str = "timing"):
    """Copy ``x`` (1-D, whole 32-byte blocks a core) on ``chip`` with ``plan``; returns (y, trace).
    Each core's share is rounded up to whole tiles' worth of blocks, the last core takes the rest."""
    check_plan(plan, chip)
    x = np.ascontiguousarray(x).reshape(-1)
    per_block = round_up(ceil_div(x.size, plan.block_dim), BLOCK_BYTES // x.dtype.itemsize)
    if x.nbytes % BLOCK_BYTES:
        raise ShapeError(f"copy: x has {x.nbytes:,} B, expected whole {BLOCK_BYTES}-byte blocks")

    def kernel(xg, yg, p):
        KernelCopy(xg, yg, p, per_block).process()

    (_, y, _), trace = launch(kernel, ceil_div(x.size, per_block), x, np.zeros_like(x), plan, chip=chip,
                              mode=mode, core_type="aiv")
    return y, trace


__all__ = ["BUFFER_NUM", "UB_TILES", "CopyPlan", "check_plan", "KernelCopy", "launch_copy"]
