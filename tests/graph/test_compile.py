"""The compile step (npulab.graph.compile): every distinct AI Core task gets its tiling once and
carries its tiles; the build options (the seeds' fixed tiling, single buffering, ATC's
--enable_small_channel) reach the tasks' attributes and change what the launches do."""
import numpy as np
import pytest

from npulab import GraphError
from npulab.errors import ArgumentError
from npulab.graph import Graph, memory, zoo
from npulab.graph.compile import SEED_MATMUL, BuildOptions, compile_graph, task_key
from npulab.kernels.conv.tiling import ConvTiles
from npulab.ops import registry
from npulab.runtime.model import Executor

SMALL = dict(batch=1, image=32, num_classes=10, seed=0, widths=(8, 16, 16, 16), blocks=(1, 1, 1, 1))


@pytest.fixture(scope="module")
def graph():
    return zoo.build("resnet50", dtype="float16", **SMALL).infer()


def test_every_cube_task_carries_its_tiles(graph):
    cm = compile_graph(graph, "910")
    cube = [t for t in cm.tasks if t.kernel in ("Conv2D", "BatchMatMul")]
    assert cube and all(t.attrs["tiles"]["family"] in ("conv", "matmul") for t in cube)
    conv = next(t for t in cube if t.kernel == "Conv2D")
    assert isinstance(conv.launch_attrs()["tiling"], ConvTiles) and "tiles" not in conv.launch_attrs()
    assert cm.report["tilings"] == len({task_key(t) for t in cm.tasks if t.engine == "AiCore" and t.kernel})
    assert cm.report["nodes_before"] == cm.report["nodes_after"] == len(graph.nodes)
    assert "AiCore" in cm.summary() and sum(cm.report["engines"].values()) == len(cm.tasks)


def test_the_seed_build_uses_fixed_tiles_and_single_buffers(graph):
    cm = compile_graph(graph, "910", options=BuildOptions(tiling="seed", buffers=1))
    conv = [t for t in cm.tasks if t.kernel == "Conv2D"]
    tiles = {(t.attrs["tiles"]["tiles"]["tile_m"], t.attrs["tiles"]["tiles"]["l1_buffers"]) for t in conv}
    assert tiles == {(128, 1)}
    fc = next(t for t in cm.tasks if t.kernel == "BatchMatMul")
    assert fc.attrs["tiling"] == [*SEED_MATMUL, 1, 1, 1] and fc.attrs["tiles"]["tiles"]["l0_buffers"] == 1
    assert all(t.attrs["buffer_num"] == 1 for t in cm.tasks if t.kernel == "Add")


def test_single_buffering_and_fixed_tiles_cost_time(graph):
    runs = {}
    for opts in (BuildOptions(), BuildOptions(tiling="seed", buffers=2), BuildOptions(tiling="seed", buffers=1)):
        _, t = Executor(compile_graph(graph, "910", options=opts)).run(None, "timing")
        runs[opts] = t.time_by("op_type")["Conv2D"]
    searched, seed2, seed1 = runs.values()
    assert searched < seed2 < seed1


def test_small_channel_selects_the_c04_stem_as_atc_does(graph):
    off = compile_graph(graph, "910")
    on = compile_graph(graph, "910", options=BuildOptions(small_channel=True))
    stem_off, stem_on = off.tasks[0], on.tasks[0]
    assert stem_off.name == "conv1" and stem_off.attrs["c04"] is False and "c04" not in stem_on.attrs
    x = np.random.default_rng(0).standard_normal(graph.type_of("x").shape).astype("float16")
    a, _ = Executor(off).run({"x": x}, "functional")
    b, _ = Executor(on).run({"x": x}, "functional")
    # one network in fp16 with two summation orders of the stem's K: within 2% of each other
    np.testing.assert_allclose(a["fc"].astype(np.float32), b["fc"].astype(np.float32), rtol=2e-2, atol=2e-2)
    problems = [registry.dispatcher.tiling(registry.lookup("Conv2D"), t.specs(), off.chip, t.launch_attrs()).problem
                for t in (stem_off, stem_on)]
    assert [p.c04 for p in problems] == [False, True]


def test_bad_options_and_untyped_graphs_are_refused():
    with pytest.raises(ArgumentError, match="tiling must be"):
        BuildOptions(tiling="fast")
    with pytest.raises(ArgumentError, match="buffers must be"):
        BuildOptions(buffers=3)
    g = Graph("untyped")
    x = g.input("x", (4,), "float16")
    g.output(g.node("Relu", [x]))
    with pytest.raises(GraphError, match="graph.infer"):
        compile_graph(g, "910")


def test_a_static_build_keeps_the_smaller_of_the_two_planners_arenas(graph):
    cm = compile_graph(graph, "910", options=BuildOptions(memory_mode=2))
    peaks = {p: memory.plan_memory(cm.graph, "910", planner=p, mode=2).peak for p in ("best_fit", "greedy_by_size")}
    assert cm.plan.mode.static and cm.plan.peak == min(peaks.values()) and cm.plan.planner in peaks
    assert cm.report["feature_bytes"] == cm.plan.peak <= cm.plan.total_bytes
    assert not compile_graph(graph, "910", options=BuildOptions(memory_mode=0)).plan.mode.static
