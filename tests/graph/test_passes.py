"""Graph optimisation passes (npulab.graph.passes): each rule rewrites what it says and nothing
else, the reference executor gives the same outputs before and after (BN folding to float32
rounding), the input graph is never changed, and the fusion switch file turns each rule off in
both public forms."""
import json

import numpy as np
import pytest

from npulab import GraphError, NpuError
from npulab.graph import Graph, reference
from npulab.graph.lower import lower
from npulab.graph.passes import ORDER, RULES, FusionSwitches, gm_bytes, optimize, run_rule
from npulab.graph.zoo.resnet import resnet50
from npulab.ops import registry
from npulab.ops.tolerance import tol

RNG = np.random.default_rng(16)


def _rand(*shape, dtype="float32", scale=1.0):
    return (RNG.standard_normal(shape) * scale).astype(dtype)


def _feeds(g):
    return {v: _rand(*g.types[v].shape, dtype=g.types[v].dtype) for v in g.inputs}


def _same_outputs(g1, g2, feeds, **tolerance):
    a, b = reference.run(g1, feeds), reference.run(g2, feeds)
    assert list(a) == list(b)                     # the outputs keep their names
    for k in a:
        np.testing.assert_allclose(b[k], a[k], **tolerance)


# -- one small graph per rule, each holding the pattern the rule rewrites ------------------------
def conv_bn(dtype="float32", bias=True, relu=True):
    g = Graph("conv_bn")
    x = g.input("x", (2, 4, 8, 8), dtype)
    w = g.constant("w", _rand(6, 4, 3, 3, dtype=dtype, scale=0.3))
    ins = [x, w, g.constant("b", _rand(6, dtype=dtype))] if bias else [x, w]
    y = g.node("Conv2D", ins, name="conv", padding=1)
    stats = [g.constant("bn.mean", _rand(6, dtype=dtype, scale=0.1)),
             g.constant("bn.var", RNG.uniform(0.5, 1.5, 6).astype(dtype)),
             g.constant("bn.weight", RNG.uniform(0.5, 1.0, 6).astype(dtype)),
             g.constant("bn.bias", _rand(6, dtype=dtype, scale=0.1))]
    y = g.node("BatchNorm", [y, *stats], name="bn", eps=1e-5, has_weight=True, has_bias=True)
    if relu:
        y = g.node("Relu", [y], name="relu")
    g.output(y)
    return g.infer()


def conv_relu():
    g = Graph("conv_relu")
    x = g.input("x", (1, 4, 8, 8), "float32")
    y = g.node("Conv2D", [x, g.constant("w", _rand(4, 4, 3, 3, scale=0.3))], name="conv", padding=1)
    y = g.node("Relu", [y], name="relu")
    y = g.node("Conv2D", [y, g.constant("w2", _rand(4, 4, 1, 1, scale=0.3))], name="conv2")
    g.output(g.node("ReduceMean", [y], name="gap", axes=[2, 3]))
    return g.infer()


def matmul_bias(act="Relu", dtype="float32"):
    g = Graph("mm")
    x = g.input("x", (2, 5, 16), dtype)
    y = g.node("MatMul", [x, g.constant("w", _rand(16, 8, dtype=dtype, scale=0.3))], name="fc")
    y = g.node("Add", [y, g.constant("b", _rand(8, dtype=dtype))], name="fc.add")
    if act:
        y = g.node(act, [y], name="act")
    g.output(y)
    return g.infer()


def avgpool_scale(dtype="float32"):
    g = Graph("pool")
    x = g.input("x", (1, 3, 8, 8), dtype)
    y = g.node("AvgPool", [x], name="pool", kernel_size=[2, 2], stride=[2, 2])
    g.output(g.node("Mul", [y, g.constant("s", np.array(0.25, dtype))], name="scale"))
    return g.infer()


def swish(dtype="float32"):
    g = Graph("swish")
    x = g.input("x", (2, 32), dtype)
    s = g.node("Sigmoid", [x], name="sig")
    g.output(g.node("Mul", [x, s], name="silu"))
    return g.infer()


def attention(mask=True):
    g = Graph("attn")
    q, k, v = (g.input(n, (2, 32, 4), "float32") for n in "qkv")
    s = g.node("MatMul", [q, k], name="qk", transpose_b=True)
    s = g.node("Mul", [s, g.constant("scale", np.array(0.5, np.float32))], name="qk.scale")
    if mask:
        s = g.node("Add", [s, g.constant("mask", np.triu(np.full((32, 32), -1e4, np.float32), 1))], name="add_mask")
    p = g.node("SoftmaxV2", [s], name="softmax", dim=-1)
    g.output(g.node("MatMul", [p, v], name="pv"))
    return g.infer()


def transdata_pair():
    g = Graph("pair")
    x = g.input("x", (1, 16, 4, 4), "float32")
    a = g.node("TransData", [x], name="to5hd", dst_format="NC1HWC0")
    b = g.node("TransData", [a], name="back", dst_format="ND")
    g.output(g.node("ReduceMean", [b], name="gap", axes=[2, 3]))
    return g.infer()


def foldable():
    g = Graph("fold")
    x = g.input("x", (4, 3), "float32")
    c = g.node("Add", [g.constant("c1", _rand(4, 3)), g.constant("c2", _rand(4, 3))], name="c")
    r = g.node("Fill", [], name="ones", shape=[4, 3], value=1.0, dtype="float32")
    y = g.node("Mul", [x, c], name="y")
    g.output(g.node("Add", [y, r], name="z"))
    return g.infer()


def dead():
    g = Graph("dead")
    x = g.input("x", (4, 3), "float32")
    g.node("Exp", [x], name="unused")
    g.output(g.node("Relu", [x], name="y"))
    return g.infer()


def add_relu():
    g = Graph("residual")
    x = g.input("x", (1, 16, 4, 4), "float32")
    y = g.node("Relu", [x], name="r0")
    s = g.node("Add", [y, x], name="add")
    g.output(g.node("Relu", [s], name="relu"))
    return g.infer()


#: rule -> a graph it rewrites
CASES = {"ConstantFoldingPass": foldable, "ConvBatchnormFusionPass": conv_bn, "MatMulBiasAddFusionPass": matmul_bias,
         "FlashAttentionFusionPass": attention, "AvgPoolScaleFusionPass": avgpool_scale, "SwishFusionPass": swish,
         "TransDataInsertPass": conv_relu, "TransOpSymmetryEliminationPass": transdata_pair,
         "ConvReluFusionPass": conv_relu, "ATbeMatMulElemwiseFusionPass": lambda: matmul_bias_fused("Relu"),
         "TbeEltwiseFusionPass": add_relu, "PrunePass": dead}


def matmul_bias_fused(act):
    g, _ = run_rule(matmul_bias(act), "MatMulBiasAddFusionPass")
    return g


def test_every_rule_has_a_case_and_a_place_in_the_order():
    assert set(CASES) == set(RULES) == set(ORDER)


@pytest.mark.parametrize("name", sorted(CASES))
def test_each_rule_rewrites_its_pattern_and_keeps_the_outputs(name):
    g = CASES[name]()
    before = g.dump()
    g2, rec = run_rule(g, name)
    assert rec.effected >= 1 and len(rec.changes) >= rec.effected
    assert g.dump() == before                      # the input graph is left as it was
    g2.validate()
    _same_outputs(g, g2, _feeds(g), **tol("float32", "cube"))


# -- what each rule writes -------------------------------------------------------------------------
@pytest.mark.parametrize("bias", [True, False])
def test_bn_folding_is_exact_to_float32_rounding(bias):
    g = conv_bn(bias=bias, relu=False)
    g2, rec = run_rule(g, "ConvBatchnormFusionPass")
    assert g2.op_counts() == {"Conv2D": 1} and rec.effected == 1
    conv = g2.nodes[0]
    assert conv.name == "conv" and conv.outputs == ["bn"] and len(conv.inputs) == 3
    assert g2.constants[conv.inputs[2]].dtype == np.float32      # the bias in the accumulator's dtype
    _same_outputs(g, g2, _feeds(g), **tol("float32", "vector"))


def test_bn_folding_in_float16_stays_within_the_cube_row():
    g = conv_bn("float16")
    g2, _ = run_rule(g, "ConvBatchnormFusionPass")
    _same_outputs(g, g2, _feeds(g), **tol("float16", "cube"))


def test_bn_is_not_folded_into_a_conv_whose_output_has_another_reader():
    g = Graph("shared")
    x = g.input("x", (1, 2, 4, 4), "float32")
    y = g.node("Conv2D", [x, g.constant("w", _rand(2, 2, 1, 1))], name="conv")
    stats = [g.constant(f"s{i}", np.ones(2, np.float32)) for i in range(4)]
    z = g.node("BatchNorm", [y, *stats], name="bn", eps=1e-5, has_weight=True, has_bias=True)
    g.output(z, y)
    g2, rec = run_rule(g.infer(), "ConvBatchnormFusionPass")
    assert rec.matched == 1 and rec.effected == 0 and "another reader" in rec.changes[0]
    assert g2 is not g and g2.dump() == g.dump()


def test_conv_bn_relu_becomes_one_conv_with_the_relu_epilogue():
    g = conv_bn()
    g2, report = optimize(g, chip="910")
    # x and the output are ND graph values: a TransData on each side of the NC1HWC0 conv
    assert g2.op_counts() == {"TransData": 2, "Conv2D": 1}
    conv = next(n for n in g2.nodes if n.op_type == "Conv2D")
    assert conv.attrs["relu"] is True and conv.outputs == ["relu/NC1HWC0"] and g2.outputs == ["relu"]
    assert report["ConvBatchnormFusionPass"].effected == 1 and report["ConvReluFusionPass"].effected == 1
    _same_outputs(g, g2, _feeds(g), **tol("float32", "cube"))


@pytest.mark.parametrize("act, kind", [("Relu", "relu"), ("Gelu", "gelu_erf"), (None, None)])
def test_matmul_takes_the_bias_and_the_activation(act, kind):
    g = matmul_bias(act)
    g2, report = optimize(g)
    assert g2.op_counts() == {"MatMul": 1}
    mm = g2.nodes[0]
    assert len(mm.inputs) == 3 and mm.attrs.get("activation") == kind
    assert report["MatMulBiasAddFusionPass"].effected == 1
    _same_outputs(g, g2, _feeds(g), **tol("float32", "cube"))


def test_avgpool_times_a_scalar_becomes_avgpoolscale():
    g2, _ = run_rule(avgpool_scale(), "AvgPoolScaleFusionPass")
    assert g2.op_counts() == {"AvgPoolScale": 1} and g2.nodes[0].attrs["scale"] == 0.25


def test_a_per_channel_mul_after_avgpool_is_left():
    g = Graph("pool_c")
    x = g.input("x", (1, 3, 8, 8), "float32")
    y = g.node("AvgPool", [x], name="pool", kernel_size=[2, 2])
    g.output(g.node("Mul", [y, g.constant("s", np.ones((3, 1, 1), np.float32))], name="scale"))
    g2, rec = run_rule(g.infer(), "AvgPoolScaleFusionPass")
    assert g2.op_counts() == {"AvgPool": 1, "Mul": 1} and rec.effected == 0 and rec.matched == 1


def test_x_times_sigmoid_x_becomes_swish():
    g2, _ = run_rule(swish(), "SwishFusionPass")
    assert g2.op_counts() == {"Swish": 1} and g2.outputs == ["silu"]


@pytest.mark.parametrize("mask", [True, False])
def test_attention_scale_moves_onto_the_smaller_operand(mask):
    g = attention(mask)
    g2, rec = run_rule(g, "FlashAttentionFusionPass")
    pre = next(n for n in g2.nodes if n.op_type == "Mul")
    assert pre.inputs[0] in ("q", "k") and g2.types[pre.outputs[0]].size == 2 * 32 * 4
    qk = next(n for n in g2.nodes if n.name == "qk")
    assert pre.outputs[0] in qk.inputs and "no fused attention kernel" in rec.changes[0]
    _same_outputs(g, g2, _feeds(g), **tol("float32", "vector"))


def test_attention_with_a_short_sequence_keeps_its_scale():
    g = Graph("attn_short")
    q, k, v = (g.input(n, (2, 4, 32), "float32") for n in "qkv")     # S=4 < D=32: the scores are smaller
    s = g.node("MatMul", [q, k], name="qk", transpose_b=True)
    s = g.node("Mul", [s, g.constant("scale", np.array(0.2, np.float32))], name="qk.scale")
    g.output(g.node("MatMul", [g.node("SoftmaxV2", [s], name="softmax", dim=-1), v], name="pv"))
    g2, rec = run_rule(g.infer(), "FlashAttentionFusionPass")
    assert rec.matched == 1 and rec.effected == 0 and g2.dump() == g.dump()


def test_transdata_goes_where_kernels_want_it_and_weights_fold():
    g = conv_relu()
    g2, rec = run_rule(g, "TransDataInsertPass")
    tds = {n.inputs[0]: n.attrs["dst_format"] for n in g2.nodes if n.op_type == "TransData"}
    # x in, both weights to FRACTAL_Z, and back to ND before the (format-sensitive) ReduceMean;
    # the ReLU between the convs runs in NC1HWC0, so nothing between them
    assert tds == {"x": "NC1HWC0", "w": "FRACTAL_Z", "w2": "FRACTAL_Z", "conv2": "ND"}
    assert g2.types["relu"].format == "NC1HWC0" and g2.types["gap"].format == "ND"
    g3, fold = run_rule(g2, "ConstantFoldingPass")
    assert fold.effected == 2 and g3.op_counts()["TransData"] == 2
    assert {g3.types[c].format for c in g3.constants} == {"FRACTAL_Z"}


def test_a_transdata_pair_that_undoes_itself_is_removed():
    g2, report = optimize(transdata_pair())
    assert report["TransOpSymmetryEliminationPass"].effected == 1
    assert g2.op_counts() == {"ReduceMean": 1} and g2.nodes[0].inputs == ["x"]


def test_constant_folding_uses_the_reference_and_keeps_names():
    g = foldable()
    g2, rec = run_rule(g, "ConstantFoldingPass")
    assert rec.effected == 2 and g2.op_counts() == {"Mul": 1, "Add": 1}
    np.testing.assert_array_equal(g2.constants["c"], (g.constants["c1"] + g.constants["c2"]))
    np.testing.assert_array_equal(g2.constants["ones"], np.ones((4, 3), np.float32))


def test_prune_removes_what_no_output_reads():
    g2, rec = run_rule(dead(), "PrunePass")
    assert g2.op_counts() == {"Relu": 1} and "unused" in rec.changes[0]


@pytest.mark.parametrize("build, kernels", [
    (lambda: conv_bn("float16"), {"Conv2D"}), (lambda: matmul_bias("Relu", "float16"), {"BatchMatMul"}),
    (lambda: avgpool_scale("float16"), {"AvgPoolScale"}), (lambda: swish("float16"), {"Swish"})])
def test_fused_nodes_run_as_the_registered_kernels_on_the_simulator(build, kernels):
    """Each fused node lowers to one registered kernel, and that kernel launched on the simulated
    910 with the task's operands gives the reference of the fused node (the cube or vector row)."""
    g2, _ = optimize(build(), chip="910")
    feeds = _feeds(g2)
    want = reference.run(g2, feeds, keep=True)
    tasks = [t for t in lower(g2, "910") if t.engine == "AiCore" and t.kernel is not None]
    assert {t.kernel for t in tasks} == kernels
    for t in tasks:
        arrays = [np.ascontiguousarray(want[o.value].astype(o.dtype).reshape(o.shape)) for o in t.operands]
        y, _ = registry.dispatch(t.kernel, *arrays, chip="910", **t.kernel_attrs())
        out = want[t.outputs[0]]
        unit = "cube" if t.kernel in ("Conv2D", "BatchMatMul") else "vector"
        np.testing.assert_allclose(np.asarray(y, np.float64).reshape(out.shape), out.astype(np.float64),
                                   **tol(out.dtype, unit))


# -- the switch file -------------------------------------------------------------------------------
def _section(name):
    return RULES[name].kind if RULES[name].kind != "GE" else "GraphFusion"


def _forms(name):
    return {"lines": f"# turn one rule off\n{name}:off\n",
            "json": json.dumps({"Switch": {_section(name): {name: "off"}}}, indent=4)}


@pytest.mark.parametrize("form", ["lines", "json"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_a_rules_switch_turns_it_off(name, form, tmp_path):
    g = CASES[name]()
    on = optimize(g)[1][name]
    assert on.enabled and on.effected >= 1
    path = tmp_path / "fusion_switch.cfg"
    path.write_text(_forms(name)[form])
    g2, report = optimize(g, str(path))
    assert not report[name].enabled and report[name].effected == 0
    assert all(r.enabled for r in report.records if r.rule != name)
    _same_outputs(g, g2, _feeds(g), **tol("float32", "cube"))


def test_all_off_turns_off_every_fusion_rule_and_a_named_rule_wins():
    text = json.dumps({"Switch": {"GraphFusion": {"ALL": "off", "MatMulBiasAddFusionPass": "on"},
                                  "UBFusion": {"ALL": "off"}}})
    sw = FusionSwitches.parse(text)
    for name, r in RULES.items():
        assert sw.enabled(name) == (r.kind == "GE" or name == "MatMulBiasAddFusionPass"), name
    g2, report = optimize(conv_bn(), sw)
    assert report["ConvBatchnormFusionPass"].effected == 0
    assert {k: v for k, v in g2.op_counts().items() if k != "TransData"} == {"Conv2D": 1, "BatchNorm": 1, "Relu": 1}


def test_the_report_has_a_line_per_rule_run():
    _, report = optimize(conv_bn(), FusionSwitches(off=["ConvReluFusionPass"]))
    lines = report.summary().splitlines()[1:]
    assert [line.split()[0] for line in lines] == list(ORDER)
    conv_relu_line = lines[ORDER.index("ConvReluFusionPass")]
    assert conv_relu_line.split()[1:] == ["UBFusion", "off"]
    assert lines[ORDER.index("ConvBatchnormFusionPass")].split()[2:] == ["1", "1", "3", "->", "2"]
    with pytest.raises(GraphError, match="not in this report"):
        report["Nope"]


def test_an_unknown_rule_lists_the_known_ones():
    with pytest.raises(NpuError, match="unknown rule 'ConvBnFusion'") as e:
        FusionSwitches.parse("ConvBatchnormFusionPass:off\nConvBnFusion:off\n", "fusion_switch.cfg")
    assert "line 2" in str(e.value) and all(name in str(e.value) for name in RULES)
    with pytest.raises(GraphError, match="(?s)unknown rule 'Nope'.*ConvReluFusionPass"):
        FusionSwitches.parse('{"Switch": {"UBFusion": {"Nope": "off"}}}')


@pytest.mark.parametrize("text, match", [
    ("ConvReluFusionPass:off\nConvReluFusionPass off\n", "line 2 .*expected RuleName:on or RuleName:off"),
    ("ConvReluFusionPass:maybe", "line 1"),
    ("ALL:off", "ALL is a JSON-form entry"),
    ('{"Switch": {"GraphFusion": {\n  "ALL": "off",\n}}}', "line 3 column 1: not valid JSON"),
    ('{"Switch": {\n"GraphFusion": {\n"ConvReluFusionPass": "off"}}}', "line 3: ConvReluFusionPass is a UBFusion rule"),
    ('{"Switch": {"Other": {}}}', "section 'Other'"),
    ('{"Switch": {"UBFusion": {\n"ConvReluFusionPass": 0}}}', "line 2: UBFusion.ConvReluFusionPass is 0"),
    ('{"Fusion": {}}', "expected"),
])
def test_a_malformed_switch_file_names_the_line(text, match):
    with pytest.raises(GraphError, match=match):
        FusionSwitches.parse(text, "fusion_switch.cfg")


# -- ResNet-50 -------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def resnet():
    return resnet50(batch=1, image=32, num_classes=10, dtype="float32", widths=(8, 16, 32, 64))


def test_resnet50_fused_keeps_its_outputs_with_fewer_nodes_and_gm_bytes(resnet):
    before = resnet.dump()
    g2, report = optimize(resnet, chip="910")
    assert resnet.dump() == before
    assert report["ConvBatchnormFusionPass"].effected == 53       # every conv's BN
    assert report["ConvReluFusionPass"].effected == 33            # every ReLU but the 16 after an add
    assert report["TbeEltwiseFusionPass"].effected == 16          # those: each residual Add + ReLU
    counts = g2.op_counts()
    assert "BatchNorm" not in counts and counts["Conv2D"] == 53 and "Relu" not in counts and counts["AddRelu"] == 16
    # one TransData in (x to NC1HWC0) and one out (before the average pool); weights folded
    assert counts["TransData"] == 2
    assert len(g2.nodes) < len(resnet.nodes)
    unfused, fused = gm_bytes(resnet, "910"), gm_bytes(g2, "910")
    assert fused < unfused
    _same_outputs(resnet, g2, {"x": _rand(1, 3, 32, 32)}, **tol("float32", "cube"))


def test_resnet50_with_all_fusion_off_only_moves_formats(resnet):
    sw = FusionSwitches.parse('{"Switch": {"GraphFusion": {"ALL": "off"}, "UBFusion": {"ALL": "off"}}}')
    g2, report = optimize(resnet, sw, chip="910")
    assert report.effected().keys() <= {"TransDataInsertPass", "ConstantFoldingPass"}
    assert {k: v for k, v in g2.op_counts().items() if k != "TransData"} == resnet.op_counts()
    _same_outputs(resnet, g2, {"x": _rand(1, 3, 32, 32)}, **tol("float32", "vector"))
