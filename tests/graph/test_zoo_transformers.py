"""The zoo's BERT-base and GPT-2: a 2-layer model with transformers' weights copied in gives what
transformers' eager BertModel / GPT2Model gives on the CPU, with and without padding; the full
sizes have the published parameter counts; constants are exactly torch's state_dict and nodes
its module paths; every node lowers to an engine."""
import numpy as np
import pytest
import torch
import transformers

from npulab.errors import GraphError
from npulab.graph import reference, zoo
from npulab.graph.lower import lower
from npulab.ops.tolerance import tol

BATCH, SEQ = 2, 9
SMALL = dict(layers=2, hidden=64, heads=4, intermediate=128, vocab=101, max_positions=32, seq=SEQ)


def _bert_config(**extra):
    return transformers.BertConfig(vocab_size=SMALL["vocab"], hidden_size=SMALL["hidden"],
                                   num_hidden_layers=SMALL["layers"], num_attention_heads=SMALL["heads"],
                                   intermediate_size=SMALL["intermediate"],
                                   max_position_embeddings=SMALL["max_positions"], attn_implementation="eager",
                                   **extra)


def _gpt2_config():
    return transformers.GPT2Config(vocab_size=SMALL["vocab"], n_embd=SMALL["hidden"], n_layer=SMALL["layers"],
                                   n_head=SMALL["heads"], n_inner=SMALL["intermediate"],
                                   n_positions=SMALL["max_positions"], bos_token_id=0, eos_token_id=0,
                                   attn_implementation="eager")


def _torch_model(cls, config):
    """An eval-mode model whose every parameter is perturbed off its init (biases 0, LayerNorm
    1 and 0), so a bias or LayerNorm weight the graph misplaces changes the output."""
    torch.manual_seed(0)
    model = cls(config).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    return model


def _state(model) -> dict:
    return {k: v.detach().numpy() for k, v in model.state_dict().items()}


def _tokens(padded: bool) -> dict:
    """(BATCH, SEQ) int64 token ids and mask; ``padded``: the second sequence right-padded after 5."""
    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(0, SMALL["vocab"], (BATCH, SEQ), generator=gen)
    mask = torch.ones(BATCH, SEQ, dtype=torch.long)
    if padded:
        mask[1, 5:] = 0
    return {"input_ids": ids, "attention_mask": mask,
            "token_type_ids": torch.randint(0, 2, (BATCH, SEQ), generator=gen)}


def _close(actual, expected):
    # torch on the CPU and the reference executor compute the same fp32 chain of ops, apart only
    # in rounding order, so the table's tightest fp32 row holds (with a 10x margin here), and it
    # is tight enough to tell GELU's erf form from its tanh form
    np.testing.assert_allclose(actual, expected.detach().numpy(), **tol("float32", "vector"))


def _bert(padded):
    model = _torch_model(transformers.BertModel, _bert_config())
    g = zoo.build("bert-base", batch=BATCH, **SMALL).validate()
    assert zoo.load_state(g, _state(model)) == ([], [])
    t = _tokens(padded)
    with torch.no_grad():
        want = model(**t)
    return reference.run(g, {k: v.numpy() for k, v in t.items()}), want


def _gpt2(padded):
    model = _torch_model(transformers.GPT2Model, _gpt2_config())
    g = zoo.build("gpt2", batch=BATCH, **SMALL).validate()
    assert zoo.load_state(g, _state(model)) == ([], [])
    t = _tokens(padded)
    del t["token_type_ids"]
    with torch.no_grad():
        want = model(**t)
    return reference.run(g, {k: v.numpy() for k, v in t.items()}), want


@pytest.mark.parametrize("padded", [False, True])
def test_bert_matches_transformers(padded):
    got, want = _bert(padded)
    assert set(got) == {"last_hidden_state", "pooler_output"}
    _close(got["last_hidden_state"], want.last_hidden_state)
    _close(got["pooler_output"], want.pooler_output)


@pytest.mark.parametrize("padded", [False, True])
def test_gpt2_matches_transformers(padded):
    got, want = _gpt2(padded)
    assert set(got) == {"last_hidden_state"}
    _close(got["last_hidden_state"], want.last_hidden_state)


@pytest.mark.parametrize("run", [_bert, _gpt2])
def test_padding_changes_only_what_it_should(run):
    """The mask is not a no-op: padding the second sequence after 5 tokens leaves the first
    sequence exactly as it was and changes the second: BERT's real tokens (they no longer see the
    padding), GPT-2's padded positions (its real ones never saw what came after them)."""
    full = run(False)[0]["last_hidden_state"]
    padded = run(True)[0]["last_hidden_state"]
    np.testing.assert_array_equal(full[0], padded[0])
    changed = slice(0, 5) if run is _bert else slice(5, SEQ)
    assert np.abs(full[1, changed] - padded[1, changed]).max(axis=-1).min() > 1e-4
    if run is _gpt2:
        np.testing.assert_array_equal(full[1, :5], padded[1, :5])


def test_gpt2_is_causal():
    """A token changes no output before it (the causal mask), and changes its own."""
    g = zoo.build("gpt2", batch=1, **SMALL)
    ids = np.arange(SEQ, dtype=np.int64)[None]
    mask = np.ones_like(ids)
    a = reference.run(g, {"input_ids": ids, "attention_mask": mask})["last_hidden_state"]
    ids[0, 6] += 1
    b = reference.run(g, {"input_ids": ids, "attention_mask": mask})["last_hidden_state"]
    np.testing.assert_array_equal(a[0, :6], b[0, :6])
    assert np.abs(a[0, 6:] - b[0, 6:]).max(axis=-1).min() > 1e-4


@pytest.mark.parametrize("name, count", [("bert-base", 109_482_240), ("gpt2", 124_439_808)])
def test_full_size_parameter_counts_and_lowering(name, count):
    g = zoo.build(name, materialize=False).validate()
    assert sum(a.size for a in g.constants.values()) == count
    assert all(a.strides == (0,) * a.ndim for a in g.constants.values())     # shapes only: no memory
    tasks = lower(g, "910b")
    assert {t.name.split("/")[0] for t in tasks} == {n.name for n in g.nodes}
    assert {t.engine for t in tasks} <= {"AiCore", "AiCpu", "None"}
    assert sum(t.kernel == "BatchMatMul" for t in tasks) == g.op_counts()["MatMul"]     # on the cube


@pytest.mark.parametrize("name, cls, config", [("bert-base", transformers.BertModel, _bert_config),
                                               ("gpt2", transformers.GPT2Model, _gpt2_config)])
def test_names_are_transformers(name, cls, config):
    """Constants are exactly the state_dict (keys, shapes); every module with weights is a node."""
    model = cls(config())
    g = zoo.build(name, **SMALL)
    state = model.state_dict()
    assert {k: tuple(v.shape) for k, v in state.items()} == {k: a.shape for k, a in g.constants.items()}
    nodes = {n.name for n in g.nodes}
    weighted = {k.rsplit(".", 1)[0] for k in state}
    assert weighted <= nodes


def test_pooler_optional():
    model = transformers.BertModel(_bert_config(), add_pooling_layer=False)
    g = zoo.build("bert-base", pooler=False, **SMALL)
    assert g.outputs == ["last_hidden_state"]
    assert set(g.constants) == set(model.state_dict())


def test_int32_ids_give_the_int64_result_and_fp16_runs():
    t = {k: v.numpy() for k, v in _tokens(True).items()}
    wide = reference.run(zoo.build("bert-base", batch=BATCH, **SMALL), t)
    narrow = reference.run(zoo.build("bert-base", batch=BATCH, index_dtype="int32", **SMALL),
                           {k: v.astype(np.int32) for k, v in t.items()})
    for k in wide:
        np.testing.assert_array_equal(wide[k], narrow[k])
    del t["token_type_ids"]
    half = reference.run(zoo.build("gpt2", batch=BATCH, dtype="float16", **SMALL), t)
    y = half["last_hidden_state"]
    assert y.dtype == np.float16 and np.isfinite(y).all() and np.abs(y).max() > 0


def test_load_state_names_what_does_not_fit():
    g = zoo.build("gpt2", **SMALL)
    state = {k: np.ones_like(a) for k, a in g.constants.items()}
    before = dict(g.constants)
    bad = dict(state)
    del bad["h.1.ln_2.bias"]
    bad["lm_head.weight"] = np.ones((3, 3), np.float32)
    bad["wpe.weight"] = np.ones((8, SMALL["hidden"]), np.float32)
    with pytest.raises(GraphError, match=r"misshaped: wpe\.weight \(8, 64\).*missing: h\.1\.ln_2\.bias.*"
                                         r"unexpected: lm_head\.weight"):
        zoo.load_state(g, bad)
    assert all(g.constants[k] is before[k] for k in before)                   # nothing loaded
    del bad["wpe.weight"]
    assert zoo.load_state(g, bad, strict=False) == (["wpe.weight", "h.1.ln_2.bias"], ["lm_head.weight"])
    assert (g.constants["wte.weight"] == 1).all() and g.constants["h.1.ln_2.bias"] is before["h.1.ln_2.bias"]
    half = zoo.build("gpt2", dtype="float16", **SMALL)
    zoo.load_state(half, state)                                               # cast to the graph's dtype
    assert half.constants["wte.weight"].dtype == np.float16


@pytest.mark.parametrize("config, match", [(dict(hidden=60, heads=8), "multiple of heads"),
                                           (dict(seq=40, max_positions=32), "longer than max_positions"),
                                           (dict(layers=0), "layers=0"),
                                           (dict(index_dtype="int8"), "index_dtype")])
@pytest.mark.parametrize("name", ["bert-base", "gpt2"])
def test_bad_config_is_a_clear_error(name, config, match):
    with pytest.raises(GraphError, match=match):
        zoo.build(name, **{**SMALL, **config})
