"""from_onnx and parse_input_shape: the hand-written ResNet-50 exported by torch.onnx.export
(the TorchScript exporter, which needs no network) imports and matches torch on the reference
executor, with its BatchNorms folded into the convs (the exporter's default) and kept
(TrainingMode.PRESERVE); small models built with onnx.helper check symbolic dims, known
shape inputs and the report of unsupported nodes."""
import io

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper

import torch_models
from npulab.errors import ArgumentError, GraphError, UnsupportedOpError
from npulab.graph import from_onnx, parse_input_shape, reference
from npulab.graph.lower import lower
from npulab.ops.tolerance import tol

FP32 = tol("float32", "cube")


def _export(model, x, **kw) -> onnx.ModelProto:
    f = io.BytesIO()
    torch.onnx.export(model, (x,), f, dynamo=False, input_names=["input"], output_names=["logits"], **kw)
    return onnx.load_from_string(f.getvalue())


@pytest.fixture(scope="module")
def resnet():
    model = torch_models.resnet50(widths=(8, 16, 32, 64), num_classes=10)
    x = torch.randn(2, 3, 64, 64, generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        expected = model(x).numpy()
    return model, x, expected


@pytest.mark.parametrize("training", ["EVAL", "PRESERVE"])
def test_exported_resnet50_matches_torch(resnet, training):
    model, x, expected = resnet
    kw = {} if training == "EVAL" else dict(training=torch.onnx.TrainingMode.PRESERVE, do_constant_folding=False)
    g = from_onnx(_export(model, x, **kw))
    counts = g.op_counts()
    assert counts["Conv2D"] == 53 and counts["Add"] == 16 and counts["MatMul"] == 1
    assert counts.get("BatchNorm", 0) == (0 if training == "EVAL" else 53)   # folded, or kept
    (y,) = reference.run(g, {"input": x.numpy()}).values()
    np.testing.assert_allclose(y, expected, **FP32)
    assert {t.engine for t in lower(g, "910b")} <= {"AiCore", "AiCpu", "None"}


class _LastHidden(torch.nn.Module):
    """A transformers model called with keywords, returning last_hidden_state (what the ONNX
    exporter traces: positional tensors in, a tensor out)."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask):
        return self.model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state


def _transformer(kind):
    from transformers import BertConfig, BertModel, GPT2Config, GPT2Model
    torch.manual_seed(0)
    if kind == "bert":
        return BertModel(BertConfig(vocab_size=120, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                    intermediate_size=64, max_position_embeddings=32, attn_implementation="eager"))
    return GPT2Model(GPT2Config(vocab_size=120, n_embd=32, n_layer=2, n_head=4, n_positions=32, use_cache=False,
                                bos_token_id=0, eos_token_id=0, attn_implementation="eager"))


@pytest.mark.parametrize("kind", ["bert", "gpt2"])
def test_exported_transformers_match_torch(kind):
    model = _LastHidden(_transformer(kind)).eval()
    gen = torch.Generator().manual_seed(6)
    ids = torch.randint(0, 120, (2, 10), generator=gen)
    mask = torch.ones(2, 10, dtype=torch.long)
    mask[1, 4:] = 0
    f = io.BytesIO()
    torch.onnx.export(model, (ids, mask), f, dynamo=False, input_names=["input_ids", "attention_mask"],
                      output_names=["last_hidden_state"])
    model.eval()               # the exporter restores the wrapper's mode, which a new module had as training
    g = from_onnx(onnx.load_from_string(f.getvalue()))
    # the exporter's mask and position arithmetic on constants is folded at import
    assert "LayerNorm" in g.op_counts() and "SoftmaxV2" in g.op_counts() and "GatherV2" in g.op_counts()
    (y,) = reference.run(g, {"input_ids": ids.numpy(), "attention_mask": mask.numpy()}).values()
    with torch.no_grad():
        np.testing.assert_allclose(y, model(ids, mask).numpy(), **FP32)


def test_a_file_path_imports_and_a_bad_one_is_a_clear_error(resnet, tmp_path):
    model, x, expected = resnet
    path = tmp_path / "resnet.onnx"
    onnx.save(_export(model, x), str(path))
    g = from_onnx(path)
    (y,) = reference.run(g, {"input": x.numpy()}).values()
    np.testing.assert_allclose(y, expected, **FP32)
    (tmp_path / "junk.onnx").write_bytes(b"\x01not a model")
    for bad in (tmp_path / "missing.onnx", tmp_path / "junk.onnx"):
        with pytest.raises(GraphError, match="cannot read an ONNX model"):
            from_onnx(bad)


def _mlp(batch="batch", extra_nodes=()):
    """x (batch, 4) -> Reshape(shape from Shape/Gather/Concat) -> MatMul -> Add -> Relu."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((4, 3)).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.standard_normal(3).astype(np.float32), "b")
    zero = numpy_helper.from_array(np.int64([0]), "zero")
    minus1 = numpy_helper.from_array(np.int64([-1]), "minus1")
    nodes = [helper.make_node("Shape", ["x"], ["s"], name="shape"),
             helper.make_node("Gather", ["s", "zero"], ["n"], name="n", axis=0),
             helper.make_node("Concat", ["n", "minus1"], ["new_shape"], name="cat", axis=0),
             helper.make_node("Reshape", ["x", "new_shape"], ["x2"], name="reshape"),
             helper.make_node("MatMul", ["x2", "w"], ["y"], name="fc/MatMul"),
             helper.make_node("Add", ["y", "b"], ["z"], name="fc/Add"),
             helper.make_node("Relu", ["z"], ["out"], name="relu"), *extra_nodes]
    outs = [helper.make_tensor_value_info("out", TensorProto.FLOAT, [batch, 3])]
    outs += [helper.make_tensor_value_info(n.output[0], TensorProto.FLOAT, None) for n in extra_nodes]
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 4])],
                              outs, [w, b, zero, minus1])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_a_symbolic_dim_needs_input_shape():
    model = _mlp()
    with pytest.raises(GraphError, match="input_shape='x:1,4'"):
        from_onnx(model)
    g = from_onnx(model, "x:5,4")
    assert g.type_of("x").shape == (5, 4)
    # the reshape's shape is computed from Shape: known at import, an attribute in the graph
    assert g.op_counts() == {"Reshape": 1, "MatMul": 1, "Add": 1, "Relu": 1}
    x = np.random.default_rng(1).standard_normal((5, 4)).astype(np.float32)
    init = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    (y,) = reference.run(g, {"x": x}).values()
    np.testing.assert_allclose(y, np.maximum(x @ init["w"] + init["b"], 0), **FP32)
    with pytest.raises(GraphError, match="does not take"):
        from_onnx(model, "x:5,4;y:1")
    with pytest.raises(GraphError, match="declares"):
        from_onnx(_mlp(batch=2), {"x": (5, 4)})


def test_every_unsupported_node_is_reported_at_once():
    extra = (helper.make_node("Hardmax", ["out"], ["h"], name="head/hardmax"),
             helper.make_node("Einsum", ["h", "out"], ["e"], name="head/einsum", equation="ij,ij->ij"),
             helper.make_node("LpNormalization", ["out"], ["l"], name="head/lpnorm"))
    with pytest.raises(UnsupportedOpError) as info:
        from_onnx(_mlp(batch=2, extra_nodes=extra))
    assert str(info.value).splitlines() == [
        "Op type not supported: Hardmax (node 'head/hardmax')",
        "Op type not supported: Einsum (node 'head/einsum')",
        "Op type not supported: LpNormalization (node 'head/lpnorm')"]


def test_parse_input_shape_reads_atcs_spelling():
    assert parse_input_shape("input:1,3,224,224;mask:1,128") == {"input": (1, 3, 224, 224), "mask": (1, 128)}
    assert parse_input_shape(" x:2 ; ") == {"x": (2,)}
    assert parse_input_shape("scope/in:0:1,2") == {"scope/in:0": (1, 2)}   # the last colon splits
    assert parse_input_shape({"x": [1, 2]}) == {"x": (1, 2)}
    for bad in ("input=1,3,224,224", "input:1,3,,224", "input:1;input:2", "x:-1,3", "", "x:a"):
        with pytest.raises(ArgumentError, match="input_shape") as info:
            parse_input_shape(bad)
        if bad != "input:1;input:2":
            assert "name:d0,d1,...;name2:d0,..." in str(info.value)
