"""The Trace: Chrome trace schema, msprof-style summary, bytes, energy, occupancy."""
import json

import numpy as np
import pytest

from npulab.kernels.elementwise import add_tiling, launch_add
from npulab.sim.isa import Kind, Pipe

TRACKS = {"SCALAR", "MTE1", "MTE2", "MTE3", "CUBE", "VECTOR", "FIXP"}


@pytest.fixture(scope="module")
def trace():
    x = np.arange(10_007, dtype=np.float16)
    _, tr = launch_add(x, x, add_tiling(x.size, x.dtype, "teach"), "teach")
    return tr


def test_chrome_trace_schema(trace, tmp_path):
    path = tmp_path / "trace.json"
    trace.to_chrome(path)
    doc = json.loads(path.read_text())
    events = doc["traceEvents"]
    complete = [e for e in events if e["ph"] == "X"]
    assert complete
    for e in complete:
        assert {"name", "ts", "dur", "pid", "tid"} <= e.keys()
        assert isinstance(e["ts"], float) and e["dur"] > 0
        assert e["pid"] in (0, 1) and 0 <= e["tid"] < 7
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in events
             if e["ph"] == "M" and e["name"] == "thread_name"}
    assert {names[(0, t)] for t in range(7)} == TRACKS
    assert names[(0, int(Pipe.MTE2))] == "MTE2" and names[(1, int(Pipe.V))] == "VECTOR"
    procs = {e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    assert procs == {"core 0", "core 1"}
    # one X event per instruction that occupied its pipe, spanning that occupancy
    took_time = int(((trace.busy_end > trace.start) & (trace.kind != Kind.SET)).sum())
    assert len(complete) == took_time
    # durations in microseconds at the chip's clock
    us = trace.chip.clock_ghz * 1000
    last = max(e["ts"] + e["dur"] for e in complete)
    assert last == pytest.approx(int(trace.busy_end.max()) / us)
    assert max(e["args"]["end_cycle"] for e in complete) == trace.cycles
    # a copy's event ends when its bytes have moved; it completes its start-up later
    out = [e for e in complete if e["cat"] == "COPY_UB_TO_GM"]
    assert all(e["args"]["end_cycle"] - e["args"]["busy_end_cycle"] == trace.chip.pipes.mte3_startup_cycles
               for e in out)
    copies = [e for e in complete if e["cat"].startswith("COPY")]
    assert copies and all(e["args"]["in_flight_cycles"] == trace.chip.pipes.mte2_startup_cycles
                          for e in copies if e["cat"] == "COPY_GM_TO_UB")
    for e in complete:        # events of one pipe of one core never overlap
        assert e["args"]["busy_end_cycle"] - e["args"]["start_cycle"] == pytest.approx(e["dur"] * us)
    for (pid, tid) in {(e["pid"], e["tid"]) for e in complete}:
        spans = sorted((e["args"]["start_cycle"], e["args"]["busy_end_cycle"]) for e in complete
                       if (e["pid"], e["tid"]) == (pid, tid))
        assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:]))


def test_summary_ratios_and_names(trace):
    s = trace.summary()
    for name in ("mte2_ratio", "mte3_ratio", "vec_ratio", "mac_ratio", "scalar_ratio", "mte1_ratio", "fixpipe_ratio"):
        assert 0.0 <= s[name] <= 1.0
    assert s["mac_ratio"] == 0.0 and s["vec_ratio"] > 0.0 and s["mte2_ratio"] > s["vec_ratio"]
    busy = trace.busy_cycles(0)
    assert s["cycles"] == trace.cycles == int(trace.end.max())
    assert trace.pipe_ratios(0)["mte2_ratio"] == pytest.approx(busy[Pipe.MTE2] / trace.cycles)


def test_bytes_per_level_and_flops(trace):
    s = trace.summary()
    n = 10_007
    # x and y come in, z goes out; the tails move in 32-byte blocks but count their real bytes
    assert s["bytes"]["GM->UB"] == 2 * n * 2
    assert s["bytes"]["UB->GM"] == n * 2
    assert s["gm_read_bytes"] == 4 * n and s["gm_write_bytes"] == 2 * n
    assert s["flops"] == s["vector_flops"] == n
    assert s["energy_uj"] > 0


def test_occupancy_is_the_sum_of_live_allocations(trace):
    rng = np.random.default_rng(0)
    ub = [a for a in trace.allocations if a.buffer == "UB" and a.core == 0]
    assert ub and all(a.size > 0 and a.end >= a.start for a in ub)
    for t in rng.integers(0, trace.cycles, 50):
        expect = sum(a.size for a in ub if a.start <= t < a.end)
        assert trace.occupancy(0, "UB", int(t)) == expect
        assert expect <= trace.capacities["UB"]


def test_table_is_readable(trace):
    text = trace.table()
    assert "mte2_ratio" in text and "cycles" in text and "bytes GM->UB" in text


def _union(intervals):
    """Cycles covered by ``intervals`` (start, end), each cycle once: an independent count."""
    covered = set()
    for s, e in intervals:
        covered.update(range(int(s), int(e)))
    return len(covered)


def test_span_counts_each_pipe_from_start_to_end_and_each_cycle_once(trace):
    work = trace.kind == Kind.WORK
    for core in (0, 1):
        span, busy = trace.span_cycles(core), trace.busy_cycles(core)
        for p in (Pipe.MTE2, Pipe.V, Pipe.MTE3):
            mine = np.flatnonzero(work & (trace.core == core) & (trace.pipe == int(p)))
            assert span[int(p)] == _union(zip(trace.start[mine], trace.end[mine]))
            assert span[int(p)] >= busy[int(p)]              # a copy's latency is under way, not busy
        assert span[int(Pipe.MTE2)] > busy[int(Pipe.MTE2)]
    ratios, spans = trace.pipe_ratios(), trace.span_ratios()
    assert all(0 <= spans[k] <= 1 for k in spans) and spans["mte2_ratio"] > ratios["mte2_ratio"]
    assert trace.span_cycles().tolist() == (trace.span_cycles(0) + trace.span_cycles(1)).tolist()
