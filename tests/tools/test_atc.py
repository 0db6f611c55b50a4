"""npulab atc (npulab.tools.atc): ATC's flags, an ONNX file, a torch.export .pt2 or a zoo model to an
offline model that loads and runs as the source computes; the switch file and --enable_small_channel
reach the build; bad flags are named with what ATC accepts."""
import json

import numpy as np
import pytest
import torch

import torch_models
from npulab.cli import main
from npulab.errors import ArgumentError, GraphError
from npulab.ops.tolerance import tol
from npulab.runtime.model import load_from_file
from npulab.tools.atc import chip_of_soc, convert, framework_of

SMALL = dict(widths=(8, 16, 16, 16), blocks=(1, 1, 1, 1), num_classes=10)


@pytest.fixture(scope="module")
def resnet(tmp_path_factory):
    d = tmp_path_factory.mktemp("atc")
    model = torch_models.resnet50(**SMALL)
    x = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(4))
    # BatchNorm kept in the file (the exporter would fold it): ATC's pass folds it
    torch.onnx.export(model, (x,), str(d / "r.onnx"), input_names=["input"], dynamo=False,
                      dynamic_axes={"input": {0: "batch"}}, training=torch.onnx.TrainingMode.PRESERVE,
                      do_constant_folding=False)
    model.eval()
    torch.export.save(torch.export.export(model.eval(), (x,)), str(d / "r.pt2"))
    with torch.no_grad():
        want = model(x).numpy()
    return d, x.numpy(), want


def _quiet(*_):
    pass


def test_an_onnx_model_converts_and_runs_as_torch_computes(resnet):
    d, x, want = resnet
    r = convert(str(d / "r.onnx"), "5", str(d / "r_onnx"), "Ascend910", input_shape="input:2,3,32,32",
                progress=False, out=_quiet)
    assert r.path.name == "r_onnx.om" and r.path.is_file()
    s = r.summary
    assert s["nodes_after"] < s["nodes_before"] and s["fusions"]["ConvBatchnormFusionPass"] == 17
    assert 0 < s["feature_memory_bytes"] < s["intermediate_bytes"] and s["estimated_latency_ms"] > 0
    outs, _ = load_from_file(r.path).execute({"input": x})
    np.testing.assert_allclose(next(iter(outs.values())), want, **tol("float32", "cube"))


def test_a_torch_export_program_converts_from_the_command_line(resnet, capsys):
    d, x, want = resnet
    assert main(["atc", "--model", str(d / "r.pt2"), "--framework", "pytorch", "--output", str(d / "r_pt"),
                 "--soc_version", "Ascend910B", "--no-progress", "--log", "info"]) == 0
    text = capsys.readouterr().out
    assert "ATC run success" in text and "ConvReluFusionPass" in text and "memory plan" in text
    outs, _ = load_from_file(d / "r_pt.om").execute({"x": x})
    np.testing.assert_allclose(next(iter(outs.values())), want, **tol("float32", "cube"))


def test_the_switch_file_and_small_channel_reach_the_build(resnet, tmp_path):
    d, _, _ = resnet
    on = convert(str(d / "r.onnx"), "onnx", str(tmp_path / "a"), "910", input_shape="input:1,3,32,32",
                 progress=False, out=_quiet).summary
    cfg = tmp_path / "fusion.cfg"
    cfg.write_text(json.dumps({"Switch": {"GraphFusion": {}, "UBFusion": {"ConvReluFusionPass": "off"}}}))
    off = convert(str(d / "r.onnx"), "onnx", str(tmp_path / "b"), "910", input_shape="input:1,3,32,32",
                  fusion_switch_file=str(cfg), progress=False, out=_quiet).summary
    assert "ConvReluFusionPass" in on["fusions"] and "ConvReluFusionPass" not in off["fusions"]
    assert off["nodes_after"] > on["nodes_after"]
    c04 = convert(str(d / "r.onnx"), "onnx", str(tmp_path / "c"), "910", input_shape="input:1,3,32,32",
                  enable_small_channel=1, progress=False, out=_quiet)
    def stem(path):
        return next(t for t in load_from_file(path).compiled.tasks if t.kernel == "Conv2D")
    assert "c04" not in stem(c04.path).attrs and stem(tmp_path / "a.om").attrs["c04"] is False


def test_a_zoo_model_takes_its_batch_from_the_input_shape(tmp_path):
    r = convert("zoo:bert-base", "npulab", str(tmp_path / "bert"), "Ascend910B",
                input_shape="input_ids:2,64;token_type_ids:2,64;attention_mask:2,64", progress=False, out=_quiet)
    m = load_from_file(r.path)
    assert m.compiled.graph.type_of("input_ids").shape == (2, 64) and r.summary["batch"] == 2


def test_bad_flags_name_what_atc_accepts(resnet, tmp_path):
    d, _, _ = resnet
    with pytest.raises(ArgumentError, match="Ascend910B"):
        chip_of_soc("Ascend950")
    with pytest.raises(ArgumentError, match="TensorFlow models have no importer"):
        framework_of("3")
    with pytest.raises(ArgumentError, match="--log"):
        convert(str(d / "r.onnx"), "5", str(tmp_path / "x"), "910", log="loud", out=_quiet)
    with pytest.raises(ArgumentError, match="no such file"):
        convert(str(tmp_path / "none.onnx"), "5", str(tmp_path / "x"), "910", out=_quiet)
    with pytest.raises(ArgumentError, match="shapes are fixed"):
        convert(str(d / "r.pt2"), "pytorch", str(tmp_path / "x"), "910", input_shape="x:8,3,32,32",
                progress=False, out=_quiet)
    with pytest.raises(GraphError, match="unknown|not a known|known rules"):
        cfg = tmp_path / "bad.cfg"
        cfg.write_text("NoSuchFusionPass:off\n")
        convert(str(d / "r.onnx"), "5", str(tmp_path / "x"), "910", input_shape="input:1,3,32,32",
                fusion_switch_file=str(cfg), progress=False, out=_quiet)
    assert main(["atc", "--model", "x", "--framework", "3", "--output", "y", "--soc_version", "910"]) == 2
