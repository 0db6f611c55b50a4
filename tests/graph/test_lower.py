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
        ("conv", "AiCore", "Conv2D"), ("gap", "AiCore", "ReduceMean"), ("fc", "AiCore", "BatchMatMul"),
        ("flat", "None", None), ("pick", "AiCpu", None)]
    assert tasks[1].attrs == {"axes": [2, 3]}                 # the global average pool: H, W of NCHW
    conv = tasks[0]
    assert conv.operands[0].shape == [2, 4, 1, 8, 8] and conv.attrs["pads"] == [[0, 0], [1, 1], [1, 1]]
    assert conv.operands[2].dtype == "float32"               # the bias in the accumulator's dtype
    fc = tasks[2]
    assert fc.operands[0].shape == [1, 2, 8] and fc.operands[1].shape == [1, 5, 8] and fc.attrs["trans_b"]


def _check_aicore_tasks(g, feeds, chip="910"):
    """Every AiCore kernel task of ``g`` launched on the simulator with its operands as the task
    says gives the reference executor's value within the tolerance table; returns the tasks."""
    want = reference.run(g, feeds, keep=True)
    tasks = lower(g, chip)
    for t in tasks:
        if t.engine != "AiCore" or t.kernel is None:
            continue
        arrays = [np.ascontiguousarray(want[o.value].astype(o.dtype).reshape(o.shape)) for o in t.operands]
        y, _ = registry.dispatch(t.kernel, *arrays, chip=chip, **t.kernel_attrs())
        out = want[t.outputs[0]]
        unit = "cube" if t.kernel in ("Conv2D", "BatchMatMul") else "vector"
        assert y.size == out.size and y.dtype == out.dtype, (t.name, y.shape, out.shape, y.dtype, out.dtype)
        if unit == "vector":                     # the vector kernels' outputs have the graph's shapes
            assert y.shape == out.shape, (t.name, y.shape, out.shape)
        np.testing.assert_allclose(y.reshape(out.shape).astype(np.float64), out.astype(np.float64), **tol(out.dtype, unit),
                                   err_msg=t.name)
    return tasks


def test_aicore_tasks_on_the_simulator_match_the_reference():
    _check_aicore_tasks(_graph(), {"x": RNG.standard_normal((2, 4, 8, 8)).astype(np.float16)})


UNARY = ("Neg", "Exp", "Log", "Sqrt", "Rsqrt", "Reciprocal", "Abs", "Tanh", "Sigmoid", "Erf")


@pytest.mark.parametrize("dtype", ["float16", "float32"])
def test_the_framework_math_runs_on_its_vector_kernels(dtype):
    g = Graph("math")
    x = g.input("x", (2, 3, 5, 7), dtype)
    p = g.input("p", (2, 3, 5, 7), dtype)                    # positive: the domain of Log, Sqrt, Rsqrt
    row = g.constant("row", (RNG.uniform(0.5, 2.0, 7)).astype(dtype))
    for op in ("Sub", "RealDiv", "Maximum", "Minimum"):
        g.output(g.node(op, [x, row], name=op.lower()))
        g.output(g.node(op, [row, x], name=op.lower() + "_swapped"))
    for op in UNARY:
        g.output(g.node(op, [p if op in ("Log", "Sqrt", "Rsqrt") else x], name=op.lower()))
    for e, name in ((2.0, "square"), (0.5, "root"), (-1.5, "general")):
        c = g.constant(name + ".e", np.array(e, dtype))
        g.output(g.node("Pow", [x if e == 2.0 else p, c], name="pow_" + name))
    for op in ("ReduceSum", "ReduceMean", "ReduceMax"):
        g.output(g.node(op, [x], name=op.lower() + "_hw", axes=[2, 3]))
        g.output(g.node(op, [x], name=op.lower() + "_c", axes=[1], keep_dims=True))
        g.output(g.node(op, [x], name=op.lower() + "_all", axes=[]))
    other = "float32" if dtype == "float16" else "float16"
    g.output(g.node("Cast", [x], name="cast", dtype=other))
    g.infer()
    feeds = {"x": RNG.standard_normal((2, 3, 5, 7)).astype(dtype),
             "p": RNG.uniform(0.2, 3.0, (2, 3, 5, 7)).astype(dtype)}
    tasks = _check_aicore_tasks(g, feeds)
    assert all(t.engine == "AiCore" and t.kernel is not None for t in tasks), \
        [(t.name, t.engine) for t in tasks if t.engine != "AiCore"]
    kernel = {t.name: (t.kernel, t.attrs) for t in tasks}
    assert kernel["pow_square"] == ("Pows", {"exponent": 2.0}) and kernel["pow_general"] == ("Pows", {"exponent": -1.5})
    assert kernel["reducemax_c"] == ("ReduceMax", {"axes": [1], "keep_dims": True})
    assert kernel["cast"] == ("Cast", {"dst_type": other})
    pows = next(t for t in tasks if t.name == "pow_root")
    assert [o.value for o in pows.operands] == ["p"]          # the exponent is an attribute, not an operand


def test_math_the_vector_kernels_do_not_take_stays_on_the_ai_cpu():
    g = Graph("ints")
    i = g.input("i", (4, 6), "int32")
    x = g.input("x", (4, 6), "float32")
    b = g.input("b", (4, 6), "bfloat16")
    g.output(g.node("Sub", [i, i], name="int_sub"))
    g.output(g.node("ReduceSum", [i], name="int_sum", axes=[1]))
    g.output(g.node("Exp", [b], name="bf16_exp"))
    g.output(g.node("Pow", [x, x], name="tensor_pow"))                  # a tensor exponent
    g.output(g.node("Cast", [i], name="int_cast", dtype="float32"))
    g.output(g.node("Cast", [x], name="bf16_cast", dtype="bfloat16"))
    g.infer()
    engines = {t.name: (t.engine, t.kernel) for t in lower(g, "910")}
    assert engines == {"int_sub": ("AiCpu", None), "int_sum": ("AiCpu", None), "bf16_exp": ("AiCpu", None),
                       "tensor_pow": ("AiCpu", None), "int_cast": ("AiCore", None), "bf16_cast": ("AiCore", None)}


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
    assert not [t.name for t in tasks if t.engine == "AiCpu"]          # the global average pool included
    assert engines[("AiCore", "ReduceMean")] == 1


def test_a_gather_moves_the_rows_it_picks_not_the_table():
    g = Graph("embed")
    ids = g.input("ids", (2, 16), "int64")
    table = g.constant("table", np.zeros((30000, 64), np.float16))
    g.output(g.node("GatherV2", [table, ids], name="embed", axis=0))
    g.infer()
    (task,) = lower(g, "910")
    rows = 2 * 16 * 64 * 2                                   # the output: 32 rows of 64 fp16
    assert task.engine == "AiCpu" and task.bytes_moved == 2 * rows + 2 * 16 * 8


def test_integer_adds_and_muls_run_on_the_ai_cpu():
    g = Graph("index")
    i = g.input("i", (4,), "int64")
    one = g.constant("one", np.ones(4, np.int64))
    g.output(g.node("Mul", [g.node("Add", [i, one], name="add"), one], name="mul"))
    g.infer()
    assert [(t.engine, t.kernel) for t in lower(g, "910")] == [("AiCpu", None), ("AiCpu", None)]
