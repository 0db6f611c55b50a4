"""BERT-base as transformers' ``BertModel`` computes it in eval mode (dropout off, the eager
attention path), with its pooler: 109,482,240 parameters at full size.

    embeddings   word[input_ids] + token_type[token_type_ids] + position[0 .. seq-1], LayerNorm
    mask         (1 - attention_mask) * finfo.min, as (batch, 1, 1, seq): padding keys get no weight
                 (get_extended_attention_mask's form; transformers 5's eager mask,
                 where(attention_mask, 0, finfo.min), has the same values)
    layer x L    h = LayerNorm(h + dense(attention(h)))           attention.output
                 h = LayerNorm(h + dense(gelu(dense(h))))         intermediate, output (GELU: erf)
    pooler       tanh(dense(h[:, 0]))                             the first ([CLS]) token

Constants are the ``state_dict`` keys ("embeddings.word_embeddings.weight",
"encoder.layer.0.attention.self.query.weight", "pooler.dense.bias", ...), node names the module
paths ("encoder.layer.0.attention.self.query"; a step inside a module adds a word:
"encoder.layer.0.attention.self.softmax"), so a test copies torch's weights in with
:func:`npulab.graph.zoo.load_state` and profiles read like the model's source. Linear weights
keep torch's (out, in) layout, read with ``transpose_b``.

Inputs are ``input_ids``, ``token_type_ids`` and ``attention_mask`` (batch, seq), int64 by
default: what a transformers tokenizer returns and torch's embedding takes, so a test feeds the
same arrays to both; ``index_dtype="int32"`` gives the width CANN's Gather also takes. Outputs
``last_hidden_state`` (batch, seq, hidden) and ``pooler_output`` (batch, hidden).
"""
from __future__ import annotations

from ..ir import Graph
from .transformer import FINFO_MIN, Weights, attention, check_config, fill, layer_norm


def _linear(g: Graph, w: Weights, x: str, name: str, n_in: int, n_out: int) -> str:
    return g.node("MatMul", [x, *w.linear(name, n_in, n_out)], name=name, transpose_b=True)


def _embeddings(g: Graph, w: Weights, ids: str, types: str, c: dict) -> str:
    p, hidden = "embeddings", c["hidden"]
    word = g.node("GatherV2", [w.normal(p + ".word_embeddings.weight", (c["vocab"], hidden)), ids],
                  name=p + ".word_embeddings", axis=0)
    typ = g.node("GatherV2", [w.normal(p + ".token_type_embeddings.weight", (c["type_vocab"], hidden)), types],
                 name=p + ".token_type_embeddings", axis=0)
    positions = g.node("Range", [], name=p + ".position_ids", start=0, limit=c["seq"], delta=1,
                       dtype=c["index_dtype"])
    pos = g.node("GatherV2", [w.normal(p + ".position_embeddings.weight", (c["max_positions"], hidden)),
                              positions], name=p + ".position_embeddings", axis=0)
    x = g.node("Add", [word, typ], name=p + ".add_token_type")
    x = g.node("Add", [x, pos], name=p + ".add_position")
    return layer_norm(g, x, w.layer_norm(p + ".LayerNorm", hidden), p + ".LayerNorm", hidden, c["eps"])


def _extended_mask(g: Graph, mask: str, dtype: str) -> str:
    """BertModel.get_extended_attention_mask: (1 - mask) * finfo.min as (batch, 1, 1, seq)."""
    p = "extended_attention_mask"
    m = g.node("Cast", [mask], name=p + ".cast", dtype=dtype)
    m = g.node("Sub", [fill(g, p + ".one", 1.0, dtype), m], name=p + ".invert")
    m = g.node("Mul", [m, fill(g, p + ".min", FINFO_MIN[dtype], dtype)], name=p + ".scale")
    return g.node("Unsqueeze", [m], name=p, axes=[1, 2])


def _layer(g: Graph, w: Weights, h: str, mask: str, scale: str, i: int, c: dict) -> str:
    p, hidden = f"encoder.layer.{i}", c["hidden"]
    s = p + ".attention.self"
    q, k, v = (_linear(g, w, h, f"{s}.{what}", hidden, hidden) for what in ("query", "key", "value"))
    ctx = attention(g, q, k, v, mask, scale, s, batch=c["batch"], seq=c["seq"], hidden=hidden,
                    heads=c["heads"])
    o = p + ".attention.output"
    y = _linear(g, w, ctx, o + ".dense", hidden, hidden)
    y = g.node("Add", [y, h], name=o + ".residual")
    h = layer_norm(g, y, w.layer_norm(o + ".LayerNorm", hidden), o + ".LayerNorm", hidden, c["eps"])
    y = _linear(g, w, h, p + ".intermediate.dense", hidden, c["intermediate"])
    y = g.node("Gelu", [y], name=p + ".intermediate.intermediate_act_fn", approximate="none")
    o = p + ".output"
    y = _linear(g, w, y, o + ".dense", c["intermediate"], hidden)
    y = g.node("Add", [y, h], name=o + ".residual")
    return layer_norm(g, y, w.layer_norm(o + ".LayerNorm", hidden), o + ".LayerNorm", hidden, c["eps"])


def _pooler(g: Graph, w: Weights, h: str, c: dict) -> str:
    first = g.node("Slice", [h], name="pooler.first_token", starts=[0], ends=[1], axes=[1], steps=[1])
    first = g.node("Squeeze", [first], name="pooler.first_token.squeeze", axes=[1])
    y = _linear(g, w, first, "pooler.dense", c["hidden"], c["hidden"])
    return g.node("Tanh", [y], name="pooler.activation")


def bert_base(batch=1, seq=128, vocab=30522, hidden=768, layers=12, heads=12, intermediate=3072,
              max_positions=512, type_vocab=2, eps=1e-12, dtype="float32", index_dtype="int64",
              seed=0, pooler=True, materialize=True) -> Graph:
    """transformers' ``BertModel`` (eval, eager attention) of ``BertConfig(vocab_size=vocab,
    hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
    intermediate_size=intermediate, max_position_embeddings=max_positions,
    type_vocab_size=type_vocab, layer_norm_eps=eps)`` on (batch, seq) tokens; ``pooler=False``
    leaves the pooler out (``add_pooling_layer=False``); ``materialize=False`` gives shapes-only
    weights (:class:`~.transformer.Weights`). Returned inferred."""
    c = dict(batch=batch, seq=seq, vocab=vocab, hidden=hidden, layers=layers, heads=heads,
             intermediate=intermediate, max_positions=max_positions, type_vocab=type_vocab, eps=eps,
             index_dtype=index_dtype)
    check_config("bert-base", **{k: v for k, v in c.items() if k != "eps"}, dtype=dtype)
    g = Graph("bert-base")
    w = Weights(g, seed, dtype, materialize=materialize)
    ids = g.input("input_ids", (batch, seq), index_dtype)
    types = g.input("token_type_ids", (batch, seq), index_dtype)
    mask = g.input("attention_mask", (batch, seq), index_dtype)
    h = _embeddings(g, w, ids, types, c)
    mask = _extended_mask(g, mask, dtype)
    scale = fill(g, "attention_scale", (hidden // heads) ** -0.5, dtype)
    for i in range(layers):
        h = _layer(g, w, h, mask, scale, i, c)
    g.output(g.node("Identity", [h], name="last_hidden_state"))
    if pooler:
        g.output(g.node("Identity", [_pooler(g, w, h, c)], name="pooler_output"))
    return g.infer()


__all__ = ["bert_base"]
