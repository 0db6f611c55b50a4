"""The model zoo: whole networks written in the graph IR, as the torch models define them, with
seeded random weights (no download) whose constants carry the torch ``state_dict`` names, so a
test can load them into the torch model, or torch's into the graph (:func:`load_state`), and
compare. ``zoo.build(name, **config)`` builds one; ``zoo.names()`` lists them:

* ``"resnet50"``: torchvision's ResNet-50 v1.5 (:mod:`.resnet`);
* ``"bert-base"``: transformers' ``BertModel`` with its pooler (:mod:`.bert`);
* ``"gpt2"``: transformers' ``GPT2Model``, GPT-2 small without the LM head (:mod:`.gpt2`).

Their sizes are keyword arguments (layers, hidden, heads, ...), full size by default, so a test
builds a 2-layer model in milliseconds and the same code the full one.
"""
from __future__ import annotations

import numpy as np

from ...errors import GraphError
from ..ir import Graph
from .bert import bert_base
from .gpt2 import gpt2
from .resnet import resnet50

_BUILDERS = {"resnet50": resnet50, "bert-base": bert_base, "gpt2": gpt2}


def names() -> list[str]:
    """The models the zoo can build."""
    return sorted(_BUILDERS)


def build(name: str, **config):
    """Build the zoo model ``name`` (a :class:`~npulab.graph.ir.Graph`) with ``config``."""
    if name not in _BUILDERS:
        raise GraphError(f"zoo: no model '{name}'; the zoo has {', '.join(names())}")
    return _BUILDERS[name](**config)


def _listed(keys, most: int = 8) -> str:
    keys = sorted(keys)
    return ", ".join(keys[:most]) + (f" and {len(keys) - most} more" if len(keys) > most else "")


def load_state(graph: Graph, state: dict, strict: bool = True) -> tuple[list, list]:
    """Replace ``graph``'s constants by the arrays of a torch-style ``state`` ({name: array}, e.g.
    ``{k: t.numpy() for k, t in model.state_dict().items()}``), each cast to its constant's
    dtype, as torch's ``load_state_dict`` copies into its parameters. A key of the wrong shape
    is an error; with ``strict`` (the default) so is a constant the state lacks (missing) or a
    key no constant has (unexpected): the GraphError names them all, and nothing is loaded.
    Returns the (missing, unexpected) keys, as torch does."""
    missing = [k for k in graph.constants if k not in state]
    unexpected = [k for k in state if k not in graph.constants]
    misshaped = [f"{k} {tuple(np.shape(state[k]))} (the graph's is {graph.constants[k].shape})"
                 for k in graph.constants if k in state and tuple(np.shape(state[k])) != graph.constants[k].shape]
    problems = ([f"{len(misshaped)} misshaped: {_listed(misshaped)}"] if misshaped else []) + \
        ([f"{len(missing)} missing: {_listed(missing)}"] if strict and missing else []) + \
        ([f"{len(unexpected)} unexpected: {_listed(unexpected)}"] if strict and unexpected else [])
    if problems:
        raise GraphError(f"load_state into graph '{graph.name}': the state does not fit its constants: "
                         f"{'; '.join(problems)}")
    for k in graph.constants:
        if k in state:
            a = np.asarray(state[k])
            graph.constants[k] = np.ascontiguousarray(a, dtype=graph.constants[k].dtype)
    return missing, unexpected


__all__ = ["build", "load_state", "names"]
