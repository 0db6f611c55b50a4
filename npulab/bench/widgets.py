"""How long one slider step takes on a trace of about 100,000 instructions (the goal: at most
100 ms). A benchmark, not a test: ``npulab bench widgets --json`` prints this dict.

The trace is a real timing-mode Add on the teaching chip, sized to give about the target
number of instructions. A step is what the widget's slider callback does: move the time (or the
range), redraw, encode the PNG (and for the gantt, recompute the time-per-pipe table).
"""
from __future__ import annotations

import time

import numpy as np

GOAL_SECONDS = 0.100
TARGET_INSTRUCTIONS = 100_000
CHIP = "teach"


def bench_trace(target: int = TARGET_INSTRUCTIONS, chip: str = CHIP):
    """A timing-mode Add trace with about ``target`` instructions (sized from a small probe run)."""
    from ..kernels.elementwise import add_tiling, launch_add
    probe_n = 1 << 18
    x = np.zeros(probe_n, np.float16)
    per_element = len(launch_add(x, x, add_tiling(probe_n, x.dtype, chip), chip, "timing")[1]) / probe_n
    n = int(target / per_element) // 16 * 16
    x = np.zeros(n, np.float16)
    return launch_add(x, x, add_tiling(n, x.dtype, chip), chip, "timing")[1], n


def _time_steps(step, args) -> list[float]:
    out = []
    for a in args:
        t0 = time.perf_counter()
        step(*a)
        out.append(time.perf_counter() - t0)
    return out


def bench_widgets(steps: int = 30, seed: int = 0) -> dict:
    """Time ``steps`` slider steps of the occupancy and gantt widgets (seeded positions; the
    gantt's ranges mix the whole run with windows down to 0.1% of it). Returns a JSON-ready
    dict: instructions, per-view mean, 90th percentile and max seconds per step, the goal, and
    pass/fail: the 90th percentile of both views within the goal (the max is reported too; on a
    shared machine a single step can be delayed by other processes)."""
    from ..widgets.gantt import GanttWidget
    from ..widgets.occupancy import OccupancyWidget

    trace, n = bench_trace()
    rng = np.random.default_rng(seed)
    t0 = time.perf_counter()
    occ = OccupancyWidget(trace, 0)
    occ_build = time.perf_counter() - t0
    cycles = occ.data.cycles
    occ_times = _time_steps(occ.show, [(int(t),) for t in rng.integers(0, cycles, steps)])
    t0 = time.perf_counter()
    gw = GanttWidget(trace, 0)
    gantt_build = time.perf_counter() - t0
    ranges = []
    for k in range(steps):
        width = max(2, int(cycles * (1.0, 0.5, 0.1, 0.01, 0.001)[k % 5]))
        a = int(rng.integers(0, cycles - width + 1))
        ranges.append((a, a + width))
    gantt_times = _time_steps(gw.show, ranges)
    views = {"occupancy": occ_times, "gantt": gantt_times}
    out = {
        "chip": CHIP, "elements": n, "instructions": len(trace), "cycles": int(trace.cycles),
        "steps": steps, "goal_seconds": GOAL_SECONDS,
        "build_seconds": {"occupancy": round(occ_build, 4), "gantt": round(gantt_build, 4)},
    }
    for name, ts in views.items():
        out[f"{name}_seconds_per_step"] = round(float(np.mean(ts)), 4)
        out[f"{name}_seconds_p90"] = round(float(np.percentile(ts, 90)), 4)
        out[f"{name}_seconds_max"] = round(float(np.max(ts)), 4)
    out["pass"] = all(float(np.percentile(ts, 90)) <= GOAL_SECONDS for ts in views.values())
    return out


if __name__ == "__main__":
    import json
    print(json.dumps(bench_widgets(), indent=2))
