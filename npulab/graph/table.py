"""The table of the graph's own op schemas (structural ops, graph forms, framework-level ops):
op type -> inference, filled by :mod:`npulab.graph.schema` and :mod:`npulab.graph.forms`, read by
:func:`npulab.graph.schema.infer_node`; and the two checks they share."""
from __future__ import annotations

from typing import Callable

from ..errors import GraphError
from .types import Node

#: op type -> inference (node, input types) -> output types, for the structural ops
STRUCTURAL: dict[str, Callable] = {}


def structural(op_type: str):
    def deco(fn):
        STRUCTURAL[op_type] = fn
        return fn
    return deco


def one_input(node: Node, ins, n: int = 1):
    if len(ins) != n or any(t is None for t in ins):
        raise GraphError(f"{node.where()}: takes {n} input{'s' * (n > 1)}, got {len(ins)}")
    return ins[0]


def axis_of(node: Node, axis, rank: int, what: str = "axis") -> int:
    if not isinstance(axis, int) or not -rank <= axis < max(rank, 1):
        raise GraphError(f"{node.where()}: {what}={axis!r} is out of range for a rank-{rank} input")
    return axis % max(rank, 1)


__all__ = ["STRUCTURAL", "structural", "one_input", "axis_of"]
