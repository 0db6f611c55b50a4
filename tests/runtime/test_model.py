"""A compiled model on the simulated device (npulab.runtime.model): functional runs give what the
reference executor gives for the graph; timing runs simulate each distinct launch once and lay
the tasks out on one stream; the whole-model Chrome trace holds a model track and the cores'
pipes."""
import json

import numpy as np
import pytest

from npulab import GraphError
from npulab.errors import ArgumentError, DeviceMemoryError, OfflineModelError
from npulab.graph import offline, reference, serial, zoo
from npulab.graph.compile import BuildOptions, compile_graph, load_model, save_model
from npulab.ops.tolerance import tol
from npulab.runtime import Device
from npulab.runtime.model import Executor, Model, load_from_file

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


# -- the offline model file and the loaded model ----------------------------------------------
def test_an_offline_model_round_trips_and_runs_the_same(small, tmp_path):
    path = save_model(small, tmp_path / "resnet.om")
    back = load_model(path)
    assert back.chip is small.chip                         # the built-in chip, recognised by its file
    assert [t.to_json() for t in back.tasks] == [t.to_json() for t in small.tasks]
    same = [json.dumps(serial.to_json(m.graph)[0], sort_keys=True) for m in (back, small)]
    assert same[0] == same[1] and back.report == small.report
    assert back.plan.to_json() == small.plan.to_json() and back.plan.check() is not None
    g = small.graph
    x = _image(g)
    a, _ = Executor(small).run({g.inputs[0]: x}, "functional")
    b, _ = load_from_file(path).execute({g.inputs[0]: x})
    for name in g.outputs:
        np.testing.assert_array_equal(a[name], b[name])


def test_a_loaded_model_holds_its_memory_and_copies_in_and_out(small, tmp_path):
    dev = Device("910", 3)
    free0, total = dev.get_mem_info()
    static = compile_graph(small.graph, "910", options=BuildOptions(memory_mode=2))
    m = load_from_file(save_model(static, tmp_path / "m.om"), dev)
    need = m.memory()
    assert need["weights_bytes"] >= sum(a.nbytes for a in small.graph.constants.values())
    assert need["arena_bytes"] == static.plan.peak > 0
    assert free0 - dev.get_mem_info()[0] >= need["weights_bytes"] + need["arena_bytes"]
    _, t = m.execute(None, "timing")
    copies = [r for r in t.records if r.engine == "Memcpy"]
    assert [r.op_type for r in copies] == ["Memcpy"] * 2
    assert copies[0].start_us == 0 and copies[-1].end_us == pytest.approx(t.latency_us)
    assert t.records[1].start_us == pytest.approx(copies[0].end_us)
    m.unload()
    assert dev.get_mem_info()[0] == free0


def test_a_dynamic_model_allocates_as_it_runs(small):
    assert not small.plan.mode.static                      # NPULAB_STATIC_MEMORY unset: 0, dynamic
    dev = Device("910", 0)
    m = Model(small, dev)
    assert m.memory()["arena_bytes"] == 0
    held = dev.get_mem_info()[0]
    m.execute(None, "timing")
    assert m.dynamic_peak_bytes >= small.plan.lower_bound  # page rounding only adds
    assert dev.get_mem_info()[0] == held                   # every buffer freed after the run


def test_a_model_that_does_not_fit_names_its_needs_and_the_fixes(small):
    dev = Device("910", 0)
    free, _ = dev.get_mem_info()
    hog = dev.malloc(free - 64 * 1024)                      # leave 64 KB: the weights do not fit
    with pytest.raises(DeviceMemoryError, match="smaller batch") as exc:
        Model(small, dev)
    assert "weights" in str(exc.value) and "910" in str(exc.value)
    dev.free(hog)
    Model(small, dev).unload()                              # nothing was kept from the failed load


def test_a_model_runs_only_on_the_chip_it_was_compiled_for(small):
    with pytest.raises(ArgumentError, match="compiled for 910"):
        Model(small, Device("910b", 0))
    m = Model(small).npu(device_id=2)
    assert m.device.device_id == 2 and m.device.chip is small.chip


def test_a_damaged_or_foreign_model_file_is_refused(small, tmp_path):
    path = save_model(small, tmp_path / "m.om")
    raw = bytearray(path.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    bad = tmp_path / "bad.om"
    bad.write_bytes(bytes(raw))
    with pytest.raises(OfflineModelError):
        load_from_file(bad)
    other = offline.write(tmp_path / "other.om", {"format": "something else"}, {})
    with pytest.raises(OfflineModelError, match="expected 'npulab offline model'"):
        load_model(other)


def test_fuzzed_compiled_model_files_load_unchanged_or_are_refused(small, tmp_path):
    """Bytes of a real compiled model flipped, cut or inserted: load_model either refuses the
    file with an OfflineModelError or gives back the model that was saved (as the container's
    own 600-case fuzz in tests/graph/test_offline.py, here through the manifest's parsing)."""
    good = save_model(small, tmp_path / "m.om").read_bytes()
    want = json.dumps([t.to_json() for t in small.tasks], sort_keys=True)
    rng = np.random.default_rng(11)
    refused = 0
    for case in range(200):
        raw = bytearray(good)
        kind = case % 3
        at = int(rng.integers(0, len(raw)))
        if kind == 0:
            raw[at] ^= int(rng.integers(1, 256))
        elif kind == 1:
            raw = raw[:at]
        else:
            raw[at:at] = bytes(rng.integers(0, 256, int(rng.integers(1, 9)), dtype=np.uint8))
        path = tmp_path / f"f{case}.om"
        path.write_bytes(bytes(raw))
        try:
            back = load_model(path)
        except OfflineModelError:
            refused += 1
            continue
        assert json.dumps([t.to_json() for t in back.tasks], sort_keys=True) == want
        for k, a in small.graph.constants.items():
            np.testing.assert_array_equal(back.graph.constants[k], a)
    assert refused > 150


def test_executors_can_share_their_launches(small):
    shared = {}
    _, a = Executor(small, shared).run(None, "timing")
    n = len(shared)
    assert n == small.report["tilings"]                    # one trace a distinct kernel launch
    _, b = Executor(small, shared).run(None, "timing")
    assert len(shared) == n and [id(r.trace) for r in a.records] == [id(r.trace) for r in b.records]
