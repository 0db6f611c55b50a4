"""The graph IR (npulab.graph): building a graph keeps it consistent, inference types every value
through the op schemas (the registry's for kernel ops), errors name the node, and a graph
survives JSON + .npz exactly (never pickled)."""
import json

import numpy as np
import pytest

from npulab import GraphError
from npulab.graph import Graph, TensorType, known_op_types, load, save
from npulab.graph import serial


def _mlp():
    g = Graph("mlp")
    x = g.input("x", (2, 4, 8), "float16")
    w = g.constant("w", np.arange(8 * 6, dtype=np.float16).reshape(1, 8, 6).repeat(2, 0))
    y = g.node("BatchMatMul", [x, w], name="fc")
    r = g.node("Relu", [y])
    f = g.node("Reshape", [r], shape=[2, -1])
    s = g.node("SoftmaxV2", [f], dim=-1)
    g.output(s)
    return g.infer()


def test_inference_types_every_value_and_the_dump_shows_them():
    g = _mlp().validate()
    assert g.types["fc"] == TensorType((2, 4, 6), "float16")
    assert g.types["reshape"].shape == (2, 24)
    assert g.types["softmaxv2"] == TensorType((2, 24), "float16")
    text = g.dump()
    assert "%fc: float16[2, 4, 6] = BatchMatMul(%x, %w)  # fc" in text
    assert "shape=[2, -1]" in text and text.splitlines()[-1] == "  return %softmaxv2"
    assert g.producer("fc").op_type == "BatchMatMul" and g.producer("x") is None
    assert [n.name for n in g.consumers("fc")] == ["relu"]
    assert g.op_counts() == {"BatchMatMul": 1, "Relu": 1, "Reshape": 1, "SoftmaxV2": 1}


def test_a_value_read_before_it_is_written_names_the_node():
    g = Graph("bad")
    g.input("x", (4,), "float16")
    with pytest.raises(GraphError, match=r"node 'relu' \(Relu\): input 'y' is not defined yet"):
        g.node("Relu", ["y"])


@pytest.mark.parametrize("build, message", [
    (lambda g: g.input("x", (2,), "float16"), "value 'x' is already defined"),
    (lambda g: g.node("Relu", ["x"], name="r", alpha={"a": 1}), "not a JSON value"),
    (lambda g: g.input("9lives", (2,), "float16"), "not a valid name"),
    (lambda g: g.input("z", (2, -1), "float16"), "whole number >= 0"),
    (lambda g: g.input("z", (2,), "complex64"), "dtype"),
    (lambda g: g.input("z", (2,), "float16", "NZ"), "format 'NZ' is not one of"),
    (lambda g: g.output("nowhere"), "output 'nowhere' is not defined"),
])
def test_building_refuses_what_breaks_the_ir(build, message):
    g = Graph("g")
    g.input("x", (2, 3), "float16")
    with pytest.raises(GraphError, match=message):
        build(g)


@pytest.mark.parametrize("op, attrs, shape, message", [
    ("Reshape", {"shape": [5, -1]}, (2, 3), r"cannot reshape 6 elements"),
    ("Reshape", {"shape": [-1, -1]}, (2, 3), r"one -1"),
    ("Transpose", {"perm": [0, 0]}, (2, 3), r"not a permutation"),
    ("Flatten", {"axis": 4}, (2, 3), r"axis=4 is out of range"),
    ("Reshape", {"shape": [6], "order": "C"}, (2, 3), r"unexpected keyword argument 'order'"),
    ("Frobnicate", {}, (2, 3), r"Op type not supported: Frobnicate\. A graph may hold .*Conv2D"),
    ("SoftmaxV2", {"dim": 5}, (2, 3), r"node 'n' \(SoftmaxV2\): .*dim"),
])
def test_inference_errors_name_the_node_and_the_rule(op, attrs, shape, message):
    g = Graph("g")
    x = g.input("x", shape, "float16")
    g.output(g.node(op, [x], name="n", **attrs))
    with pytest.raises(GraphError, match=message):
        g.infer()


def test_a_kernel_op_refuses_shapes_its_kernel_cannot_take():
    g = Graph("g")
    a, b = g.input("a", (2, 3), "float16"), g.input("b", (3, 2), "float16")
    g.output(g.node("Add", [a, b], name="sum"))
    with pytest.raises(GraphError, match=r"node 'sum' \(Add\)"):
        g.infer()


def test_structural_ops():
    g = Graph("g")
    x = g.input("x", (2, 3, 4), "float16")
    t = g.node("Transpose", [x], perm=[2, 0, 1])
    f = g.node("Flatten", [t], axis=2)
    c = g.node("Concat", [f, f], axis=1)
    k = g.node("Cast", [c], dtype="float32")
    r = g.node("Reshape", [k], shape=[0, -1])
    g.output(g.node("Identity", [r]))
    g.infer().validate()
    assert [g.types[v].shape for v in (t, f, c, r)] == [(4, 2, 3), (8, 3), (8, 6), (8, 6)]
    assert g.types[k].dtype == "float32"
    assert {"Reshape", "Transpose", "Conv2D", "BatchMatMul", "LayerNorm"} <= set(known_op_types())


def test_validate_wants_types_and_outputs():
    g = Graph("g")
    x = g.input("x", (2,), "float16")
    g.node("Relu", [x])
    with pytest.raises(GraphError, match="has no outputs"):
        g.validate()
    g.output("relu")
    with pytest.raises(GraphError, match=r"have no type .*run graph.infer\(\) first"):
        g.validate()
    assert g.infer().validate() is g


def test_a_graph_survives_json_and_npz_exactly(tmp_path):
    g = _mlp()
    jpath, npath = save(g, tmp_path / "mlp")
    h = load(tmp_path / "mlp")
    assert h.dump() == g.dump()
    assert np.array_equal(h.constants["w"], g.constants["w"]) and h.constants["w"].dtype == np.float16
    assert json.loads(jpath.read_text())["format"] == serial.FORMAT
    with np.load(npath, allow_pickle=False) as z:            # plain arrays, no pickled objects
        assert z.files == ["w"]


@pytest.mark.parametrize("edit, message", [
    (lambda d: d.update(format="onnx"), "not an npulab graph document"),
    (lambda d: d.update(version=99), "version 99; this npulab reads version 1"),
    (lambda d: d["constants"].append({"name": "ghost"}), "constant 'ghost' is missing"),
    (lambda d: d["nodes"][1].update(inputs=["nothing"]), "input 'nothing' is not defined yet"),
    (lambda d: d.pop("outputs"), "malformed"),
])
def test_a_bad_document_is_refused_with_what_is_wrong(edit, message):
    doc, arrays = serial.to_json(_mlp())
    doc = json.loads(json.dumps(doc))
    edit(doc)
    with pytest.raises(GraphError, match=message):
        serial.from_json(doc, arrays)


def test_missing_files_are_a_graph_error(tmp_path):
    with pytest.raises(GraphError, match="does not exist"):
        load(tmp_path / "none")


@pytest.mark.parametrize("shape, wshape, attrs", [
    ((2, 3, 9, 7), (4, 3, 3, 3), dict(padding=1, stride=2)),
    ((1, 4, 8, 8), (6, 2, 3, 1), dict(padding="same", groups=2)),
    ((1, 3, 10, 10), (5, 3, 3, 3), dict(dilation=2)),
])
def test_the_graph_conv2d_is_torchs_and_matches_the_golden_shape(shape, wshape, attrs):
    from npulab.ops import golden
    g = Graph("c")
    x = g.input("x", shape, "float16", "NCHW")
    w = g.constant("w", np.ones(wshape, np.float16))
    b = g.constant("b", np.zeros(wshape[0], np.float16))
    g.output(g.node("Conv2D", [x, w, b], **attrs))
    g.infer()
    want = golden.conv2d(np.zeros(shape, np.float16), g.constants["w"], g.constants["b"], **attrs).shape
    assert g.types["conv2d"] == TensorType(want, "float16", "NCHW")


def test_a_graph_conv2d_with_channels_that_do_not_match_is_refused():
    g = Graph("c")
    x = g.input("x", (1, 3, 8, 8), "float16")
    w = g.constant("w", np.ones((4, 5, 3, 3), np.float16))
    g.output(g.node("Conv2D", [x, w], name="stem"))
    with pytest.raises(GraphError, match=r"node 'stem' \(Conv2D\)"):
        g.infer()
