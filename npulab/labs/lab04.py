"""Lab 04 (double buffering): the runs and tables the lab shows, over three example kernels on
the teaching chip:

* SiLU single and double buffered (:mod:`npulab.kernels.examples.silu`), beside Add
  (:mod:`npulab.kernels.elementwise`), for the speed-up the learner predicts from the pipe
  rates (:func:`print_figures`, :func:`speedups`, :func:`compare`);
* SiLU beside Mish (:mod:`npulab.kernels.examples.mish`, vector-heavy) with one to four slots
  at one tile, for how many slots pay (:func:`slot_cycles`, :func:`print_slots`);
* the gate of SwiGLU (:mod:`npulab.kernels.examples.swiglu_gate`, two inputs): a colleague's
  version whose stalls the learner explains (:func:`colleague`), and the first version the
  challenge speeds up (:func:`run_gate`).

:func:`stall_table` and :func:`print_waits` read a trace's waits (:mod:`npulab.plot.queues`
draws its slots and UB plans).
"""
from __future__ import annotations

import functools
import inspect
import textwrap

import numpy as np

from ..arch import BLOCK_BYTES
from ..chips import get_chip
from ..kernels.elementwise import add_tiling, launch_add
from ..kernels.examples.mish import mish_kernel
from ..kernels.examples.silu import launch_silu, silu_kernel, ub_tile
from ..kernels.examples.swiglu_gate import gate_kernel, launch_gate

CHIP = "teach"
N = 65536                 # elements of every run of the lab
SEED = 0
SLOT_TILE = 1024          # the tile at which SiLU and Mish try one to four slots
COLLEAGUE = ((2, 2, 1), 1024)   # the colleague's gate: slots of in_a, in_b, out_z; tile


def inputs(n: int = N, seed: int = SEED) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(n).astype(np.float16)


def print_figures(chip=CHIP) -> None:
    """The chip-file figures that decide how long each pipe takes a tile."""
    c = get_chip(chip)
    p, v = c.pipes, c.vector
    print(f"{c.name}: {c.ai_cores} cores, UB {c.buffers.ub:,} B a core")
    print(f"MTE2 (GM -> UB) {p.mte2_bytes_per_cycle:g} B/cycle, start-up {p.mte2_startup_cycles} cycles; "
          f"MTE3 (UB -> GM) {p.mte3_bytes_per_cycle:g} B/cycle, start-up {p.mte3_startup_cycles}")
    print(f"GM {c.memory.gm_bytes_per_cycle:g} B/cycle for the whole chip (x {c.memory.gm_efficiency:g} "
          f"sustained), shared by the cores and by each core's reads and writes")
    print(f"vector: {v.repeat_bytes} B a repeat, {v.repeat_bytes // v.bytes_per_cycle} cycle(s) a repeat "
          f"({v.transcendental_cycles_per_repeat} for exp, ln, reciprocal, div), start-up {v.startup_cycles} "
          f"cycles before a dependent instruction may start")


def run_silu(cls, x: np.ndarray | None = None, chip=CHIP, mode: str = "functional"):
    """Launch ``cls(x, z, tiling).process()`` on every block (x: the lab's input by default);
    returns (z, trace)."""
    return launch_silu(cls, inputs() if x is None else x, chip, mode)


def run_gate(cls, mode: str = "functional"):
    """Launch a GateStages class (the learner's or the package's) on the lab's a and b;
    returns (z, trace)."""
    return launch_gate(cls, inputs(), inputs(seed=1), CHIP, mode)


def show(obj) -> None:
    """Print the source of a function or class (a kernel's ``__init__``, say)."""
    print(textwrap.dedent(inspect.getsource(obj)))


def compare(tile: int | None = None):
    """SiLU single and double buffered at the same tile (default: the double-buffered one's):
    {buffer_num: trace}."""
    tile = tile or ub_tile(get_chip(CHIP).buffers.ub, 2)
    return {bn: run_silu(silu_kernel(bn, tile))[1] for bn in (1, 2)}


def speedup_tiles() -> dict:
    """{op: tile} of the predicted runs: each op's double-buffered tile (SiLU 2 queues, Add 3),
    the same with one slot and with two."""
    ub = get_chip(CHIP).buffers.ub
    return {"SiLU": ub_tile(ub, 2), "Add": ub // (3 * 2) // BLOCK_BYTES * BLOCK_BYTES // 2}


@functools.lru_cache(maxsize=None)
def _speedup_cycles() -> tuple:
    tiles, x, y = speedup_tiles(), inputs(), inputs(seed=1)
    out = []
    for bn in (1, 2):
        out.append(("SiLU", bn, run_silu(silu_kernel(bn, tiles["SiLU"]), x, mode="timing")[1].cycles))
        tr = launch_add(x, y, add_tiling(x.size, x.dtype, CHIP, bn, tiles["Add"]), CHIP)[1]
        out.append(("Add", bn, tr.cycles))
    return tuple(out)


def speedups() -> dict:
    """{op: cycles with one slot / cycles with two} of SiLU and Add at :func:`speedup_tiles`."""
    c = {(op, bn): cyc for op, bn, cyc in _speedup_cycles()}
    return {op: c[op, 1] / c[op, 2] for op in ("SiLU", "Add")}


def print_speedups(predicted=None) -> None:
    """The measured speed-ups of two slots over one, beside a prediction ({op: speed-up})."""
    c = {(op, bn): cyc for op, bn, cyc in _speedup_cycles()}
    for op, tile in speedup_tiles().items():
        guess = "" if not isinstance(predicted, dict) or op not in predicted else f"; predicted {predicted[op]:.2f}x"
        print(f"{op:<5} tile {tile:>5}: one slot {c[op, 1]:>6,} cycles, two {c[op, 2]:>6,}: "
              f"{c[op, 1] / c[op, 2]:.2f}x{guess}")


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


def colleague():
    """The trace of a colleague's gate of SwiGLU (:data:`COLLEAGUE`), whose stalls exercise 2
    explains; the learner sees its table, not its slots."""
    slots, tile = COLLEAGUE
    return run_gate(gate_kernel(slots, tile, name="ColleagueGate"))[1]


@functools.lru_cache(maxsize=None)
def slot_cycles(tile: int = SLOT_TILE, slots=(1, 2, 3, 4)) -> dict:
    """{op: {buffer_num: cycles}} of SiLU and Mish with each number of slots at ``tile``."""
    x = inputs()
    kernels = {"SiLU": silu_kernel, "Mish": mish_kernel}
    return {op: {bn: run_silu(make(bn, tile), x, mode="timing")[1].cycles for bn in slots}
            for op, make in kernels.items()}


def slots_that_pay(cycles: dict, gain: float = 0.01) -> int:
    """The fewest slots past which one more saves less than ``gain`` of the cycles."""
    bns = sorted(cycles)
    return next((bn for bn, nxt in zip(bns, bns[1:]) if cycles[nxt] > cycles[bn] * (1 - gain)), bns[-1])


def print_slots(tile: int = SLOT_TILE) -> None:
    """Cycles of SiLU and Mish with 1-4 slots at ``tile``, and the speed-up over one slot."""
    rows = slot_cycles(tile)
    print(f"tile {tile} elements   " + "".join(f"{'buffer_num=' + str(bn):>15}" for bn in rows["SiLU"]))
    for op, cyc in rows.items():
        print(f"{op:<20}" + "".join(f"{c:>9,} {cyc[1] / c:4.2f}x" for c in cyc.values()))


def slot_schedule(slots: int, tiles: int = 5, times=(1.0, 1.0, 1.0)) -> list:
    """(pipe, tile, start, end) of a CopyIn / Compute / CopyOut pipeline with ``slots`` slots in
    each queue and ``times`` (MTE2, VECTOR, MTE3) a tile: each pipe in order, a copy in waiting
    for a free in-slot (freed when the vector unit ends the tile ``slots`` before), the vector
    unit for its tile's copy and a free out-slot (freed when MTE3 ends the tile ``slots``
    before). The idea section's picture; no start-ups, no shared GM."""
    t2, tv, t3 = times
    end = {"MTE2": [], "VECTOR": [], "MTE3": []}
    out = []
    for i in range(tiles):
        free_in = end["VECTOR"][i - slots] if i >= slots else 0.0
        s2 = max(end["MTE2"][-1] if i else 0.0, free_in)
        end["MTE2"].append(s2 + t2)
        free_out = end["MTE3"][i - slots] if i >= slots else 0.0
        sv = max(end["VECTOR"][-1] if i else 0.0, end["MTE2"][i], free_out)
        end["VECTOR"].append(sv + tv)
        s3 = max(end["MTE3"][-1] if i else 0.0, end["VECTOR"][i])
        end["MTE3"].append(s3 + t3)
        out += [("MTE2", i, s2, s2 + t2), ("VECTOR", i, sv, sv + tv), ("MTE3", i, s3, s3 + t3)]
    return out


def draw_slots(axes, tiles: int = 5) -> None:
    """One panel per slot count (1, 2) of :func:`slot_schedule`: each tile's copy in, compute
    and copy out as boxes, and the round trip of slot 0 of in_x (alloc by MTE2 to free by the
    vector unit) bracketed."""
    lanes = ("MTE2", "VECTOR", "MTE3")
    colours = {"MTE2": "tab:blue", "VECTOR": "tab:orange", "MTE3": "tab:green"}
    for ax, slots in zip(axes, (1, 2)):
        sched = slot_schedule(slots, tiles)
        for pipe, i, s, e in sched:
            y = len(lanes) - 1 - lanes.index(pipe)
            ax.broken_barh([(s, e - s)], (y - 0.35, 0.7), color=colours[pipe], alpha=0.85)
            ax.text((s + e) / 2, y, f"tile {i}", ha="center", va="center", fontsize=8, color="white")
        s0 = next(s for p, i, s, e in sched if p == "MTE2" and i == 0)
        e0 = next(e for p, i, s, e in sched if p == "VECTOR" and i == 0)
        ax.annotate("", (s0, 2.55), (e0, 2.55), arrowprops={"arrowstyle": "<->"})
        ax.text((s0 + e0) / 2, 2.62, "round trip of in_x slot 0", ha="center", va="bottom", fontsize=8)
        ax.set_yticks(range(len(lanes)), lanes[::-1])
        ax.set_ylim(-0.6, 3.0)
        end = max(e for *_, e in sched)
        ax.set_title(f"{slots} slot{'s' if slots > 1 else ''} per queue: {tiles} tiles in {end:g} tile-times",
                     fontsize=10)
    axes[-1].set_xlabel("time (one stage of one tile = 1)")
