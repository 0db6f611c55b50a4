"""The graph IR: typed tensors, nodes and the graph that holds them (GE's ComputeGraph).

* :class:`~npulab.graph.types.TensorType`: a tensor's shape, dtype and storage format ("ND",
  "NCHW", "NC1HWC0", "FRACTAL_NZ", "FRACTAL_Z", ...): what a value carries from the node that
  makes it to the nodes that read it;
* :class:`~npulab.graph.types.Node`: one operator: its CANN op type ("Conv2D", "BatchMatMul",
  "Relu", ...), the names of the values it reads and writes, its attributes (JSON values only);
* :class:`Graph`: inputs, constants (weights, numpy arrays), nodes in topological order and
  outputs; every value named once. :meth:`Graph.infer` fills in the type of every value from
  the op schemas (:mod:`npulab.graph.schema`), :meth:`Graph.validate` checks the whole graph and
  names the node at fault, :meth:`Graph.dump` prints it as text, and :mod:`npulab.graph.serial`
  saves it as JSON plus ``.npz`` (never pickled).

A graph is built by its methods, which keep it consistent as it grows::

    g = Graph("tiny")
    x = g.input("x", (1, 3, 8, 8), "float16", "NCHW")
    w = g.constant("w", np.ones((4, 3, 3, 3), np.float16))
    y = g.node("Conv2D", [x, w], padding=1)
    g.output(g.node("Relu", [y]))
    g.infer()
"""
from __future__ import annotations

import numpy as np

from ..errors import GraphError
from .schema import infer_node
from .types import NAME, Node, TensorType, check_attr

class Graph:
    """A model as a graph of operators. Values are named; :attr:`types` maps each to its
    TensorType once known (inputs and constants at once, the rest after :meth:`infer`)."""

    def __init__(self, name: str = "graph"):
        self.name = name
        self.inputs: list[str] = []
        self.outputs: list[str] = []
        self.nodes: list[Node] = []
        self.constants: dict[str, np.ndarray] = {}
        self.types: dict[str, TensorType] = {}
        self._producer: dict[str, Node] = {}
        self._counts: dict[str, int] = {}

    # -- building ---------------------------------------------------------------------------
    def _new_name(self, base: str) -> str:
        n = self._counts.get(base, 0)
        while True:
            name = f"{base}_{n}" if n else base
            n += 1
            if not self.defined(name) and all(node.name != name for node in self.nodes):
                self._counts[base] = n
                return name

    def _claim(self, name: str, what: str) -> str:
        if not isinstance(name, str) or not NAME.match(name):
            raise GraphError(f"{what}: {name!r} is not a valid name (a letter or _, then letters, "
                             f"digits and _ . : / -)")
        if self.defined(name):
            raise GraphError(f"{what}: value '{name}' is already defined in graph '{self.name}'")
        return name

    def defined(self, value: str) -> bool:
        """Whether a value of this name exists (an input, a constant or a node's output)."""
        return value in self.types or value in self.constants or value in self._producer or value in self.inputs

    def input(self, name: str, shape, dtype, format: str = "ND") -> str:
        """Add a graph input; returns its name."""
        self._claim(name, f"graph '{self.name}' input")
        self.types[name] = TensorType(tuple(shape), dtype, format)
        self.inputs.append(name)
        return name

    def constant(self, name: str, array, format: str = "ND") -> str:
        """Add a constant (a weight): a numpy array, stored as given; returns its name."""
        array = np.asarray(array)
        if array.dtype == object:
            raise GraphError(f"constant '{name}': object arrays cannot be stored; give a numeric array")
        self._claim(name, f"graph '{self.name}' constant")
        self.constants[name] = array
        self.types[name] = TensorType(array.shape, str(array.dtype), format)
        return name

    def node(self, op_type: str, inputs, name: str | None = None, outputs: int | list = 1, **attrs):
        """Append a node reading ``inputs`` (value names, None or "" for an optional one left
        out); returns its output's name (or the list of names when ``outputs`` is more than 1 or
        a list of names)."""
        name = name or self._new_name(op_type.lower())
        if any(n.name == name for n in self.nodes):
            raise GraphError(f"graph '{self.name}': a node named '{name}' already exists")
        ins = ["" if v is None else v for v in inputs]
        for v in ins:
            if v and not self.defined(v):
                raise GraphError(f"node '{name}' ({op_type}): input '{v}' is not defined yet; define "
                                 f"values before the nodes that read them (a graph is built in order)")
        for key, value in attrs.items():
            check_attr(name, key, value)
        outs = ([f"{name}:{i}" if outputs > 1 else name for i in range(outputs)]
                if isinstance(outputs, int) else list(outputs))
        for out in outs:
            self._claim(out, f"node '{name}' ({op_type}) output")
        node = Node(name, op_type, ins, outs, {k: list(v) if isinstance(v, tuple) else v for k, v in attrs.items()})
        self.nodes.append(node)
        for out in outs:
            self._producer[out] = node
        return outs[0] if isinstance(outputs, int) and outputs == 1 else outs

    def output(self, *values: str) -> None:
        """Mark values as graph outputs."""
        for v in values:
            if not self.defined(v):
                raise GraphError(f"graph '{self.name}' output '{v}' is not defined")
            self.outputs.append(v)

    # -- reading ----------------------------------------------------------------------------
    def producer(self, value: str) -> Node | None:
        """The node that writes ``value`` (None for an input or a constant)."""
        return self._producer.get(value)

    def consumers(self, value: str) -> list[Node]:
        """The nodes that read ``value``, in graph order."""
        return [n for n in self.nodes if value in n.inputs]

    def type_of(self, value: str) -> TensorType:
        t = self.types.get(value)
        if t is None:
            where = self.producer(value)
            raise GraphError(f"value '{value}'{' of ' + where.where() if where else ''} has no type yet: "
                             f"run graph.infer() first")
        return t

    def op_counts(self) -> dict[str, int]:
        """How many nodes of each op type, in order of first appearance."""
        out: dict[str, int] = {}
        for n in self.nodes:
            out[n.op_type] = out.get(n.op_type, 0) + 1
        return out

    # -- checking ---------------------------------------------------------------------------
    def infer(self, chip=None) -> "Graph":
        """Set the type of every node's outputs from its op schema, in graph order; an op no schema
        knows, or inputs a schema refuses, raise GraphError naming the node. Returns the graph."""
        for node in self.nodes:
            ins = [self.type_of(v) if v else None for v in node.inputs]
            outs = infer_node(node, ins, chip)
            if len(outs) != len(node.outputs):
                raise GraphError(f"{node.where()}: its schema gives {len(outs)} outputs, the node has "
                                 f"{len(node.outputs)}")
            for v, t in zip(node.outputs, outs):
                self.types[v] = t
        return self

    def validate(self) -> "Graph":
        """Check the graph as a whole: names unique, every input defined before it is read (the
        nodes in topological order), every output defined, no value written twice, every value
        reachable from an output typed. Raises GraphError naming what is wrong; returns the graph."""
        seen = set(self.inputs) | set(self.constants)
        if len(seen) != len(self.inputs) + len(self.constants):
            raise GraphError(f"graph '{self.name}': a name is both an input and a constant")
        names = set()
        for node in self.nodes:
            if node.name in names:
                raise GraphError(f"graph '{self.name}': two nodes are named '{node.name}'")
            names.add(node.name)
            for v in node.inputs:
                if v and v not in seen:
                    raise GraphError(f"{node.where()}: input '{v}' is not written by any earlier node, "
                                     f"input or constant (nodes out of order, or a missing producer)")
            for v in node.outputs:
                if v in seen:
                    raise GraphError(f"{node.where()}: output '{v}' is already defined")
                seen.add(v)
        if not self.outputs:
            raise GraphError(f"graph '{self.name}' has no outputs")
        for v in self.outputs:
            if v not in seen:
                raise GraphError(f"graph '{self.name}': output '{v}' is not defined")
        missing = [v for v in seen if v not in self.types]
        if missing:
            raise GraphError(f"graph '{self.name}': {len(missing)} values have no type "
                             f"(e.g. '{sorted(missing)[0]}'): run graph.infer() first")
        return self

    # -- showing ----------------------------------------------------------------------------
    def dump(self) -> str:
        """The graph as text: inputs, constants (shape only), one line a node, outputs."""
        def typed(v):
            return f"%{v}: {self.types[v]}" if v in self.types else f"%{v}"
        lines = [f"graph {self.name}("]
        lines += [f"    {typed(v)}," for v in self.inputs]
        lines.append(")")
        for name in self.constants:
            lines.append(f"  const {typed(name)}")
        for n in self.nodes:
            attrs = ", ".join(f"{k}={v!r}" for k, v in n.attrs.items())
            args = ", ".join(f"%{v}" if v else "_" for v in n.inputs)
            outs = ", ".join(typed(v) for v in n.outputs)
            lines.append(f"  {outs} = {n.op_type}({args}{', ' if attrs and args else ''}{attrs})  # {n.name}")
        lines.append(f"  return {', '.join('%' + v for v in self.outputs)}")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return (f"Graph('{self.name}': {len(self.inputs)} inputs, {len(self.constants)} constants, "
                f"{len(self.nodes)} nodes, {len(self.outputs)} outputs)")


__all__ = ["Graph"]
