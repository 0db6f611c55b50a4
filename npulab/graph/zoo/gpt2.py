"""GPT-2 small as transformers' ``GPT2Model`` computes it in eval mode (dropout off, the eager
attention path), without the LM head: 124,439,808 parameters at full size.

    embeddings   wte[input_ids] + wpe[0 .. seq-1]
    mask         0 where key j <= query i and attention_mask[b, j] is 1, finfo.min elsewhere:
                 (batch, 1, seq, seq), built once from Range, GreaterEqual and Select
    block x L    h = h + c_proj(attention(c_attn(ln_1(h))))        pre-norm, q k v from one matmul
                 h = h + c_proj(gelu_new(c_fc(ln_2(h))))           gelu_new: GELU's tanh form
    ln_f         the final LayerNorm: ``last_hidden_state``

GPT-2's linear layers are transformers' ``Conv1D``: the weight is stored (in, out) and applied
as x @ W + b, so its MatMuls read it as it is (no ``transpose_b``); ``c_attn`` makes q, k and v
at once, split along the last axis. The mask is transformers' eager one (``masking_utils``:
``where(causal & not padding, 0, finfo.min)``), added to the scores.
Constants are the ``state_dict`` keys ("wte.weight", "h.0.attn.c_attn.weight", "ln_f.bias",
...), node names the module paths ("h.0.attn.c_attn", "h.0.mlp.act", ...).

Inputs ``input_ids`` and ``attention_mask`` (batch, seq), int64 by default (a tokenizer's and
torch's dtype; ``index_dtype="int32"`` for CANN's narrower Gather); output ``last_hidden_state``
(batch, seq, hidden).
"""
from __future__ import annotations

import math

from ..ir import Graph
from .transformer import FINFO_MIN, Weights, attention, check_config, fill, layer_norm


def _conv1d(g: Graph, w: Weights, x: str, name: str, n_in: int, n_out: int, std=None) -> str:
    return g.node("MatMul", [x, *w.conv1d(name, n_in, n_out, std)], name=name)


def _mask(g: Graph, mask: str, pos: str, dtype: str) -> str:
    """The additive mask: causal (key position <= query position, ``pos`` the positions 0 ..
    seq-1) and not padding."""
    p = "causal_mask"
    rows = g.node("Unsqueeze", [pos], name=p + ".query", axes=[1])          # (seq, 1)
    cols = g.node("Unsqueeze", [pos], name=p + ".key", axes=[0])            # (1, seq)
    causal = g.node("GreaterEqual", [rows, cols], name=p + ".causal")       # (seq, seq)
    keep = g.node("Cast", [mask], name=p + ".padding", dtype="bool")        # (batch, seq)
    keep = g.node("Unsqueeze", [keep], name=p + ".padding.view", axes=[1, 2])
    allowed = g.node("LogicalAnd", [causal, keep], name=p + ".allowed")   # (batch, 1, seq, seq)
    zero, never = fill(g, p + ".zero", 0.0, dtype), fill(g, p + ".min", FINFO_MIN[dtype], dtype)
    return g.node("Select", [allowed, zero, never], name=p)


def _block(g: Graph, w: Weights, h: str, mask: str, scale: str, i: int, c: dict) -> str:
    p, hidden, eps = f"h.{i}", c["hidden"], c["eps"]
    proj_std = 0.02 / math.sqrt(2 * c["layers"])       # GPT-2's scaled init of the residual projections
    x = layer_norm(g, h, w.layer_norm(p + ".ln_1", hidden), p + ".ln_1", hidden, eps)
    qkv = _conv1d(g, w, x, p + ".attn.c_attn", hidden, 3 * hidden)
    q, k, v = g.node("Split", [qkv], name=p + ".attn.split", outputs=3, axis=-1, sizes=[hidden] * 3)
    ctx = attention(g, q, k, v, mask, scale, p + ".attn", batch=c["batch"], seq=c["seq"], hidden=hidden,
                    heads=c["heads"])
    y = _conv1d(g, w, ctx, p + ".attn.c_proj", hidden, hidden, proj_std)
    h = g.node("Add", [y, h], name=p + ".attn.residual")
    x = layer_norm(g, h, w.layer_norm(p + ".ln_2", hidden), p + ".ln_2", hidden, eps)
    y = _conv1d(g, w, x, p + ".mlp.c_fc", hidden, c["intermediate"])
    y = g.node("Gelu", [y], name=p + ".mlp.act", approximate="tanh")
    y = _conv1d(g, w, y, p + ".mlp.c_proj", c["intermediate"], hidden, proj_std)
    return g.node("Add", [y, h], name=p + ".mlp.residual")


def gpt2(batch=1, seq=128, vocab=50257, hidden=768, layers=12, heads=12, intermediate=None,
         max_positions=1024, eps=1e-5, dtype="float32", index_dtype="int64", seed=0,
         materialize=True) -> Graph:
    """transformers' ``GPT2Model`` (eval, eager attention) of ``GPT2Config(vocab_size=vocab,
    n_embd=hidden, n_layer=layers, n_head=heads, n_inner=intermediate, n_positions=max_positions,
    layer_norm_epsilon=eps)`` on (batch, seq) tokens; ``intermediate`` None is 4 * hidden, as
    ``n_inner=None`` is; ``materialize=False`` gives shapes-only weights
    (:class:`~.transformer.Weights`). Returned inferred."""
    intermediate = 4 * hidden if intermediate is None else intermediate
    c = dict(batch=batch, seq=seq, vocab=vocab, hidden=hidden, layers=layers, heads=heads,
             intermediate=intermediate, max_positions=max_positions, eps=eps, index_dtype=index_dtype)
    check_config("gpt2", **{k: v for k, v in c.items() if k != "eps"}, dtype=dtype)
    g = Graph("gpt2")
    w = Weights(g, seed, dtype, materialize=materialize)
    ids = g.input("input_ids", (batch, seq), index_dtype)
    mask = g.input("attention_mask", (batch, seq), index_dtype)
    tok = g.node("GatherV2", [w.normal("wte.weight", (vocab, hidden)), ids], name="wte", axis=0)
    positions = g.node("Range", [], name="position_ids", start=0, limit=seq, delta=1, dtype=index_dtype)
    pos = g.node("GatherV2", [w.normal("wpe.weight", (max_positions, hidden), std=0.01), positions],
                 name="wpe", axis=0)
    h = g.node("Add", [tok, pos], name="add_position")
    mask = _mask(g, mask, positions, dtype)
    scale = fill(g, "attention_scale", (hidden // heads) ** -0.5, dtype)
    for i in range(layers):
        h = _block(g, w, h, mask, scale, i, c)
    h = layer_norm(g, h, w.layer_norm("ln_f", hidden), "ln_f", hidden, eps)
    g.output(g.node("Identity", [h], name="last_hidden_state"))
    return g.infer()


__all__ = ["gpt2"]
