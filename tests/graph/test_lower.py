"""Lowering (npulab.graph.lower): each node goes to the engine that runs it on the chip, in the
kernel's own operand form; an AiCore task launched on the simulator with its operands reshaped
as the task says gives what the reference executor gives for the node."""
import numpy as np
import pytest

from npulab import GraphError
from npulab.chips import get_chip
from npulab.graph import Graph, reference
from npulab.graph.lower import lower, lower_node
from npulab.ops import registry
from npulab.ops.tolerance import tol

RNG = np.random.default_rng(3)


def _graph(dtype="float16"):
    g = Graph("small")
    x = g.input("x", (2, 4, 8, 8), dtype)
    w = g.constant("w", (RNG.standard_normal((8, 4, 3, 3)) * 0.2).astype(dtype))
    b = g.constant("b", RNG.standard_normal(8).astype(dtype))
    y = g.node("Conv2D", [x, w, b], name="conv", padding=1, relu=True)
    p = g.node("ReduceMean", [y], name="gap", axes=[2, 3])
    fw = g.constant("fc.w", (RNG.standard_normal((5, 8)) * 0.3).astype(dtype))
    z = g.node("MatMul", [p, fw], name="fc", transpose_b=True)
    f = g.node("Reshape", [z], name="flat", shape=[10])
    idx = g.constant("idx", np.array([0, 3], np.int64))
    g.output(g.node("GatherV2", [f, idx], name="pick"))
    return g.infer()


def test_each_node_goes_to_its_engine():
    tasks = lower(_graph(), "910")
    assert [(t.name, t.engine, t.kernel) for t in tasks] == [
        ("conv", "AiCore", "Conv2D"), ("gap", "AiCpu", None) if "ReduceMean" not in registry.op_types()
        else ("gap", "AiCore", "ReduceMean"), ("fc", "AiCore", "BatchMatMul"), ("flat", "None", None),
        ("pick", "AiCpu", None)]
    conv = tasks[0]
    assert conv.operands[0].shape == [2, 4, 1, 8, 8] and conv.attrs["pads"] == [[0, 0], [1, 1], [1, 1]]
    assert conv.operands[2].dtype == "float32"               # the bias in the accumulator's dtype
    fc = tasks[2]
    assert fc.operands[0].shape == [1, 2, 8] and fc.operands[1].shape == [1, 5, 8] and fc.attrs["trans_b"]


def test_aicore_tasks_on_the_simulator_match_the_reference():
    g = _graph()
    feeds = {"x": RNG.standard_normal((2, 4, 8, 8)).astype(np.float16)}
    want = reference.run(g, feeds, keep=True)
    for t in lower(g, "910"):
        if t.engine != "AiCore" or t.kernel is None:
            continue
        arrays = [np.ascontiguousarray(want[o.value].astype(o.dtype).reshape(o.shape)) for o in t.operands]
        y, _ = registry.dispatch(t.kernel, *arrays, chip="910", **t.kernel_attrs())
        out = want[t.outputs[0]]
        unit = "cube" if t.kernel in ("Conv2D", "BatchMatMul") else "vector"
        np.testing.assert_allclose(y.reshape(out.shape).astype(np.float64), out.astype(np.float64),
                                   **tol(out.dtype, unit))


def test_gelu_matmul_is_one_mix_kernel_on_the_910b_and_two_tasks_on_the_910():
    g = Graph("mlp")
    x = g.input("x", (2, 16, 32), "float16")
    w = g.constant("w", np.zeros((32, 64), np.float16))
    g.output(g.node("MatMul", [x, w], name="fc", activation="gelu_tanh"))
    g.infer()
    assert [(t.kernel, t.outputs) for t in lower(g, "910b")] == [("FusedMatMul", ["fc"])]
    assert [(t.kernel, t.outputs) for t in lower(g, "910")] == [("BatchMatMul", ["fc/pre_gelu"]), ("Gelu", ["fc"])]


def test_an_op_no_engine_runs_is_named():
    g = Graph("odd")
    x = g.input("x", (4,), "float32")
    g.output(g.node("Relu", [x]))
    g.infer()
    g.output(g.node("Relu", [x], name="second"))
    g.infer()
    g.nodes[0].op_type = "Mystery"
    g.nodes[1].op_type = "Riddle"
    with pytest.raises(GraphError, match=r"node 'relu' \(Mystery\): Op type not supported: Mystery"):
        lower_node(g, g.nodes[0], "910")
    with pytest.raises(GraphError) as err:
        lower(g, "910")          # every node no engine runs, at once
    msg = str(err.value)
    assert msg.startswith("Op type not supported: Mystery, Riddle") and "node 'second' (Riddle)" in msg


def test_every_chip_has_an_aicpu_engine():
    for name in ("910", "910b", "310", "teach"):
        cpu = get_chip(name).aicpu
        assert cpu.cores > 0 and cpu.task_us(0) == cpu.task_start_us and cpu.task_us(8 << 20) > cpu.task_us(1 << 20)


def test_resnet50_lowers_with_all_its_cube_and_vector_work_on_the_ai_core():
    from collections import Counter
    from npulab.graph import zoo
    tasks = lower(zoo.build("resnet50"), "910")
    engines = Counter((t.engine, t.kernel) for t in tasks)
    assert engines[("AiCore", "Conv2D")] == 53 and engines[("AiCore", "BatchNorm")] == 53
    assert engines[("AiCore", "BatchMatMul")] == 1 and engines[("AiCore", "Add")] == 16
    assert {t.name for t in tasks if t.engine == "AiCpu"} <= {"avgpool"}     # until ReduceMean has a kernel
