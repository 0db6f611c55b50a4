"""Lab 04 (double buffering): the runs the lab compares of the SiLU kernel single and double
buffered (:mod:`npulab.kernels.examples.silu`: ``SiluStages``, ``SiluSingle``, ``SiluDouble``,
``silu_kernel``), whose ``__init__`` exercise 1 has the learner rewrite with two slots.

* :func:`inputs`, :func:`run_silu`: the lab's seeded fp16 input, and a SiluStages class (the
  learner's or the package's) launched on it on the teaching chip;
* :func:`compare`, :func:`stall_table`, :func:`print_waits`, :func:`measure`,
  :func:`print_measure`: the runs and tables the lab shows (its queue slots and UB plans are
  read off the traces by :mod:`npulab.plot.queues`).
"""
from __future__ import annotations

import inspect
import textwrap

import numpy as np

from ..arch import BLOCK_BYTES
from ..chips import get_chip
from ..kernels.elementwise import add_tiling, launch_add
from ..kernels.examples.silu import launch_silu, silu_kernel, ub_tile

CHIP = "teach"
N = 65536                 # elements of the SiLU every run of the lab computes
SEED = 0


def inputs(n: int = N, seed: int = SEED) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(n).astype(np.float16)


def run_silu(cls, x: np.ndarray | None = None, chip=CHIP, mode: str = "functional"):
    """Launch ``cls(x, z, tiling).process()`` on every block (x: the lab's input by default);
    returns (z, trace)."""
    return launch_silu(cls, inputs() if x is None else x, chip, mode)


def show(obj) -> None:
    """Print the source of a function or class (a kernel's ``__init__``, say)."""
    print(textwrap.dedent(inspect.getsource(obj)))


def compare(tile: int | None = None):
    """SiLU single and double buffered at the same tile (default: the double-buffered one's):
    {buffer_num: trace}."""
    tile = tile or ub_tile(get_chip(CHIP).buffers.ub, 2)
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


def measure() -> list[dict]:
    """Cycles and pipe utilization of SiLU and Add (65,536 fp16 on the teaching chip) for
    buffer_num 1, 2, 3 with the largest tile each fits in UB."""
    ub = get_chip(CHIP).buffers.ub
    x = inputs()
    rows = []
    for bn in (1, 2, 3):
        tile = ub_tile(ub, bn)
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
