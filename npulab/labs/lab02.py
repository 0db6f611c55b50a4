"""Lab 02 (a first kernel): the inputs, the runs and the kernels its exercises grade against.

* :func:`inputs`: the seeded fp16 vectors every run of the lab uses;
* :func:`run_kernel_class`: launch a KernelAdd-shaped class (CopyIn / Compute / CopyOut) the way
  ``launch_add`` launches the package's own;
* :func:`add_one_tile_racy`: a one-tile Add that sets its flags by hand and forgets one, for
  the race-repair exercise (:func:`race_message` shows what the race detector says);
* :func:`largest_tile`: the tile exercise 4 asks for (the largest whose queues fit UB);
* :func:`measure`: the cycles of Add for a few tile sizes and buffer counts.
"""
from __future__ import annotations

import numpy as np

from .. import lang
from ..arch import BLOCK_BYTES
from ..chips import get_chip
from ..errors import RaceError
from ..kernels.elementwise import QUEUES_PER_TILE, KernelAdd, add_tiling, launch_add
from ..lang import PIPE_MTE2, PIPE_V, VECCALC, TBuf, TPipe, data_copy, launch, set_flag, wait_flag

CHIP = "teach"
N = 4096                  # the Add the lab runs and the Compute-stage exercise grades
TILE_N = 16384            # the Add the tile exercise grades
RACE_N = 512              # the one-tile Add of the race exercise
SEED = 0


def inputs(n: int = N, seed: int = SEED) -> tuple[np.ndarray, np.ndarray]:
    """x, y: n fp16 values from a seeded generator (the same every run)."""
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(n).astype(np.float16), rng.standard_normal(n).astype(np.float16))


def run_kernel_class(cls=KernelAdd, x=None, y=None, chip: str = CHIP, buffer_num: int = 2):
    """Launch ``cls(x, y, z, tiling).process()`` on every block; returns (z, trace)."""
    if x is None:
        x, y = inputs()
    tiling = add_tiling(x.size, x.dtype, chip, buffer_num)

    def kernel(xg, yg, zg, t):
        cls(xg, yg, zg, t).process()

    (_, _, z, _), trace = launch(kernel, tiling.block_dim, x, y, np.zeros_like(x), tiling, chip=chip)
    return z, trace


def add_one_tile_racy(x, y, z):
    """z = x + y for one tile, in UB scratch space (a TBuf: no queues, so no automatic flags)."""
    n = x.size
    pipe = TPipe()
    work = TBuf(VECCALC, "work")
    pipe.init_buffer(work, 3 * n * 2)
    ub = work.get(np.float16)
    xu, yu, zu = ub[0:n], ub[n:2 * n], ub[2 * n:3 * n]
    data_copy(xu, x, n)                       # MTE2: GM -> UB
    data_copy(yu, y, n)
    set_flag(PIPE_MTE2, PIPE_V, 0)            # the copies in are done ...
    wait_flag(PIPE_MTE2, PIPE_V, 0)           # ... before the vector unit reads
    lang.add(zu, xu, yu, n)                   # V: the add
    data_copy(z, zu, n)                       # MTE3: UB -> GM


def run_one_tile(kernel, n: int = RACE_N, chip: str = CHIP):
    """Launch a one-tile kernel(x, y, z) on one core; returns (z, trace, x, y)."""
    x, y = inputs(n)
    (_, _, z), trace = launch(kernel, 1, x, y, np.zeros_like(x), chip=chip)
    return z, trace, x, y


def race_message(kernel=add_one_tile_racy) -> str:
    """What the race detector says about ``kernel`` ("no race" if it says nothing)."""
    try:
        run_one_tile(kernel)
    except RaceError as err:
        return f"RaceError: {err}"
    return "no race"


def largest_tile(chip: str = CHIP, buffer_num: int = 2, itemsize: int = 2) -> int:
    """The largest tile (elements, whole 32-byte blocks) whose 3 queues x ``buffer_num`` slots
    fit ``chip``'s UB."""
    ub = get_chip(chip).buffers.ub
    return ub // (QUEUES_PER_TILE * buffer_num) // BLOCK_BYTES * BLOCK_BYTES // itemsize


def measure(tiles=(64, 128, 256, 512, 1024), buffer_nums=(1, 2), n: int = TILE_N, chip: str = CHIP):
    """Cycles of Add on ``chip`` for each tile: {"tile", "block" (elements per core), and per
    buffer_num its cycles (None where the tile does not fit)}."""
    from ..errors import BufferOverflowError
    x, y = inputs(n)
    rows = []
    for tile in tiles:
        row = {"tile": tile, "block": add_tiling(n, x.dtype, chip, tile=tile).block_factor}
        for bn in buffer_nums:
            try:
                _, tr = launch_add(x, y, add_tiling(x.size, x.dtype, chip, bn, tile), chip)
                row[bn] = tr.cycles
            except BufferOverflowError:
                row[bn] = None
        rows.append(row)
    return rows


def print_measure(rows, buffer_nums=(1, 2), near: float = 0.01) -> None:
    """The table, then for each buffer_num the fastest tile and the tiles within ``near`` of it."""
    def split(r):
        full, tail = divmod(r["block"], r["tile"])
        return f"{full} + a tail" if tail else f"{full}"

    head = ["tile (elements)", "tiles per block"] + [f"buffer_num={b} cycles" for b in buffer_nums]
    print("  ".join(f"{h:>20}" for h in head))
    for r in rows:
        cells = [f"{r['tile']:,}", split(r)] + ["does not fit" if r[b] is None else f"{r[b]:,}"
                                                for b in buffer_nums]
        print("  ".join(f"{c:>20}" for c in cells))
    for b in buffer_nums:
        ok = [r for r in rows if r[b] is not None]
        best = min(ok, key=lambda r: r[b])
        close = [r for r in ok if r[b] <= best[b] * (1 + near)]
        print(f"buffer_num={b}: fastest tile {best['tile']:,} ({best[b]:,} cycles); within {near:.0%} "
              f"of it: " + ", ".join(f"{r['tile']:,} ({r[b] / best[b] - 1:+.1%})" for r in close))
