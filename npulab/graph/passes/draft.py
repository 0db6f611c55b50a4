"""The working copy a pass edits, and the record of what it changed.

A pass never edits the graph it is given. It takes a :class:`Draft` of it (the node list, the
constants and their formats, copied), rewrites that, and :meth:`Draft.build` makes a new,
inferred :class:`~npulab.graph.ir.Graph`. What a fusion writes keeps the names a reader knows:
the fused node takes the first original's name (the op that does the work, as GE names a fused
node after its anchor) and writes the last original's output value, so every later node and the
graph's outputs read the same value names as before.

:class:`PassRecord` is one rule's line of the report, in the spirit of GE's
``fusion_result.json``: how often its pattern matched and how often it took effect, and one
line per change.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, field

import numpy as np

from ..ir import Graph
from ..types import Node


class Draft:
    """A graph being rewritten: ``nodes`` (copies, in order), ``constants`` ({name: (array,
    format)}), and ``alias`` (value -> the value that now stands for it, for removed nodes)."""

    def __init__(self, g: Graph):
        self.src = g
        self.nodes: list[Node] = [copy.deepcopy(n) for n in g.nodes]
        self.constants = {k: (v, g.types[k].format) for k, v in g.constants.items()}
        self.alias: dict[str, str] = {}
        self._names = {n.name for n in g.nodes} | set(g.types) | set(g.constants) | set(g.inputs)

    # -- reading ---------------------------------------------------------------------------
    def type_of(self, value: str):
        """The value's type in the source graph (values a pass creates have none yet)."""
        return self.src.types.get(value)

    def producer(self, value: str) -> Node | None:
        for n in self.nodes:
            if value in n.outputs:
                return n
        return None

    def consumers(self, value: str) -> list[Node]:
        return [n for n in self.nodes if value in n.inputs]

    def only_use(self, value: str, node: Node) -> bool:
        """Whether ``node`` is the one reader of ``value`` and the value is no graph output:
        the condition for fusing the value away."""
        users = self.consumers(value)
        return len(users) == 1 and users[0] is node and value not in self.src.outputs

    def const(self, value: str):
        """The array of a constant (None when ``value`` is not one)."""
        c = self.constants.get(value)
        return None if c is None else c[0]

    def scalar(self, value: str):
        """A constant holding one number, as a float (None otherwise)."""
        a = self.const(value)
        return float(np.asarray(a, dtype=np.float64).reshape(-1)[0]) if a is not None and a.size == 1 else None

    # -- writing ---------------------------------------------------------------------------
    def fresh(self, base: str) -> str:
        """A node or value name not used in the graph yet."""
        name, i = base, 1
        while name in self._names:
            name, i = f"{base}_{i}", i + 1
        self._names.add(name)
        return name

    def add_constant(self, base: str, array, format: str = "ND") -> str:
        name = self.fresh(base)
        self.constants[name] = (np.asarray(array), format)
        return name

    def new_node(self, op_type: str, inputs, outputs, name: str, **attrs) -> Node:
        self._names.update([name, *outputs])
        return Node(name, op_type, list(inputs), list(outputs), attrs)

    def replace(self, old: list[Node], new: list[Node]) -> None:
        """Put ``new`` where the last of ``old`` stood and drop ``old`` (the nodes ``new`` reads
        are all written before that place: the last original's inputs, or earlier values)."""
        at = max(self.nodes.index(n) for n in old)
        last = self.nodes[at]
        drop = [o for o in old if o is not last]
        self.nodes[at:at + 1] = new
        self.nodes = [n for n in self.nodes if not any(n is d for d in drop)]
        kept = {n.name for n in new}
        self._names.difference_update(n.name for n in old if n.name not in kept)

    def remove(self, node: Node, stands_for: str | None = None) -> None:
        """Drop ``node``; its (one) output is read as ``stands_for`` from now on."""
        self.nodes.remove(node)
        if stands_for is not None:
            self.alias[node.outputs[0]] = stands_for

    def _resolve(self, v: str) -> str:
        while v in self.alias:
            v = self.alias[v]
        return v

    def build(self, chip=None) -> Graph:
        """The new graph: the source's inputs, the constants the nodes still read, the nodes,
        the outputs; inferred for ``chip``."""
        g = Graph(self.src.name)
        for name in self.src.inputs:
            t = self.src.types[name]
            g.input(name, t.shape, t.dtype, t.format)
        for n in self.nodes:
            n.inputs = [self._resolve(v) if v else v for v in n.inputs]
        used = {v for n in self.nodes for v in n.inputs} | {self._resolve(v) for v in self.src.outputs}
        for name, (array, fmt) in self.constants.items():
            if name in used:
                g.constant(name, array, fmt)
        for n in self.nodes:
            g.node(n.op_type, [v or None for v in n.inputs], name=n.name, outputs=list(n.outputs), **n.attrs)
        g.output(*[self._resolve(v) for v in self.src.outputs])
        return g.infer(chip)


@dataclass
class PassRecord:
    """One rule's run: ``matched`` patterns found, ``effected`` rewritten (GE's fusion_result
    match_times and effect_times), ``changes`` one line each; ``enabled`` False when the
    switch file turned the rule off (then nothing ran)."""
    rule: str
    kind: str
    enabled: bool = True
    matched: int = 0
    effected: int = 0
    changes: list = field(default_factory=list)
    nodes_before: int = 0
    nodes_after: int = 0

    def did(self, change: str) -> None:
        self.matched += 1
        self.effected += 1
        self.changes.append(change)

    def saw(self, why_not: str) -> None:
        """A pattern that matched but was left as it was, and why."""
        self.matched += 1
        self.changes.append(f"left: {why_not}")


__all__ = ["Draft", "PassRecord"]
