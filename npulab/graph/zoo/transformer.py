"""What BERT and GPT-2 share, written once: their seeded weights, the scalars their attention
reads, and multi-head attention itself, as torch's eager path computes it and ``torch.export``
writes it.

Multi-head attention over x (batch, seq, hidden), ``heads`` heads of d = hidden / heads::

    q, k, v  = projections of x                         (batch, seq, hidden) each
    q, k, v -> (batch, seq, heads, d) -> (batch, heads, seq, d)     Reshape, Transpose
    scores   = q @ k^T * (1 / sqrt(d))                  (batch, heads, seq, seq)   MatMul, Mul
    probs    = softmax(scores + mask, dim=-1)           AddBroadcast, SoftmaxV2
    context  = probs @ v -> (batch, seq, heads, d) -> (batch, seq, hidden)

``mask`` is additive: 0 where a query may look at a key, the dtype's most negative finite value
(torch's ``finfo(dtype).min``) where it may not, so exp sends those scores to 0 and no row ever
holds an infinity (transformers' ``eager_attention_forward``: ``matmul(q, k^T) * scaling +
mask``, then softmax, then ``matmul(probs, v)``).

The scalars (1.0, sqrt(d), finfo.min) are ``Fill`` nodes, not constants, so a zoo graph's
constants are exactly the model's ``state_dict``: :func:`npulab.graph.zoo.load_state` can then
demand every key and refuse every stranger.
"""
from __future__ import annotations

import numpy as np

from ...errors import GraphError
from ..ir import Graph

#: torch.finfo(dtype).min: the additive mask's "never", for the dtypes a zoo transformer takes
FINFO_MIN = {"float32": float(np.finfo(np.float32).min), "float16": float(np.finfo(np.float16).min)}
#: the token-id dtypes an input may take (torch's embedding indices are int64, CANN's Gather
#: takes int32 too)
INDEX_DTYPES = ("int64", "int32")


def check_config(model: str, *, hidden: int, heads: int, seq: int, max_positions: int, dtype: str,
                 index_dtype: str, **sizes) -> None:
    """Refuse a configuration the model cannot have, naming the rule it breaks."""
    for key, value in {"hidden": hidden, "heads": heads, "seq": seq, "max_positions": max_positions,
                       **sizes}.items():
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise GraphError(f"zoo '{model}': {key}={value!r} must be a whole number >= 1")
    if hidden % heads:
        raise GraphError(f"zoo '{model}': hidden={hidden} does not split into heads={heads} equal heads "
                         f"(hidden must be a multiple of heads)")
    if seq > max_positions:
        raise GraphError(f"zoo '{model}': seq={seq} is longer than max_positions={max_positions}, the "
                         f"rows of the position embedding")
    if dtype not in FINFO_MIN:
        raise GraphError(f"zoo '{model}': dtype {dtype!r} is not one of {', '.join(FINFO_MIN)}")
    if index_dtype not in INDEX_DTYPES:
        raise GraphError(f"zoo '{model}': index_dtype {index_dtype!r} is not one of {', '.join(INDEX_DTYPES)}")


class Weights:
    """Seeded weights in transformers' spirit (its ``_init_weights``): matrices and embeddings
    N(0, std), with the biases and the LayerNorms' weight and bias drawn near their torch starting
    values (0, 1, 0) rather than at them, so every weight changes the output and a misplaced one
    shows. Every array is a constant named by its ``state_dict`` key.

    ``materialize=False`` stores each weight as a read-only zero broadcast to its shape (numpy's
    zero-stride view: no memory, no time), for what needs only the shapes: counting parameters,
    lowering, timing-only runs of a full-size model (drawing GPT-2's 124 M values takes seconds),
    or a graph :func:`~npulab.graph.zoo.load_state` is about to fill."""

    def __init__(self, g: Graph, seed: int, dtype: str, std: float = 0.02, materialize: bool = True):
        self.g, self.rng, self.dtype, self.std = g, np.random.default_rng(seed), dtype, std
        self.materialize = materialize

    def normal(self, name: str, shape, std: float | None = None, mean: float = 0.0) -> str:
        if not self.materialize:
            return self.g.constant(name, np.broadcast_to(np.zeros((), self.dtype), shape))
        a = self.rng.standard_normal(shape, dtype=np.float32)
        a *= self.std if std is None else std
        a += mean
        return self.g.constant(name, a if self.dtype == "float32" else a.astype(self.dtype))

    def linear(self, name: str, n_in: int, n_out: int, std: float | None = None) -> tuple[str, str]:
        """torch.nn.Linear's weight (out, in) and bias (out,)."""
        return self.normal(name + ".weight", (n_out, n_in), std), self.normal(name + ".bias", (n_out,))

    def conv1d(self, name: str, n_in: int, n_out: int, std: float | None = None) -> tuple[str, str]:
        """transformers' Conv1D (GPT-2's linear layers): weight stored (in, out), y = x @ W + b."""
        return self.normal(name + ".weight", (n_in, n_out), std), self.normal(name + ".bias", (n_out,))

    def layer_norm(self, name: str, n: int) -> tuple[str, str]:
        return self.normal(name + ".weight", (n,), mean=1.0), self.normal(name + ".bias", (n,))


def fill(g: Graph, name: str, value: float, dtype: str) -> str:
    """A scalar as a node (``Fill`` of shape ()), not a constant: see the module docstring."""
    return g.node("Fill", [], name=name, shape=[], value=float(value), dtype=dtype)


def layer_norm(g: Graph, x: str, params: tuple[str, str], name: str, hidden: int, eps: float) -> str:
    """torch.nn.LayerNorm(hidden, eps) with its weight and bias."""
    return g.node("LayerNorm", [x, *params], name=name, normalized_shape=[hidden], eps=eps,
                  has_weight=True, has_bias=True)


def split_heads(g: Graph, x: str, name: str, batch: int, seq: int, hidden: int, heads: int) -> str:
    """(batch, seq, hidden) -> (batch, heads, seq, d): torch's ``view`` then ``transpose(1, 2)``."""
    x = g.node("Reshape", [x], name=name + ".view", shape=[batch, seq, heads, hidden // heads])
    return g.node("Transpose", [x], name=name + ".transpose", perm=[0, 2, 1, 3])


def attention(g: Graph, q: str, k: str, v: str, mask: str, scale: str, name: str, *, batch: int,
              seq: int, hidden: int, heads: int) -> str:
    """Multi-head attention of the projected q, k, v (batch, seq, hidden) under the additive
    ``mask`` (broadcast to (batch, heads, seq, seq)); ``scale`` is the scalar 1 / sqrt(d) the
    scores are multiplied by (one :func:`fill` a model shares between its layers). Returns the
    context (batch, seq, hidden); node names start with ``name``."""
    q, k, v = (split_heads(g, t, f"{name}.{what}", batch, seq, hidden, heads) for t, what in
               ((q, "query_states"), (k, "key_states"), (v, "value_states")))
    scores = g.node("MatMul", [q, k], name=name + ".scores", transpose_b=True)
    scores = g.node("Mul", [scores, scale], name=name + ".scale")
    scores = g.node("Add", [scores, mask], name=name + ".mask")
    probs = g.node("SoftmaxV2", [scores], name=name + ".softmax", dim=-1)
    context = g.node("MatMul", [probs, v], name=name + ".context")
    context = g.node("Transpose", [context], name=name + ".merge_heads", perm=[0, 2, 1, 3])
    return g.node("Reshape", [context], name=name + ".merge_heads.view", shape=[batch, seq, hidden])


__all__ = ["FINFO_MIN", "INDEX_DTYPES", "Weights", "attention", "check_config", "fill", "layer_norm",
           "split_heads"]
