"""Whole models end to end: a torch module (the hand-written ResNet-50, 2-layer BERT and GPT-2
from transformers configs) or its ONNX export is imported, optimised by GE's passes, compiled
for a chip, written to an offline model file, loaded on a device and executed on the simulated
cores in functional mode; the outputs are torch's within the float32 cube tolerance."""
import numpy as np
import pytest
import torch

import torch_models
from npulab.graph import from_onnx, from_torch, passes, zoo
from npulab.graph.compile import compile_graph, load_model, save_model
from npulab.ops.tolerance import tol
from npulab.runtime.model import Model

FP32 = tol("float32", "cube")
SMALL = dict(widths=(8, 16, 16, 16), blocks=(1, 2, 1, 1), num_classes=10)


def _run(graph, feeds, chip, tmp_path):
    cm = compile_graph(graph, chip, passes=lambda g: passes.optimize(g, chip=chip)[0])
    model = Model(load_model(save_model(cm, tmp_path / f"{graph.name}.om")))
    outs, trace = model.execute(feeds)
    assert trace.latency_us > 0 and len(cm.graph.nodes) < len(graph.nodes)     # the passes fused
    return [outs[v] for v in cm.graph.outputs]


@pytest.fixture(scope="module")
def resnet():
    model = torch_models.resnet50(**SMALL)
    x = torch.randn(1, 3, 32, 32, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        want = model(x).numpy()
    return model, x, want


@pytest.mark.parametrize("chip", ["910", "910b"])
def test_resnet50_from_torch_runs_as_torch_computes(resnet, chip, tmp_path):
    model, x, want = resnet
    (got,) = _run(from_torch(model, (x,)), {"x": x.numpy()}, chip, tmp_path)
    np.testing.assert_allclose(got, want, **FP32)


def test_resnet50_from_onnx_runs_as_torch_computes(resnet, tmp_path):
    model, x, want = resnet
    path = tmp_path / "resnet.onnx"
    torch.onnx.export(model, (x,), str(path), input_names=["input"], dynamo=False)
    g = from_onnx(path)
    (got,) = _run(g, {"input": x.numpy()}, "910", tmp_path)
    np.testing.assert_allclose(got, want, **FP32)


@pytest.mark.parametrize("build", [torch_models.bert, torch_models.gpt2], ids=["bert", "gpt2"])
def test_transformers_from_torch_run_as_torch_computes(build, tmp_path):
    model = build().eval()
    gen = torch.Generator().manual_seed(5)
    ids = torch.randint(0, 120, (2, 10), generator=gen)
    mask = torch.ones(2, 10, dtype=torch.long)
    mask[1, 7:] = 0
    feeds = {"input_ids": ids, "attention_mask": mask}
    with torch.no_grad():
        want = model(**feeds).last_hidden_state.numpy()
    got = _run(from_torch(model, feeds), {k: v.numpy() for k, v in feeds.items()}, "910b", tmp_path)[0]
    np.testing.assert_allclose(got, want, **FP32)


@pytest.mark.parametrize("name, config", [("resnet50", {}), ("bert-base", {"seq": 128, "materialize": False}),
                                          ("gpt2", {"seq": 128, "materialize": False})])
def test_full_size_models_compile_and_run_timing_only(name, config):
    g = zoo.build(name, batch=1, dtype="float16", **config).infer()
    cm = compile_graph(g, "910", passes=lambda g: passes.optimize(g, chip="910")[0])
    out, trace = Model(cm).execute(None, "timing")
    assert out is None
    by = trace.time_by("engine")
    assert by["AiCore"] > 0.5 * trace.latency_us and "Memcpy" in by
    assert len([r for r in trace.records if r.engine == "AiCore"]) >= {"resnet50": 53, "bert-base": 72, "gpt2": 48}[name]
