"""The reference executor (npulab.graph.reference): every op type a graph may hold has a numpy
meaning, checked here against PyTorch on the CPU (float32 and float64: the reference computes
in float64 and rounds once per node), and the framework-level schemas (npulab.graph.forms)
refuse what they cannot take, naming the node."""
import numpy as np
import pytest
import torch

from npulab import GraphError
from npulab.graph import Graph, known_op_types, reference
from npulab.graph.reference import REFERENCES

RNG = np.random.default_rng(7)


def _x(*shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


def _run(op_type, arrays, outputs=1, **attrs):
    """A one-node graph of ``op_type`` over ``arrays`` (the first a graph input, the rest
    constants); returns the node's outputs."""
    g = Graph("one")
    names = [g.input("x0", arrays[0].shape, str(arrays[0].dtype))] if arrays else []
    names += [g.constant(f"c{i}", a) for i, a in enumerate(arrays[1:], 1)]
    out = g.node(op_type, names, outputs=outputs, **attrs)
    outs = out if isinstance(out, list) else [out]
    g.output(*outs)
    g.infer().validate()
    got = reference.run(g, {"x0": arrays[0]} if arrays else {})
    return [got[o] for o in outs]


def test_every_op_type_a_graph_may_hold_has_a_reference():
    assert set(known_op_types()) <= set(REFERENCES)


T = torch.from_numpy
CASES = [
    ("Add", [_x(2, 3, 4), _x(4)], {}, lambda a, b: a + b),
    ("Sub", [_x(2, 1, 4), _x(3, 1)], {}, lambda a, b: a - b),
    ("RealDiv", [_x(5, 6), np.full((6,), 3.0, np.float32)], {}, lambda a, b: a / b),
    ("Pow", [np.abs(_x(4, 4)) + 0.5, np.float32([[2.0]])], {}, torch.pow),
    ("Maximum", [_x(3, 5), _x(3, 5)], {}, torch.maximum),
    ("Erf", [_x(64)], {}, torch.erf),
    ("Tanh", [_x(64)], {}, torch.tanh),
    ("Sigmoid", [_x(64) * 30], {}, torch.sigmoid),
    ("Rsqrt", [np.abs(_x(64)) + 0.1], {}, torch.rsqrt),
    ("MatMul", [_x(2, 3, 4, 5), _x(3, 6, 5), _x(6)], {"transpose_b": True},
     lambda a, b, c: a @ b.transpose(-1, -2) + c),
    ("MatMul", [_x(4, 5), _x(5, 3), _x(3)], {"activation": "gelu_tanh"},
     lambda a, b, c: torch.nn.functional.gelu(a @ b + c, approximate="tanh")),
    ("ReduceMean", [_x(2, 3, 7, 7)], {"axes": [2, 3], "keep_dims": True},
     lambda a: a.mean(dim=(2, 3), keepdim=True)),
    ("ReduceMax", [_x(4, 9)], {"axes": [-1]}, lambda a: a.amax(-1)),
    ("ReduceSum", [_x(4, 9)], {}, lambda a: a.sum()),
    ("Slice", [_x(6, 10)], {"starts": [1, -8], "ends": [100, -1], "axes": [0, 1], "steps": [2, 3]},
     lambda a: a[1::2, -8:-1:3]),
    ("Slice", [_x(6, 10)], {"starts": [-1], "ends": [-100], "axes": [1], "steps": [-2]},
     lambda a: torch.flip(a, [1])[:, 0::2]),
    ("Expand", [_x(3, 1)], {"shape": [2, -1, 4]}, lambda a: a.expand(2, -1, 4)),
    ("Pad", [_x(2, 3)], {"pads": [0, 1, 1, 2], "value": 0.5}, lambda a: torch.nn.functional.pad(a, (1, 2, 0, 1), value=0.5)),
    ("Cumsum", [_x(3, 8)], {"axis": 1}, lambda a: torch.cumsum(a, 1)),
    ("Transpose", [_x(2, 3, 4)], {"perm": [2, 0, 1]}, lambda a: a.permute(2, 0, 1)),
    ("Unsqueeze", [_x(2, 3)], {"axes": [0, -1]}, lambda a: a[None, :, :, None]),
    ("Squeeze", [_x(1, 3, 1)], {"axes": [0]}, lambda a: a.squeeze(0)),
    ("LayerNorm", [_x(2, 5, 16), _x(16), _x(16)],
     {"normalized_shape": [16], "eps": 1e-5, "has_weight": True, "has_bias": True},
     lambda a, w, b: torch.nn.functional.layer_norm(a, (16,), w, b)),
    ("SoftmaxV2", [_x(3, 11)], {"dim": -1}, lambda a: torch.softmax(a, -1)),
    ("Gelu", [_x(40)], {"approximate": "tanh"}, lambda a: torch.nn.functional.gelu(a, approximate="tanh")),
    ("Conv2D", [_x(1, 3, 9, 9), _x(4, 3, 3, 3), _x(4)], {"stride": 2, "padding": 1},
     lambda a, w, b: torch.nn.functional.conv2d(a, w, b, 2, 1)),
    ("MaxPool", [_x(1, 2, 8, 8)], {"kernel_size": 3, "stride": 2, "padding": 1},
     lambda a: torch.nn.functional.max_pool2d(a, 3, 2, 1)),
]


@pytest.mark.parametrize("op_type, arrays, attrs, oracle", CASES, ids=[c[0] for c in CASES])
def test_reference_matches_pytorch(op_type, arrays, attrs, oracle):
    """float32: the reference rounds the float64 value once, torch computes in float32 with
    its own order: within a few float32 ulps of the values' scale."""
    got = _run(op_type, arrays, **attrs)[0]
    want = oracle(*[T(a.copy()) for a in arrays]).numpy()
    assert got.dtype == np.float32 and got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=2e-6 * max(1.0, float(np.abs(want).max())))


def test_gather_select_split_range_fill_compare():
    table, idx = _x(10, 4), np.array([[1, 9], [0, -1]], np.int64)
    (got,) = _run("GatherV2", [table, idx], axis=0)
    np.testing.assert_array_equal(got, torch.nn.functional.embedding(T(idx % 10), T(table)).numpy())
    a, b = _x(3, 4), _x(4)
    (mask,) = _run("Less", [a, b])
    assert mask.dtype == np.bool_ and np.array_equal(mask, a < b)
    (sel,) = _run("Select", [mask, a, np.zeros(4, np.float32)])
    np.testing.assert_array_equal(sel, torch.where(T(mask), T(a), torch.zeros(4)).numpy())
    parts = _run("Split", [_x(2, 7)], outputs=3, axis=1, sizes=[2, 4, 1])
    assert [p.shape for p in parts] == [(2, 2), (2, 4), (2, 1)]
    (r,) = _run("Range", [], start=2, limit=11, delta=3, dtype="int64")
    assert r.dtype == np.int64 and r.tolist() == [2, 5, 8]
    (f,) = _run("Fill", [], shape=[2, 2], value=-1e9, dtype="float16")
    assert f.dtype == np.float16 and np.all(np.isneginf(f))        # -1e9 overflows fp16, as in torch


def test_float16_graphs_round_at_every_node():
    """Two adds of 1/3 in float16: the reference rounds after each, so it equals fp16
    arithmetic step by step, not the float64 sum rounded once."""
    g = Graph("fp16")
    x = g.input("x", (1,), "float16")
    c = g.constant("c", np.float16([1 / 3]))
    g.output(g.node("Add", [g.node("Add", [x, c]), c]))
    g.infer()
    got = reference.run(g, {"x": np.float16([1.0])})["add_1"]
    assert got.dtype == np.float16
    assert got[0] == (np.float16(1.0) + np.float16(1 / 3)) + np.float16(1 / 3)


def test_bfloat16_rounds_to_nearest_even():
    g = Graph("bf16")
    x = g.input("x", (2,), "float32")
    g.output(g.node("Cast", [x], dtype="bfloat16"))
    g.infer()
    got = reference.run(g, {"x": np.float32([1 + 2 ** -8, 1 + 3 * 2 ** -8])})["cast"]
    np.testing.assert_array_equal(got, np.float32([1.0, 1 + 2 ** -6]))


@pytest.mark.parametrize("op_type, shapes, attrs, message", [
    ("Add", [(2, 3), (4,)], {}, r"node 'add' \(Add\): shapes \(2, 3\) and \(4,\) do not broadcast"),
    ("MatMul", [(2, 3), (4, 5)], {}, r"inner dimensions differ: a float32\[2, 3\] gives K=3"),
    ("MatMul", [(3,), (3, 5)], {}, "rank >= 2"),
    ("MatMul", [(2, 3), (3, 5)], {"activation": "tanh"}, "activation 'tanh' is not one of relu"),
    ("ReduceSum", [(2, 3)], {"axes": [2]}, r"axes=2 is out of range for a rank-2 input"),
    ("Squeeze", [(2, 3)], {"axes": [1]}, "axis 1 of float32\\[2, 3\\] is 3, not 1"),
    ("Split", [(2, 7)], {"axis": 1, "sizes": [3, 3]}, r"sizes \[3, 3\] do not add up to axis 1's 7"),
    ("Expand", [(3, 2)], {"shape": [3, 4]}, "cannot expand"),
    ("Pad", [(2, 3)], {"pads": [1, 1]}, "pads must be 4 numbers"),
    ("Exp", [(2,)], {}, None),
])
def test_schemas_refuse_what_they_cannot_take(op_type, shapes, attrs, message):
    g = Graph("bad")
    ins = [g.input(f"x{i}", s, "float32") for i, s in enumerate(shapes)]
    g.node(op_type, ins, **attrs)
    if message is None:
        g.infer()                     # the control: a good node infers
        return
    with pytest.raises(GraphError, match=message):
        g.infer()


def test_mixed_dtypes_and_int_unary_are_refused():
    g = Graph("bad")
    a, b = g.input("a", (2,), "float32"), g.input("b", (2,), "float16")
    g.node("Mul", [a, b])
    with pytest.raises(GraphError, match="dtypes float32, float16; they must be one dtype"):
        g.infer()
    g = Graph("bad")
    g.node("Tanh", [g.input("i", (2,), "int32")])
    with pytest.raises(GraphError, match="takes float16 or float32 or bfloat16, got int32"):
        g.infer()


def test_feeds_are_checked_and_gather_bounds_named():
    g = Graph("feeds")
    x = g.input("x", (2, 3), "float32")
    g.output(g.node("Relu", [x]))
    g.infer()
    with pytest.raises(GraphError, match="no value fed for input x"):
        reference.run(g, {})
    with pytest.raises(GraphError, match=r"input 'x' is float32\[2, 3\], fed shape \(3, 2\)"):
        reference.run(g, {"x": np.zeros((3, 2), np.float32)})
    with pytest.raises(GraphError, match=r"node 'gatherv2' \(GatherV2\): an index is outside \[-4, 4\)"):
        _run("GatherV2", [_x(4, 2), np.array([4], np.int64)])
