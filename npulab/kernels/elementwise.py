"""Element-wise Add in the ops-nn shape: a host tiling function, then a kernel.

What you learn here (lab 02 walks through it):

* the host side splits N elements over the cores (``block_factor``) and each block into UB
  tiles that fit 2 inputs + 1 output, ``buffer_num`` times each; Add is a vector-only kernel,
  launched with ``core_type="aiv"``, so on a split chip (the 910b) its cores are the AIV cores;
* the kernel is CopyIn -> Compute -> CopyOut over queues; with ``buffer_num=2`` MTE2 copies
  tile i+1 while the vector unit adds tile i and MTE3 writes tile i-1;
* tails: a block or a tile whose bytes are not a multiple of 32 moves with ``data_copy_pad``.

Mirrors hicann/ops-nn ``examples/add_example`` (data/FACTS.md, S6).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import lang
from ..arch import BLOCK_BYTES, DEFAULT_CHIP, VECTOR_DTYPES, ceil_div, round_up
from ..chips import ChipSpec, get_chip
from ..errors import ShapeError
from ..lang import VECIN, VECOUT, Queue, TPipe, get_block_idx
from .tiling_data import Tiling
from .vector_base import copy_elements, launch_vector

QUEUES_PER_TILE = 3        # x in, y in, z out
MIN_TILES_PER_BLOCK = 8    # split a block at least this finely so the pipes can overlap (lab 03)


@dataclass(frozen=True)
class AddTiling(Tiling):
    """The TilingData struct the host fills and the kernel reads."""
    total: int          # elements in x (and y, z)
    block_factor: int   # elements per block (the last block may get fewer)
    block_dim: int      # blocks launched
    tile: int           # elements per UB tile (one slot of each queue)
    buffer_num: int     # slots per queue: 2 = double buffering



def add_tiling(n: int, dtype, chip: "ChipSpec | str" = DEFAULT_CHIP, buffer_num: int = 2,
               tile: int | None = None, cores: int | None = None) -> AddTiling:
    """Split ``n`` elements over the chip's vector cores (``chip.cores_for("aiv")``: the AI
    cores of a coupled chip, the AIV cores of a split one), or over ``cores`` of them (a core
    sweep), then each block into UB tiles.

    block_factor = ceil(n / cores) rounded up to a 32-byte block; the UB holds
    QUEUES_PER_TILE x buffer_num slots, so a tile is at most UB / (3 x buffer_num) bytes, and at
    most 1/MIN_TILES_PER_BLOCK of a block so that copies and compute can overlap.
    ``tile`` forces a tile size (elements, multiple of a 32-byte block) for experiments.
    """
    chip = get_chip(chip)
    dt = np.dtype(dtype)
    if n < 1:
        raise ShapeError(f"add_tiling: need at least one element, got n={n}")
    if buffer_num < 1:
        raise ShapeError(f"add_tiling: buffer_num must be at least 1, got {buffer_num}")
    most = chip.cores_for("aiv")
    if cores is not None and not 1 <= cores <= most:
        raise ShapeError(f"add_tiling: cores={cores} must be 1 to the {most} vector cores of chip '{chip.name}'")
    per_block = BLOCK_BYTES // dt.itemsize                 # elements in a 32-byte block
    block_factor = round_up(ceil_div(n, cores or most), per_block)
    block_dim = ceil_div(n, block_factor)
    ub_tile = (chip.buffers.ub // (QUEUES_PER_TILE * buffer_num)) // BLOCK_BYTES * BLOCK_BYTES // dt.itemsize
    if tile is None:
        tile = min(ub_tile, round_up(ceil_div(block_factor, MIN_TILES_PER_BLOCK), per_block))
    elif tile % per_block or tile <= 0:
        raise ShapeError(f"add_tiling: tile={tile} must be a positive multiple of {per_block} "
                         f"elements ({BLOCK_BYTES} bytes of {dt})")
    return AddTiling(n, block_factor, block_dim, tile, buffer_num)


class KernelAdd:
    """One block of z = x + y: Ascend C's KernelAdd, method for method."""

    def __init__(self, x, y, z, tiling: AddTiling):
        t = tiling
        start = get_block_idx() * t.block_factor
        self.length = min(t.block_factor, t.total - start)   # the last block may be short
        self.tile = t.tile
        self.x_gm, self.y_gm, self.z_gm = (g[start: start + self.length] for g in (x, y, z))
        self.dtype = x.dtype
        self.pipe = TPipe()
        self.in_x, self.in_y = Queue(VECIN, "in_x"), Queue(VECIN, "in_y")
        self.out_z = Queue(VECOUT, "out_z")
        for q in (self.in_x, self.in_y, self.out_z):
            self.pipe.init_buffer(q, t.buffer_num, t.tile * self.dtype.itemsize)

    def process(self) -> None:
        for i in range(ceil_div(self.length, self.tile)):
            count = min(self.tile, self.length - i * self.tile)
            self.copy_in(i, count)
            self.compute(count)
            self.copy_out(i, count)

    def copy_in(self, i: int, count: int) -> None:
        x, y = self.in_x.alloc_tensor(self.dtype), self.in_y.alloc_tensor(self.dtype)
        copy_elements(x, self.x_gm[i * self.tile:], count)
        copy_elements(y, self.y_gm[i * self.tile:], count)
        self.in_x.enque(x)
        self.in_y.enque(y)

    def compute(self, count: int) -> None:
        x, y = self.in_x.deque(), self.in_y.deque()
        z = self.out_z.alloc_tensor(self.dtype)
        lang.add(z, x, y, count)
        self.out_z.enque(z)
        self.in_x.free_tensor(x)
        self.in_y.free_tensor(y)

    def copy_out(self, i: int, count: int) -> None:
        z = self.out_z.deque()
        copy_elements(self.z_gm[i * self.tile:], z, count)
        self.out_z.free_tensor(z)


class KernelAddRelu(KernelAdd):
    """z = relu(x + y) in one kernel: the sum is rectified in UB before it leaves (what GE's
    TbeEltwiseFusionPass compiles a residual Add followed by a ReLU into), so it never makes
    the GM round trip a separate Relu launch would."""

    def compute(self, count: int) -> None:
        x, y = self.in_x.deque(), self.in_y.deque()
        z = self.out_z.alloc_tensor(self.dtype)
        lang.add(z, x, y, count)
        lang.relu(z, z, count)
        self.out_z.enque(z)
        self.in_x.free_tensor(x)
        self.in_y.free_tensor(y)


def add_relu_kernel(x, y, z, tiling: AddTiling) -> None:
    KernelAddRelu(x, y, z, tiling).process()


def launch_add_relu(x: np.ndarray, y: np.ndarray, tiling: AddTiling, chip=DEFAULT_CHIP, mode: str = "functional"):
    """Launch the fused Add + ReLU with Add's tiling. Returns (z, trace)."""
    if x.size == 0:
        return np.maximum(x + y, 0), None
    return launch_vector(add_relu_kernel, [x, y], x.shape, x.dtype, tiling, chip=chip, mode=mode)


def add_kernel(x, y, z, tiling: AddTiling) -> None:
    """The kernel entry (``__global__ __aicore__ void add_custom(...)``)."""
    KernelAdd(x, y, z, tiling).process()


def check_add(x_shape, x_dtype, y_shape, y_dtype) -> None:
    """Host-side input checks of Add (same shape, both float16 or both float32)."""
    if tuple(x_shape) != tuple(y_shape):
        raise ShapeError(f"add: x has shape {tuple(x_shape)} and y has {tuple(y_shape)}; they must match")
    if np.dtype(x_dtype) != np.dtype(y_dtype) or np.dtype(x_dtype) not in VECTOR_DTYPES:
        raise ShapeError(f"add: x is {np.dtype(x_dtype)} and y is {np.dtype(y_dtype)}; both must be "
                         f"float16 or both float32")


def launch_add(x: np.ndarray, y: np.ndarray, tiling: AddTiling, chip=DEFAULT_CHIP, mode: str = "functional"):
    """Launch the kernel with a tiling the host already made. Returns (z, trace)."""
    if x.size == 0:
        return x.copy(), None
    return launch_vector(add_kernel, [x, y], x.shape, x.dtype, tiling, chip=chip, mode=mode)


__all__ = ["AddTiling", "add_tiling", "KernelAdd", "KernelAddRelu", "add_kernel", "add_relu_kernel", "launch_add_relu", "check_add", "launch_add", "QUEUES_PER_TILE",
           "MIN_TILES_PER_BLOCK"]
