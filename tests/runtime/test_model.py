"""A compiled model on the simulated device (npulab.runtime.model): functional runs give what the
reference executor gives for the graph; timing runs simulate each distinct launch once and lay
the tasks out on one stream; the whole-model Chrome trace holds a model track and the cores'
pipes."""
import json

import numpy as np
import pytest

from npulab import GraphError
from npulab.errors import ArgumentError
from npulab.graph import reference, zoo
from npulab.graph.compile import compile_graph
from npulab.ops.tolerance import tol
from npulab.runtime.model import Executor

SMALL = dict(batch=1, image=32, num_classes=10, seed=0, widths=(8, 16, 16, 16), blocks=(1, 2, 1, 1))


@pytest.fixture(scope="module")
def small():
    g = zoo.build("resnet50", dtype="float32", **SMALL).infer()
    return compile_graph(g, "910")


def _image(g, seed=0):
    return np.random.default_rng(seed).standard_normal(g.type_of(g.inputs[0]).shape).astype(g.type_of(g.inputs[0]).dtype)


def test_functional_run_gives_the_reference_outputs(small):
    g = small.graph
    x = _image(g)
    out, trace = Executor(small).run({g.inputs[0]: x}, "functional")
    ref = reference.run(g, {g.inputs[0]: x})
    assert set(out) == set(g.outputs)
    for name in g.outputs:
        assert out[name].shape == ref[name].shape and out[name].dtype == ref[name].dtype
        np.testing.assert_allclose(out[name], ref[name], **tol("float32", "cube"))
    assert len(trace.records) == sum(t.engine != "None" for t in small.tasks)


def test_timing_run_simulates_each_distinct_launch_once(small):
    ex = Executor(small)
    _, t1 = ex.run(None, "timing")
    aicore = [r for r in t1.records if r.engine == "AiCore"]
    distinct = {id(r.trace) for r in aicore}
    # layer2's second bottleneck repeats every launch of no other block but its own kind: one
    # trace per distinct (kernel, shapes, attributes, tiles), fewer than the launches
    assert len(distinct) == small.report["tilings"] < len(aicore)
    _, t2 = ex.run(None, "timing")                         # a second run reuses every trace
    assert [id(r.trace) for r in t2.records if r.trace] == [id(r.trace) for r in aicore]
    assert t2.latency_us == pytest.approx(t1.latency_us)


def test_tasks_run_one_after_another_on_the_stream(small):
    _, t = Executor(small).run(None, "timing")
    ends = [r.end_us for r in t.records]
    assert all(b.start_us == pytest.approx(a.end_us) for a, b in zip(t.records, t.records[1:]))
    assert t.latency_us == pytest.approx(ends[-1]) == pytest.approx(sum(r.dur_us for r in t.records))
    by = t.time_by("engine")
    assert set(by) <= {"AiCore", "AiCpu", "DataMove"} and sum(by.values()) == pytest.approx(t.latency_us)
    s = t.summary()
    assert 0 < s["cube_utilization"] < 1 and s["power_w"] > small.chip.power.static_watts


def test_timing_and_functional_runs_agree_on_time(small):
    g = small.graph
    _, f = Executor(small).run({g.inputs[0]: _image(g)}, "functional")
    _, t = Executor(small).run(None, "timing")
    assert [r.name for r in f.records] == [r.name for r in t.records]
    assert f.latency_us == pytest.approx(t.latency_us, rel=0.02)


def test_chrome_trace_has_a_model_track_and_the_cores_pipes(small, tmp_path):
    _, t = Executor(small).run(None, "timing")
    path = tmp_path / "model.json"
    t.to_chrome(path)
    ev = json.loads(path.read_text())["traceEvents"]
    ops = [e for e in ev if e["ph"] == "X" and e["pid"] == 0]
    assert [e["name"] for e in ops] == [r.name for r in t.records]
    inst = [e for e in ev if e["ph"] == "X" and e["pid"] > 0]
    assert inst and all("op" in e["args"] for e in inst)
    first = t.records[0]                                   # the stem conv's instructions sit inside its slice
    mine = [e for e in inst if e["args"]["op"] == first.name]
    assert min(e["ts"] for e in mine) >= first.start_us and max(e["ts"] + e["dur"] for e in mine) <= first.end_us + 1e-6
    names = {e["args"]["name"] for e in ev if e["ph"] == "M" and e["name"] == "process_name"}
    assert "model resnet50" in names and any(n.startswith("core") for n in names)
    assert len(t.chrome_events("ops")) < len(ev)
    with pytest.raises(ArgumentError, match="detail"):
        t.chrome_events("pipes")


def test_bad_feeds_name_what_was_expected(small):
    ex = Executor(small)
    g = small.graph
    with pytest.raises(GraphError, match="missing x"):
        ex.run({}, "functional")
    with pytest.raises(GraphError, match="not inputs: y"):
        ex.run({g.inputs[0]: _image(g), "y": 1}, "functional")
    with pytest.raises(GraphError, match="fed shape"):
        ex.run({g.inputs[0]: np.zeros((2, 3, 32, 32), np.float32)}, "functional")
    with pytest.raises(ArgumentError, match="mode must be"):
        ex.run(None, "fast")
