"""Lab 02 (a first kernel): the inputs, the runs and the kernels its exercises grade against.

* :func:`inputs`: the seeded fp16 vectors every run of the lab uses;
* :func:`run_kernel_class`: launch a KernelAdd-shaped class (CopyIn / Compute / CopyOut) the way
  ``run_add`` launches the package's own;
* :func:`add_one_tile_racy`: a one-tile Add that sets its flags by hand and forgets one, for
  the race-repair exercise (:func:`race_message` shows what the race detector says);
* :func:`measure`: the cycles of Add for a few tile sizes and buffer counts.
"""
from __future__ import annotations

import numpy as np

from .. import lang
from ..errors import RaceError
from ..kernels.elementwise import KernelAdd, add_tiling, run_add
from ..lang import (PIPE_MTE2, PIPE_V, VECCALC, Pipe, TBuf, data_copy, launch, set_flag,
                    wait_flag)

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
    pipe = Pipe()
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


def measure(tiles=(64, 128, 256, 512, 1024), buffer_nums=(1, 2), n: int = TILE_N, chip: str = CHIP):
    """Cycles of Add on ``chip`` for each (tile, buffer_num); None where the tile does not fit."""
    from ..errors import BufferOverflowError
    x, y = inputs(n)
    rows = []
    for tile in tiles:
        row = [tile]
        for bn in buffer_nums:
            try:
                _, tr = run_add(x, y, chip=chip, buffer_num=bn, tile=tile)
                row.append(tr.cycles)
            except BufferOverflowError:
                row.append(None)
        rows.append(row)
    return rows


def print_measure(rows, buffer_nums=(1, 2)) -> None:
    head = ["tile (elements)"] + [f"buffer_num={b} cycles" for b in buffer_nums]
    print("  ".join(f"{h:>20}" for h in head))
    for row in rows:
        print("  ".join(f"{('does not fit' if v is None else f'{v:,}'):>20}" for v in row))
