"""The static views show exactly what the simulator recorded: gantt bars are the trace's
instructions, the occupancy at a cycle is the sum of the live allocations in the buffers' logs,
memory-plan rectangles are the input."""
import matplotlib

matplotlib.use("Agg")

import numpy as np
import pytest

import npulab.plot as P
from npulab import lang
from npulab.kernels.elementwise import add_tiling, launch_add
from npulab.plot._style import merge_intervals
from npulab.sim.device import Device
from npulab.sim.isa import NUM_PIPES, TRACK_NAMES, Kind, Pipe


def _add_trace(n=8192 * 4, chip="teach", mode="timing", buffer_num=2):
    x = np.arange(n, dtype=np.float16) % 7
    return launch_add(x, x, add_tiling(x.size, x.dtype, chip, buffer_num), chip, mode)[1]


def _mixed_kernel(x):
    """Uses L1, L0A, L0B and UB: two queues GM->L1, slots of L0A/L0B queues taken and given back
    by MTE1 and the cube pipe, a UB TBuf, a vector loop."""
    pipe = lang.TPipe()
    a1, b1 = lang.Queue(lang.A1, "a1"), lang.Queue(lang.B1, "b1")
    a2, b2 = lang.Queue(lang.A2, "a2"), lang.Queue(lang.B2, "b2")
    for q in (a1, b1, a2, b2):
        pipe.init_buffer(q, 2, 1024)
    vin, vout = lang.Queue(lang.VECIN, "vin"), lang.Queue(lang.VECOUT, "vout")
    pipe.init_buffer(vin, 2, 2048)
    pipe.init_buffer(vout, 1, 2048)
    scratch = lang.TBuf(lang.VECCALC, "scratch")
    pipe.init_buffer(scratch, 1024)
    for i in range(6):
        chunk = x[i * 512:(i + 1) * 512]
        for q1, q2 in ((a1, a2), (b1, b2)):
            d = q2.alloc_tensor(np.float16)          # held while MTE2 fills L1: a visible lifetime
            t = q1.alloc_tensor(np.float16)
            lang.data_copy(t, chunk)
            q1.enque(t)
            s = q1.deque()
            q2.enque(d)
            q1.free_tensor(s)
            q2.free_tensor(q2.deque())
        v = vin.alloc_tensor(np.float16)
        lang.data_copy(v, x[i * 1024:(i + 1) * 1024])
        vin.enque(v)
        v = vin.deque()
        o = vout.alloc_tensor(np.float16)
        lang.muls(o, v, 2.0, 1024)
        vout.enque(o)
        vin.free_tensor(v)
        vout.free_tensor(vout.deque())
    scratch.get(np.float16)


@pytest.fixture(scope="module")
def small_trace():
    return _add_trace()


def _launch_with_device(monkeypatch, fn):
    """Run ``fn()`` (which launches a kernel) and return (its result, the Device it used)."""
    seen = {}
    orig = Device.finish

    def spy(self):
        seen["device"] = self
        return orig(self)

    monkeypatch.setattr(Device, "finish", spy)
    return fn(), seen["device"]


def _collection_x(ax, label):
    """(start, end) of every rectangle of the collection labelled ``label``, sorted."""
    (coll,) = [c for c in ax.collections if c.get_label() == label]
    out = [(float(p.vertices[:, 0].min()), float(p.vertices[:, 0].max())) for p in coll.get_paths()]
    return sorted(out)


# -- gantt ------------------------------------------------------------------------------------
@pytest.mark.parametrize("core", [0, 1])
def test_gantt_bars_are_the_work_instructions(small_trace, core):
    tr = small_trace
    ax = P.gantt(tr, core, max_bars=10**9)
    assert ax.get_xlim() == (0.0, float(tr.core_cycles[core]))
    for p in range(NUM_PIPES):
        on = (tr.core == core) & (tr.pipe == p)
        work = on & (tr.kind == Kind.WORK) & (tr.busy_end > tr.start)
        wait = on & ((tr.kind == Kind.WAIT) | (tr.kind == Kind.BARRIER_ALL)) & (tr.end > tr.start)
        track = TRACK_NAMES[Pipe(p)]
        bars = _collection_x(ax, f"{track} work")          # the occupancy: never overlapping
        assert bars == sorted(zip(tr.start[work].astype(float), tr.busy_end[work].astype(float)))
        assert all(a[1] <= b[0] for a, b in zip(bars, bars[1:]))
        assert _collection_x(ax, f"{track} wait") == sorted(zip(tr.start[wait].astype(float),
                                                                 tr.end[wait].astype(float)))
        # the in-flight strip covers exactly the union of the copies' tails
        tail = on & (tr.kind == Kind.WORK) & (tr.end > tr.busy_end)
        strip = _collection_x(ax, f"{track} tail")
        assert all(a[1] < b[0] for a, b in zip(strip, strip[1:]))
        covered = np.zeros(int(tr.core_cycles[core]) + 1, bool)
        for s, e in zip(tr.busy_end[tail], tr.end[tail]):
            covered[s:e] = True
        drawn = np.zeros_like(covered)
        for s, e in strip:
            drawn[int(s):int(e)] = True
        assert np.array_equal(covered, drawn)
        # Add's copies, and its vector instructions' start-up (latency: lang.vector)
        assert bool(strip) == (p in (Pipe.MTE2, Pipe.MTE3, Pipe.V))
    # the Add kernel really works on MTE2, VECTOR and MTE3 and stalls on its queues
    assert len(_collection_x(ax, "VECTOR work")) > 10 and len(_collection_x(ax, "VECTOR wait")) > 10
    texts = [t.get_text() for t in ax.texts if t.get_visible()]
    assert any(t.startswith("deque in_x") for t in texts)


def test_gantt_range_keeps_only_overlapping_bars(small_trace):
    tr = small_trace
    ax = P.gantt(tr, 0, start=500, end=900, max_bars=10**9)
    sel = (tr.core == 0) & (tr.pipe == Pipe.MTE2) & (tr.kind == Kind.WORK) & (tr.busy_end > tr.start)
    keep = sel & (tr.busy_end >= 500) & (tr.start <= 900)
    assert _collection_x(ax, "MTE2 work") == sorted(zip(tr.start[keep].astype(float),
                                                        tr.busy_end[keep].astype(float)))
    assert ax.get_xlim() == (500.0, 900.0)
    with pytest.raises(ValueError, match="start < end"):
        P.gantt(tr, 0, start=900, end=500)
    with pytest.raises(ValueError, match="core=5"):
        P.gantt(tr, 5)


def test_merge_intervals_covers_every_bar_and_only_joins_small_gaps():
    rng = np.random.default_rng(7)
    starts = np.cumsum(rng.integers(0, 20, 500))
    ends = starts + rng.integers(1, 10, 500)
    ends = np.minimum(ends, np.append(starts[1:], ends[-1]))     # a serial pipe: no overlap
    ms, me = merge_intervals(starts, ends, 5)
    assert len(ms) < len(starts)
    idx = np.searchsorted(ms, starts, side="right") - 1
    assert np.all(starts >= ms[idx]) and np.all(ends <= me[idx])  # every bar inside a merged one
    assert np.all(ms[1:] - me[:-1] >= 5)                          # kept gaps are at least min_gap
    gaps_joined = [(s2 - e1) for s2, e1 in zip(starts[1:], ends[:-1]) if 0 < s2 - e1 < 5]
    covered = (me - ms).sum()
    assert covered == (ends - starts).sum() + sum(gaps_joined)


def test_pipe_time_adds_up_and_names_the_queues(small_trace):
    tr = small_trace
    rows = P.pipe_time(tr, 0)
    busy = tr.busy_cycles(0)
    for p, r in enumerate(rows):
        assert r["busy"] + sum(r["waits"].values()) + r["in_flight"] + r["idle"] == r["span"] \
            == tr.core_cycles[0]
        assert r["busy"] == busy[p]
    # MTE3 waits for the kernel's last copy out to land: latency no other copy hides
    assert rows[Pipe.MTE3]["in_flight"] >= tr.chip.pipes.mte3_startup_cycles
    assert rows[Pipe.V]["in_flight"] == 0 and rows[Pipe.M]["in_flight"] == 0
    # by hand: cycles of the run a copy of MTE2 was in flight and the pipe neither worked nor stalled
    sel = (tr.core == 0) & (tr.pipe == Pipe.MTE2)
    flight = np.zeros(int(tr.core_cycles[0]), bool)
    occupied = np.zeros_like(flight)
    for s, b, e, k in zip(tr.start[sel], tr.busy_end[sel], tr.end[sel], tr.kind[sel]):
        if k == Kind.WORK:
            occupied[s:b] = True
            flight[b:e] = True
        elif k == Kind.WAIT:
            occupied[s:e] = True
    assert rows[Pipe.MTE2]["in_flight"] == int((flight & ~occupied).sum())
    vec = rows[Pipe.V]
    assert "deque in_x" in vec["waits"]                          # slots summed under the queue
    sel = (tr.core == 0) & (tr.pipe == Pipe.V) & (tr.kind == Kind.WAIT)
    by_hand = sum(int(e - s) for s, e, n in zip(tr.start[sel], tr.end[sel], np.array(tr.name)[sel])
                  if n.startswith("deque in_x"))
    assert vec["waits"]["deque in_x"] == by_hand
    # a window clips the bars at its edges
    r = P.pipe_time(tr, 0, 100, 400)[Pipe.MTE2]
    sel = (tr.core == 0) & (tr.pipe == Pipe.MTE2) & (tr.kind == Kind.WORK)
    clipped = np.clip(np.minimum(tr.busy_end[sel], 400) - np.maximum(tr.start[sel], 100), 0, None).sum()
    assert r["busy"] == clipped and r["span"] == 300
    text = P.pipe_time_table(rows)
    assert "VECTOR" in text and "deque in_x" in text and "CUBE" not in text


# -- occupancy --------------------------------------------------------------------------------
def _by_hand(device, trace):
    """{(core, buffer): [(size, t_taken, t_released)]} from the buffers' AllocRecord logs, with
    instruction indices turned into cycles through the trace of that core: taken when its pipe
    passed the alloc (busy_end), released when the free completed (end)."""
    out = {}
    for core in device.cores:
        end = trace.end[trace.core == core.index]
        busy_end = trace.busy_end[trace.core == core.index]
        last = int(end.max())
        for buf in core.buffers.values():
            out[core.index, buf.name] = [(r.size, int(busy_end[r.taken]),
                                          int(end[r.released]) if r.released >= 0 else last)
                                         for r in buf.log]
    return out


def _live_by_hand(records, t):
    return sum(size for size, a, b in records if a <= t < b)


@pytest.mark.parametrize("which", ["add_timing", "add_functional", "mixed"])
def test_occupancy_equals_the_live_allocations_of_the_log(monkeypatch, which):
    if which == "mixed":
        x = np.ones(6144, np.float16)
        res, dev = _launch_with_device(monkeypatch, lambda: lang.launch(_mixed_kernel, 2, x, chip="teach"))
        tr = res.trace
    else:
        tr, dev = _launch_with_device(monkeypatch, lambda: _add_trace(
            n=5000, mode=which.split("_")[1], buffer_num=2))
    logs = _by_hand(dev, tr)
    rng = np.random.default_rng(2024)
    used = set()
    for core in range(len(tr.core_cycles)):
        data = P.OccupancyData(tr, core)
        for buf in ("L1", "L0A", "L0B", "L0C", "UB"):
            recs = logs[core, buf]
            edges = [a for _, a, _ in recs] + [b for _, _, b in recs]
            times = np.concatenate((rng.integers(0, tr.core_cycles[core] + 2, 60), edges[:40]))
            for t in times.tolist():
                shown = data.at(buf, t)
                assert shown == tr.occupancy(core, buf, t) == _live_by_hand(recs, t), (core, buf, t)
                if shown:
                    used.add(buf)
    assert used == ({"L1", "L0A", "L0B", "UB"} if which == "mixed" else {"UB"})


def test_occupancy_figure_strips_show_the_live_allocations(small_trace):
    tr = small_trace
    data = P.OccupancyData(tr, 1)
    view = P.OccupancyFigure(data)
    rng = np.random.default_rng(11)
    for t in rng.integers(0, tr.core_cycles[1], 15).tolist():
        view.set_time(t)
        live = sorted((a.offset, a.offset + a.size) for a in tr.allocations
                      if a.core == 1 and a.buffer == "UB" and a.start <= t < a.end)
        drawn = sorted((float(p.vertices[:, 0].min()), float(p.vertices[:, 0].max()))
                       for p in view.colls["UB"].get_paths())
        assert drawn == [(float(a), float(b)) for a, b in live]
        assert sum(b - a for a, b in live) == tr.occupancy(1, "UB", t)
        assert view.vline.get_xdata()[0] == t
        assert f"cycle {t:,}" in view.title.get_text()


def test_occupancy_peak_is_the_maximum_over_the_run(small_trace):
    tr = small_trace
    data = P.OccupancyData(tr, 0)
    ub = data.buffers["UB"]
    grid = np.arange(0, tr.core_cycles[0] + 1)
    levels = np.array([tr.occupancy(0, "UB", t) for t in grid[::7]] + [tr.occupancy(0, "UB", ub.peak_time)])
    assert ub.peak == levels.max() == tr.occupancy(0, "UB", ub.peak_time)
    assert np.array_equal(ub.at(grid[::7]), levels[:-1])        # vectorised lookup agrees
    assert data.peaks()["L1"] == (0, 0, tr.capacities["L1"])
    fig = P.occupancy(tr, 0, buffers="used")
    legend = [t.get_text() for t in fig.axes[-1].get_legend().get_texts()]
    assert legend[0].startswith(f"UB peak {100 * ub.peak / tr.capacities['UB']:.0f}%")
    assert f"at cycle {ub.peak_time:,}" in legend[0]
    with pytest.raises(ValueError, match="unknown buffer"):
        P.occupancy(tr, 0, buffers=["UBX"])


# -- memory plan ------------------------------------------------------------------------------
def test_memory_plan_rectangles_match_the_input():
    plan = [("w", 0, 10, 0, 256), {"name": "x", "start": 4, "end": 12, "offset": 256, "size": 128},
            ("y", 12, 20, 0, 384)]
    ax = P.memory_plan(plan, capacity=512)
    (coll,) = [c for c in ax.collections if c.get_label() == "tensors"]
    rects = [(p.vertices[:, 0].min(), p.vertices[:, 0].max(), p.vertices[:, 1].min(), p.vertices[:, 1].max())
             for p in coll.get_paths()]
    assert rects == [(0, 10, 0, 256), (4, 12, 256, 384), (12, 20, 0, 384)]
    assert "high-water mark 384 B" in ax.get_title()
    assert P.overlaps(P.plan_tensors(plan)) == []
    assert P.overlaps(P.plan_tensors(plan + [("z", 5, 6, 300, 10)])) == [("x", "z")]


def test_memory_plan_takes_trace_allocations_and_rejects_bad_items(small_trace):
    allocs = [a for a in small_trace.allocations if a.core == 0][:12]
    plan = P.plan_tensors(allocs)
    assert [(t.name, t.start, t.end, t.offset, t.size) for t in plan] == \
        [(a.owner, a.start, a.end, a.offset, a.size) for a in allocs]
    assert P.overlaps(plan) == []                     # the simulator's queues never share live bytes
    with pytest.raises(ValueError, match="item 0 .*ends at 1 before it starts at 5"):
        P.plan_tensors([("a", 5, 1, 0, 10)])
    with pytest.raises(ValueError, match="expected \\(name, start, end, offset, size\\)"):
        P.plan_tensors([("a", 0, 1, 0)])
    with pytest.raises(ValueError, match="size"):
        P.plan_tensors([("a", 0, 1, 0, 0)])
