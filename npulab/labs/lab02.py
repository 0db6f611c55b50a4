"""Lab 02 (a first kernel): the inputs, the runs and the kernels its exercises grade against.

* :func:`inputs`: the seeded fp16 vectors every run of the lab uses;
* :func:`run_kernel_class`: launch a KernelAdd-shaped class (CopyIn / Compute / CopyOut) the way
  ``launch_add`` launches the package's own;
* :func:`show_stages`: the source of KernelAdd's stages but Compute, which exercise 1 writes;
* :func:`scratch`: UB scratch space (a TBuf) cut into named fp16 tensors, for kernels that set
  their flags by hand;
* :func:`add_one_tile_racy`: a one-tile Add that sets its flags by hand and forgets one, for
  the race-repair exercise (:func:`race_message` shows what the race detector says, without
  the repair it suggests: that is the exercise);
* :func:`largest_tile`: the tile exercise 4 asks for (the largest whose queues fit UB);
* :func:`measure`: the cycles of Add for a few tile sizes and buffer counts;
* :func:`run_stream`, :func:`add_stream_serial`: the challenge's many-tile Add with hand-set
  flags, and its correct but serial first version.
"""
from __future__ import annotations

import inspect
from collections import Counter

import numpy as np

from .. import lang
from ..arch import BLOCK_BYTES
from ..chips import get_chip
from ..errors import RaceError
from ..kernels.elementwise import QUEUES_PER_TILE, AddTiling, KernelAdd, add_tiling, launch_add
from ..lang import PIPE_MTE2, PIPE_MTE3, PIPE_V, VECCALC, TBuf, TPipe, data_copy, launch, set_flag, wait_flag

CHIP = "teach"
N = 4096                  # the Add the lab runs and the Compute-stage exercise grades
TILE_N = 16384            # the Add the tile exercise grades
RACE_N = 512              # the one-tile Add of the race exercise
STREAM_N = 3712           # the challenge's Add: 7 whole tiles and a tail of 128 elements
STREAM_TILE = 512         # its tile (elements); two slots of x, y, z take 6 KiB of UB
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


def show_stages(cls=KernelAdd, names=("__init__", "process", "copy_in", "copy_out")) -> None:
    """Print the source of ``cls``'s methods ``names``: the kernel as the package writes it."""
    for name in names:
        print(inspect.getsource(getattr(cls, name)))


def scratch(n: int, names=("xu", "yu", "zu")) -> list:
    """UB scratch space for kernels that set their flags by hand: one TBuf (Ascend C ``TBuf``:
    no queue, so no automatic flags) of ``len(names)`` fp16 tensors of ``n`` elements each,
    back to back; returns them in the order of ``names``."""
    pipe = TPipe()
    work = TBuf(VECCALC, "work")
    pipe.init_buffer(work, len(names) * n * 2)
    ub = work.get(np.float16)
    return [ub[k * n:(k + 1) * n] for k in range(len(names))]


def add_one_tile_racy(x, y, z):
    """z = x + y for one tile, in UB scratch space (a TBuf: no queues, so no automatic flags)."""
    n = x.size
    xu, yu, zu = scratch(n)
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


def hazard(err: RaceError) -> str:
    """The race detector's message up to the repair it suggests: which instructions, on which
    pipes, touch which bytes of which buffer in an order nothing enforces."""
    return f"RaceError: {str(err).split(' Fix: ')[0]}"


def race_message(kernel=add_one_tile_racy, run=None) -> str:
    """What the race detector says about ``kernel``, its repair left out ("no race" if it says
    nothing); ``run`` launches it (default :func:`run_one_tile`)."""
    try:
        (run or run_one_tile)(kernel)
    except RaceError as err:
        return hazard(err)
    return "no race"


def print_rates(chip: str = CHIP) -> None:
    """The rates that set how long each pipe of an Add is busy: the copy pipes' bytes per cycle
    and start-up latency, the vector unit's bytes per cycle, GM's bytes per cycle for all cores."""
    c = get_chip(chip)
    p = c.pipes
    print(f"MTE2   (GM -> UB)  {p.mte2_bytes_per_cycle:>4} B/cycle, start-up {p.mte2_startup_cycles} cycles")
    print(f"MTE3   (UB -> GM)  {p.mte3_bytes_per_cycle:>4} B/cycle, start-up {p.mte3_startup_cycles} cycles")
    print(f"VECTOR (UB -> UB)  {c.vector.bytes_per_cycle:>4} B/cycle of each operand, start-up "
          f"{c.vector.startup_cycles} cycles")
    print(f"GM                 {c.memory.gm_bytes_per_cycle:>4} B/cycle, shared by the {c.ai_cores} cores")


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


# -- the challenge: many tiles, flags by hand -------------------------------------------------
def run_stream(kernel, n: int = STREAM_N, chip: str = CHIP):
    """Launch ``kernel(x, y, z)`` on one core over ``n`` seeded fp16 elements; returns
    (z, trace, x, y)."""
    x, y = inputs(n)
    (_, _, z), trace = launch(kernel, 1, x, y, np.zeros_like(x), chip=chip)
    return z, trace, x, y


def stream_tiles(n: int, tile: int = STREAM_TILE):
    """(first element, element count) of each tile of ``n`` elements: the last one is the tail."""
    return [(at, min(tile, n - at)) for at in range(0, n, tile)]


def add_stream_serial(x, y, z):
    """The challenge's first version: correct, but one slot, so every tile waits for the one
    before to leave UB (its z copied out) before its own copies start."""
    tile = STREAM_TILE
    xu, yu, zu = scratch(tile)
    for at, n in stream_tiles(x.size):
        data_copy(xu, x[at:], n)                  # MTE2
        data_copy(yu, y[at:], n)
        set_flag(PIPE_MTE2, PIPE_V, 0)
        wait_flag(PIPE_MTE2, PIPE_V, 0)
        lang.add(zu, xu, yu, n)                   # V
        set_flag(PIPE_V, PIPE_MTE3, 0)
        wait_flag(PIPE_V, PIPE_MTE3, 0)
        data_copy(z[at:], zu, n)                  # MTE3
        set_flag(PIPE_MTE3, PIPE_MTE2, 0)         # z has left: the slot is free again
        wait_flag(PIPE_MTE3, PIPE_MTE2, 0)


def unpaired_flags(trace) -> list[str]:
    """The flags ``trace``'s kernel set more often than it waited on them ("V->MTE2 #0", ...).
    Ascend C wants every SetFlag paired with a WaitFlag (msSanitizer's synchronisation check
    reports the rest): a set left over is still pending when the next kernel starts."""
    names = [str(n) for n in trace.name]
    sets = Counter(n.split(" ", 1)[1] for n in names if n.startswith("set_flag "))
    waits = Counter(n.split(" ", 1)[1] for n in names if n.startswith("wait_flag "))
    return sorted(f for f in sets if sets[f] > waits[f])


def stream_reference_cycles(n: int = STREAM_N, chip: str = CHIP) -> int:
    """Cycles of the package's queue-based Add (two slots per queue, the challenge's tile) on
    one core: what the queues' own flags reach."""
    x, y = inputs(n)
    _, trace = launch_add(x, y, AddTiling(n, n, 1, STREAM_TILE, 2), chip)
    return trace.cycles


# -- the idea's picture -----------------------------------------------------------------------
def draw_stages(buffer_num: int = 2, ax=None):
    """The dataflow of one Add block: x and y in GM, copied by MTE2 into the slots of the queues
    in_x and in_y in UB, added by the vector unit into a slot of out_z, copied by MTE3 to z in GM.
    Each queue has ``buffer_num`` slots; the pipes' colours are the gantt's. Returns the Axes."""
    from matplotlib.patches import FancyArrowPatch, Rectangle

    from ..plot._style import PIPE_COLORS, new_axes
    from ..sim.isa import Pipe
    ax = new_axes(ax, (8, 2.8))

    def box(x0, y0, w, h, text, face):
        ax.add_patch(Rectangle((x0, y0), w, h, facecolor=face, edgecolor="black"))
        ax.text(x0 + w / 2, y0 + h / 2, text, ha="center", va="center", fontsize=9)

    def arrow(a, b, pipe):
        ax.add_patch(FancyArrowPatch(a, b, arrowstyle="-|>", mutation_scale=14, lw=2, color=PIPE_COLORS[pipe]))

    ax.add_patch(Rectangle((2.2, 0.2), 4.6, 3.6, facecolor="#f4f4f4", edgecolor="grey", ls="--"))
    ax.text(4.5, 3.95, "UB (one core)", ha="center", fontsize=9)
    for row, (gm, queue) in enumerate((("x", "in_x"), ("y", "in_y"))):
        y0 = 2.4 - 1.6 * row
        box(0.2, y0, 1.2, 0.8, f"{gm} (GM)", "white")
        for s in range(buffer_num):
            box(2.5 + s * 0.9, y0, 0.8, 0.8, f"{queue}\nslot {s}", "#dce9f5")
        arrow((1.4, y0 + 0.4), (2.5, y0 + 0.4), Pipe.MTE2)
    for s in range(buffer_num):
        box(5.0 + s * 0.9, 1.6, 0.8, 0.8, f"out_z\nslot {s}", "#f9e0c7")
    arrow((2.5 + buffer_num * 0.9, 2.8), (5.0, 2.1), Pipe.V)
    arrow((2.5 + buffer_num * 0.9, 1.2), (5.0, 1.9), Pipe.V)
    box(8.2, 1.6, 1.2, 0.8, "z (GM)", "white")
    arrow((5.0 + buffer_num * 0.9, 2.0), (8.2, 2.0), Pipe.MTE3)
    for x0, label, pipe in ((1.5, "MTE2\n(CopyIn)", Pipe.MTE2), (4.3, "VECTOR\n(Compute)", Pipe.V),
                            (7.4, "MTE3\n(CopyOut)", Pipe.MTE3)):
        ax.text(x0, 0.35 if pipe != Pipe.MTE3 else 2.5, label, ha="center", fontsize=8, color=PIPE_COLORS[pipe])
    ax.set_xlim(0, 9.6)
    ax.set_ylim(0, 4.2)
    ax.set_axis_off()
    return ax
