"""Lab 04 (double buffering): a SiLU kernel single and double buffered, and the runs the lab
compares.

SiLU (``z = x * sigmoid(x) = x / (1 + exp(-x))``, the activation of SwiGLU) is used rather
than Add because its vector work (4 instructions, 2 of them slow) takes about as long as its
copies: with the three pipes balanced, overlapping them matters most.

* :class:`SiluTiling`, :func:`silu_tiling`: the host split (blocks over cores, and the UB the
  kernel may use);
* :class:`SiluStages`: CopyIn / Compute / CopyOut of one block; a subclass's ``__init__``
  sets up the queues (``in_x``, ``out_z``), the tile and the block's slice of GM;
* :class:`SiluSingle` (one slot per queue, the whole UB) and :class:`SiluDouble` (two slots,
  half the tile each), and :func:`silu_kernel` for any (buffer_num, tile);
* :func:`run_silu`, :func:`compare`, :func:`stall_table`, :func:`print_waits`, :func:`ub_plan`,
  :func:`measure`; :func:`slots`, :func:`slot_bytes`, :func:`copies_in` read a kernel's queues
  off its trace (exercise 1's check).
"""
from __future__ import annotations

import inspect
import textwrap
from dataclasses import dataclass

import numpy as np

from .. import lang
from ..arch import BLOCK_BYTES, ceil_div, round_up
from ..chips import get_chip
from ..kernels.elementwise import add_tiling, launch_add
from ..lang import VECIN, VECOUT, Queue, TPipe, data_copy, get_block_idx, launch

CHIP = "teach"
N = 65536                 # elements of the SiLU every run of the lab computes
SEED = 0
QUEUES = 2                # in_x, out_z


@dataclass(frozen=True)
class SiluTiling:
    total: int            # elements
    block_factor: int     # elements per block (the last may be short)
    block_dim: int        # blocks
    ub_bytes: int         # UB the kernel may reserve


def silu_tiling(n: int, chip=CHIP) -> SiluTiling:
    c = get_chip(chip)
    bf = round_up(ceil_div(n, c.ai_cores), 16)
    return SiluTiling(n, bf, ceil_div(n, bf), c.buffers.ub)


def inputs(n: int = N, seed: int = SEED) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(n).astype(np.float16)


def silu_numpy(x: np.ndarray) -> np.ndarray:
    """The reference in float32, rounded once to fp16."""
    x32 = x.astype(np.float32)
    return (x32 / (1 + np.exp(-x32))).astype(np.float16)


class SiluStages:
    """process / copy_in / compute / copy_out of one block; ``__init__`` is the subclass's."""

    def process(self) -> None:
        for i in range(ceil_div(self.length, self.tile)):
            count = min(self.tile, self.length - i * self.tile)
            self.copy_in(i, count)
            self.compute(count)
            self.copy_out(i, count)

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


class SiluDouble(SiluStages):
    """Double buffered: two slots per queue in the same UB, so half the tile."""

    def __init__(self, x, z, tiling):
        start = get_block_idx() * tiling.block_factor
        self.length = min(tiling.block_factor, tiling.total - start)
        self.x_gm, self.z_gm = x[start:start + self.length], z[start:start + self.length]
        self.dtype = x.dtype
        self.tile = tiling.ub_bytes // (2 * 2) // 32 * 32 // self.dtype.itemsize   # 2 queues x 2 slots
        self.pipe = TPipe()
        self.in_x, self.out_z = Queue(VECIN, "in_x"), Queue(VECOUT, "out_z")
        self.pipe.init_buffer(self.in_x, 2, self.tile * self.dtype.itemsize)
        self.pipe.init_buffer(self.out_z, 2, self.tile * self.dtype.itemsize)


def silu_kernel(buffer_num: int, tile: int) -> type:
    """A SiluStages class with ``buffer_num`` slots per queue of ``tile`` elements."""

    class Silu(SiluStages):
        def __init__(self, x, z, tiling):
            start = get_block_idx() * tiling.block_factor
            self.length = min(tiling.block_factor, tiling.total - start)
            self.x_gm, self.z_gm = x[start:start + self.length], z[start:start + self.length]
            self.dtype, self.tile = x.dtype, tile
            self.pipe = TPipe()
            self.in_x, self.out_z = Queue(VECIN, "in_x"), Queue(VECOUT, "out_z")
            for q in (self.in_x, self.out_z):
                self.pipe.init_buffer(q, buffer_num, tile * self.dtype.itemsize)

    Silu.__name__ = f"Silu_bn{buffer_num}_tile{tile}"
    return Silu


def run_silu(cls, x: np.ndarray | None = None, chip=CHIP, mode: str = "functional"):
    """Launch ``cls(x, z, tiling).process()`` on every block; returns (z, trace)."""
    x = inputs() if x is None else x
    t = silu_tiling(x.size, chip)

    def kernel(xg, zg, tt):
        cls(xg, zg, tt).process()

    (_, z, _), trace = launch(kernel, t.block_dim, x, np.zeros_like(x), t, chip=chip, mode=mode)
    return z, trace


def show(obj) -> None:
    """Print the source of a function or class of this module."""
    print(textwrap.dedent(inspect.getsource(obj)))


def slots(trace, core: int = 0) -> dict:
    """{queue: slots it used} from the trace's allocations (owner names like 'in_x[1]')."""
    out: dict[str, set] = {}
    for a in trace.allocations:
        if a.core == core and "[" in a.owner:
            name, idx = a.owner.rstrip("]").split("[")
            out.setdefault(name, set()).add(int(idx))
    return {k: len(v) for k, v in sorted(out.items())}


def slot_bytes(trace, core: int = 0) -> dict:
    """{queue: bytes of its largest slot} from the trace's allocations."""
    out: dict[str, int] = {}
    for a in trace.allocations:
        if a.core == core and "[" in a.owner:
            name = a.owner.split("[")[0]
            out[name] = max(out.get(name, 0), a.size)
    return dict(sorted(out.items()))


def copies_in(trace, core: int = 0) -> int:
    """How many GM -> UB copies (one per tile) ``core`` issued."""
    return sum(1 for i in range(len(trace)) if trace.core[i] == core and trace.name[i].startswith("data_copy GM->UB"))


def double_tile(ub_bytes: int, itemsize: int = 2) -> int:
    """The double-buffered tile (elements): 2 queues x 2 slots share UB, in whole 32-byte blocks;
    half the single-buffered tile."""
    return ub_bytes // (QUEUES * 2) // BLOCK_BYTES * BLOCK_BYTES // itemsize


def compare(tile: int | None = None):
    """SiLU single and double buffered at the same tile (default: the double-buffered one's):
    {buffer_num: trace}."""
    tile = tile or get_chip(CHIP).buffers.ub // (QUEUES * 2) // BLOCK_BYTES * BLOCK_BYTES // 2
    x = inputs()
    out = {}
    for bn in (1, 2):
        z, tr = run_silu(silu_kernel(bn, tile), x)
        out[bn] = tr
    return out


def stall_table(trace, core: int = 0) -> str:
    from ..plot import pipe_time, pipe_time_table
    return pipe_time_table(pipe_time(trace, core))


def print_waits(runs: dict, waits=(("MTE2", "release in_x"), ("VECTOR", "release out_z"),
                                    ("VECTOR", "pipe_barrier V (auto) (wait)")), core: int = 0) -> None:
    """Cycles each (pipe, reason) of ``waits`` stalled ``core``, in each run of ``runs``
    ({buffer_num: trace}), and each run's cycles."""
    from ..plot import pipe_time
    per = {bn: {r["pipe"]: r["waits"] for r in pipe_time(tr, core)} for bn, tr in runs.items()}
    w = max(len(f"{p} {r}") for p, r in waits)
    print(f"{'cycles on core ' + str(core):<{w}}" + "".join(f"  {'buffer_num=' + str(bn):>12}" for bn in runs))
    for pipe, reason in waits:
        print(f"{pipe + ' ' + reason:<{w}}" + "".join(f"  {per[bn].get(pipe, {}).get(reason, 0):>12,}" for bn in runs))
    print(f"{'the whole run':<{w}}" + "".join(f"  {tr.cycles:>12,}" for tr in runs.values()))


def ub_plan(trace, core: int = 0, until: int | None = None) -> list:
    """The UB allocations of one core as a memory plan: (name, start, end, offset, size);
    ``until``: only the first cycles (allocations starting later dropped, the others cut)."""
    end = until if until is not None else trace.cycles + 1
    return [(a.owner, a.start, min(a.end, end), a.offset, a.size) for a in trace.allocations
            if a.core == core and a.buffer == "UB" and a.start < end]


def measure() -> list[dict]:
    """Cycles and pipe utilization of SiLU and Add (65,536 fp16 on the teaching chip) for
    buffer_num 1, 2, 3 with the largest tile each fits in UB."""
    ub = get_chip(CHIP).buffers.ub
    x = inputs()
    rows = []
    for bn in (1, 2, 3):
        tile = ub // (QUEUES * bn) // BLOCK_BYTES * BLOCK_BYTES // 2
        _, tr = run_silu(silu_kernel(bn, tile), x)
        rows.append(_row("SiLU", bn, tile, tr))
    y = inputs(seed=1)
    for bn in (1, 2, 3):
        tile = ub // (3 * bn) // BLOCK_BYTES * BLOCK_BYTES // 2
        _, tr = launch_add(x, y, add_tiling(x.size, x.dtype, CHIP, bn, tile), CHIP)
        rows.append(_row("Add", bn, tile, tr))
    return rows


def _row(op, bn, tile, tr) -> dict:
    r = tr.pipe_ratios()
    return {"op": op, "buffer_num": bn, "tile": tile, "cycles": tr.cycles,
            "mte2": r["mte2_ratio"], "vector": r["vec_ratio"], "mte3": r["mte3_ratio"]}


def print_measure(rows) -> None:
    print(f"{'op':<5} {'buffer_num':>10} {'tile':>6} {'cycles':>8}   {'MTE2':>5} {'VECTOR':>6} {'MTE3':>5}")
    for r in rows:
        base = next(b for b in rows if b["op"] == r["op"] and b["buffer_num"] == 1)
        print(f"{r['op']:<5} {r['buffer_num']:>10} {r['tile']:>6} {r['cycles']:>8,}   {r['mte2']:>5.0%} "
              f"{r['vector']:>6.0%} {r['mte3']:>5.0%}   {base['cycles'] / r['cycles']:.2f}x")
