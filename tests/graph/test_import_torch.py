"""from_torch: torch.export programs as graphs. Each imported model is run on the reference
executor and compared with torch on the CPU (the cube's fp32 row of the tolerance table: the
models' sums are conv and matmul sums, in float64 here and float32 in torch); ResNet-50 is
compared node for node and constant for constant with the zoo's; BERT and GPT-2 (2 layers, from
configs, never downloaded) with an attention mask that hides positions; unmapped ops are all
reported at once; an imported graph lowers onto a chip."""
import numpy as np
import pytest
import torch

import torch_models
from npulab.errors import GraphError, NpuError, UnsupportedOpError
from npulab.graph import from_torch, reference, zoo
from npulab.graph.lower import lower
from npulab.ops.tolerance import tol

SMALL = dict(widths=(8, 16, 32, 64), num_classes=10)
FP32 = tol("float32", "cube")


def _run(g, feeds):
    out = reference.run(g, {k: np.asarray(v) for k, v in feeds.items()})
    return [out[v] for v in g.outputs]


@pytest.fixture(scope="module")
def small_resnet():
    model = torch_models.resnet50(**SMALL)
    x = torch.randn(2, 3, 64, 64, generator=torch.Generator().manual_seed(3))
    return model, x, from_torch(model, (x,))


def test_resnet50_matches_torch(small_resnet):
    model, x, g = small_resnet
    (y,) = _run(g, {"x": x.numpy()})
    with torch.no_grad():
        expected = model(x).numpy()
    assert y.shape == (2, 10)
    np.testing.assert_allclose(y, expected, **FP32)
    assert np.abs(expected).max() > 0.05          # not a comparison of near-zeros


def test_resnet50_is_the_zoos_graph_node_for_node(small_resnet):
    _, _, g = small_resnet
    z = zoo.build("resnet50", batch=2, image=64, **SMALL)
    assert g.op_counts() == z.op_counts()
    assert len(g.nodes) == len(z.nodes)
    assert {k: v.shape for k, v in g.constants.items()} == {k: v.shape for k, v in z.constants.items()}
    # nodes named by module path; torch's one ReLU module ran three times in a block
    names = [n.name for n in g.nodes]
    assert names[:4] == ["conv1", "bn1", "relu", "maxpool"] and names[-2:] == ["avgpool", "fc"]
    assert "layer1.0.downsample.0" in names and "layer2.0.conv2" in names
    assert sum(n.startswith("layer1.0.relu") for n in names) == 3
    assert "bn1.num_batches_tracked" not in g.constants          # an unused buffer is left out


def test_full_size_resnet50_has_the_zoos_parameters():
    model = torch_models.resnet50()
    g = from_torch(model, (torch.zeros(1, 3, 32, 32),))
    z = zoo.build("resnet50", image=32)
    assert g.op_counts() == z.op_counts()
    assert sum(a.size for a in g.constants.values()) == sum(a.size for a in z.constants.values())
    assert sum(p.numel() for p in model.parameters()) == 25_557_032


def test_imported_graphs_lower(small_resnet):
    _, _, g = small_resnet
    tasks = lower(g, "910b")
    assert {t.name for t in tasks} == {n.name for n in g.nodes}
    assert {t.engine for t in tasks} <= {"AiCore", "AiCpu", "None"}


@pytest.mark.parametrize("build", [torch_models.bert, torch_models.gpt2], ids=["bert", "gpt2"])
def test_transformers_match_torch_with_an_attention_mask(build):
    model = build().eval()
    gen = torch.Generator().manual_seed(5)
    ids = torch.randint(0, 120, (2, 10), generator=gen)
    mask = torch.ones(2, 10, dtype=torch.long)
    mask[1, 3:] = 0                                   # the second sequence is padded
    feeds = {"input_ids": ids, "attention_mask": mask}
    g = from_torch(model, feeds)
    assert g.inputs == ["input_ids", "attention_mask"]
    outs = _run(g, {k: v.numpy() for k, v in feeds.items()})
    with torch.no_grad():
        expected = model(**feeds).last_hidden_state.numpy()
        unmasked = model(input_ids=ids).last_hidden_state.numpy()
    np.testing.assert_allclose(outs[0], expected, **FP32)
    # the mask changes the answer by more than the tolerance: a dropped mask would fail
    assert np.abs(expected[1] - unmasked[1]).max() > 5 * FP32["atol"]
    assert any(n.name.startswith(("encoder.layer.1.attention", "h.1.attn")) for n in g.nodes)
    assert "MatMul" in g.op_counts() and "SoftmaxV2" in g.op_counts() and "LayerNorm" in g.op_counts()
    tasks = lower(g, "910b")
    assert {t.name for t in tasks} >= {n.name for n in g.nodes}


class _Sorter(torch.nn.Module):
    def forward(self, x):
        return torch.sort(x, dim=-1).values


class _TwoUnsupported(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)
        self.sorter = _Sorter()

    def forward(self, x):
        return self.lin(x) + self.sorter(x), torch.fft.rfft(x).abs()


def test_every_unsupported_op_is_reported_at_once():
    with pytest.raises(UnsupportedOpError) as info:
        from_torch(_TwoUnsupported(), (torch.randn(2, 8),))
    lines = str(info.value).splitlines()
    assert len(lines) == 2 and all(line.startswith("Op type not supported: aten.") for line in lines)
    assert "aten.sort" in lines[0] and "module 'sorter' (_Sorter)" in lines[0]
    assert "fft" in lines[1] and "top-level module" in lines[1]
    assert isinstance(info.value, NpuError)


class _Mix(torch.nn.Module):
    """One op of each family the importer maps beyond the three models."""

    def __init__(self):
        super().__init__()
        self.register_buffer("table", torch.arange(24, dtype=torch.float32).reshape(4, 6) / 7)

    def forward(self, x, mask):
        a, b = torch.split(x, [2, 4], dim=-1)
        y = torch.cat([b, a * 3 - 1], dim=-1)
        y = torch.where(mask, y, -y).masked_fill(~mask, 0.25)
        y = torch.clamp(y, -1.5, 2.0) + torch.rsqrt(x * x + 1) + torch.erf(x) / 2
        y = y + torch.cumsum(x, dim=1) + torch.arange(6, dtype=torch.float32)
        idx = 3 - torch.arange(4)
        y = y + self.table[idx]                                     # advanced indexing
        y = y + torch.gather(self.table, 1, torch.clamp(idx[:, None] + torch.arange(6), max=5))
        z = torch.nn.functional.avg_pool2d(y.reshape(1, 1, 4, 6), 2)
        return y.t().sigmoid(), z.flatten().to(torch.float16), (x > 0).sum(dim=0, dtype=torch.int64)


class _NnMix(torch.nn.Module):
    """Functional forms of the layers, and the math the models above do not use."""

    def __init__(self):
        super().__init__()
        self.norm = torch.nn.LayerNorm(6, elementwise_affine=False)
        self.w = torch.nn.Parameter(torch.linspace(-1, 1, 36).reshape(6, 6))

    def forward(self, x, mask):
        y = torch.nn.functional.gelu(x, approximate="tanh") + torch.nn.functional.gelu(x)
        y = self.norm(y) + torch.nn.functional.layer_norm(x, (4, 6))
        y = torch.bmm(y[None], self.w[None])[0] @ torch.ones(6)[:, None] + y.mean(dim=-1, keepdim=True)
        y = torch.softmax(y, dim=0) + torch.exp(-x.abs()) * torch.log(x * x + 1) - torch.sqrt(x * x).tanh()
        y = torch.maximum(y, torch.zeros_like(y)) + torch.minimum(x, x.new_full((4, 6), 0.5)) ** (x > 0).float()
        p = torch.nn.functional.max_pool2d(y[None, None], 3, stride=2, padding=1, ceil_mode=True)
        v = self.w @ x[0]                                             # a matrix times a vector
        return y.squeeze(), p.amax(dim=(2, 3)), v, torch.nn.functional.silu(x).masked_fill(mask, -2.0)


@pytest.mark.parametrize("build", [_Mix, _NnMix], ids=["data", "nn"])
def test_a_mix_of_ops_matches_torch(build):
    gen = torch.Generator().manual_seed(7)
    x = torch.randn(4, 6, generator=gen)
    mask = torch.rand(4, 6, generator=gen) > 0.4
    model = build()
    try:
        g = from_torch(model, (x, mask), input_names=["x", "mask"])
    except UnsupportedOpError as exc:
        pytest.fail(str(exc))
    outs = _run(g, {"x": x.numpy(), "mask": mask.numpy()})
    with torch.no_grad():
        expected = [t.numpy() for t in model(x, mask)]
    for got, want in zip(outs, expected):
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64),
                                   **(tol("float16") if want.dtype == np.float16 else FP32))


class _AddThird(torch.nn.Module):
    def forward(self, x):
        return x + 1 / 3


def test_a_python_scalar_is_rounded_to_the_tensors_dtype():
    x = torch.randn(8, generator=torch.Generator().manual_seed(2)).half()
    g = from_torch(_AddThird(), (x,))
    (scalar,) = g.constants.values()
    assert scalar.dtype == np.float16 and scalar.shape == () and scalar == np.float16(1 / 3)
    (y,) = _run(g, {"x": x.numpy()})
    np.testing.assert_allclose(y.astype(np.float32), (x + 1 / 3).float().numpy(), **tol("float16"))


class _DataDependent(torch.nn.Module):
    def forward(self, x):
        return x * 2 if x.sum() > 0 else x


def test_bad_modules_are_clear_errors():
    with pytest.raises(GraphError, match="expected a torch.nn.Module"):
        from_torch(lambda x: x, (torch.randn(3),))
    with pytest.raises(GraphError, match="torch.export could not trace _DataDependent"):
        from_torch(_DataDependent(), torch.randn(3))


def test_input_names_must_match_the_inputs():
    with pytest.raises(GraphError, match="input_names has 2 names, the module takes 1"):
        from_torch(_AddThird(), (torch.randn(3),), input_names=["a", "b"])
    g = from_torch(_AddThird(), (torch.randn(3),), input_names=["a"])
    assert g.inputs == ["a"]
