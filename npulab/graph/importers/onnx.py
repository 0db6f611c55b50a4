"""From ONNX: a model file (or a loaded ``onnx.ModelProto``) as a graph of the IR, as ATC reads
one with ``--framework=5``.

* graph inputs: the ONNX inputs that are not initializers, with their declared shapes; a
  symbolic dim (``batch``) needs ``input_shape`` (ATC's ``--input_shape`` spelling, or a dict);
* initializers and ``Constant`` nodes are known values: a node reading one as data gets a graph
  constant (named by the initializer), a node reading one as an argument (Reshape's shape,
  Slice's starts, Unsqueeze's axes) takes it as an attribute, as ATC does;
* each node maps through :data:`ONNX_OPS` (the mappings are in :mod:`~.onnx_ops`) to one graph
  op or a few, typed as it is added
  (``Shape`` of a typed value is a known value, and a node of :data:`FOLD` or of integer
  arithmetic whose inputs are all known is computed at import, so shape arithmetic folds away);
* ONNX nodes with no mapping are all collected and reported together in one
  :class:`~npulab.errors.UnsupportedOpError`, one ``Op type not supported:`` line each.
"""
from __future__ import annotations

import re

import numpy as np

from ...errors import GraphError, UnsupportedOpError
from ..ir import Graph
from ..schema import infer_node
from ..types import NAME
from .input_shape import parse_input_shape
from .onnx_ops import ONNX_OPS, _Unsupported

#: ops computed at import when every input is known (the exporters' shape and mask arithmetic):
#: op type -> (attributes, *input arrays) -> output array
FOLD = {
    "Equal": lambda a, x, y: np.equal(x, y), "Less": lambda a, x, y: np.less(x, y),
    "Greater": lambda a, x, y: np.greater(x, y), "And": lambda a, x, y: np.logical_and(x, y),
    "Or": lambda a, x, y: np.logical_or(x, y), "Not": lambda a, x: np.logical_not(x),
    "Where": lambda a, c, x, y: np.where(c, x, y),
    "GatherElements": lambda a, x, i: np.take_along_axis(x, i, axis=int(a.get("axis", 0))),
    "Expand": lambda a, x, shape: np.broadcast_to(x, np.broadcast_shapes(x.shape, tuple(shape))).copy(),
    "Reshape": lambda a, x, shape: x.reshape([x.shape[i] if d == 0 else d for i, d in enumerate(shape)]),
}


class _Missing(Exception):
    """A value an unsupported node would have made."""


def _clean(name: str) -> str:
    """An ONNX name as a graph name ('/layer1/conv/Conv' -> 'layer1/conv/Conv')."""
    name = re.sub(r"[^A-Za-z0-9_.:/\-]", "_", name.lstrip("/"))
    return name if NAME.match(name) else "_" + name


class _Importer:
    """The state of one import: the graph being built, the graph value of each ONNX value, the
    values known at import (initializers, constants, folded shapes)."""

    def __init__(self, model, shapes: dict):
        import onnx
        from onnx import numpy_helper
        self.onnx, self.numpy_helper = onnx, numpy_helper
        self.model = model
        self.g = Graph(_clean(model.graph.name or "onnx"))
        self.env: dict = {}          # onnx value name -> graph value name
        self.static: dict = {}       # onnx value name -> numpy array (initializers, folded values)
        self.shapes = shapes
        self.node = None
        self.names: set = set()      # node names taken
        for init in model.graph.initializer:
            self.static[init.name] = numpy_helper.to_array(init)

    # -- values --------------------------------------------------------------------------------
    def value(self, name: str) -> str:
        """The graph value of an ONNX value name (a known value becomes a constant)."""
        if name in self.env:
            return self.env[name]
        if name in self.static:
            cname = _clean(name)
            while self.g.defined(cname):
                cname += "_"
            self.env[name] = self.g.constant(cname, self.static[name])
            return self.env[name]
        raise _Missing(name)

    def known(self, i: int, what: str):
        """Input ``i`` of the current node as a known numpy array (an argument, not data)."""
        name = self.node.input[i] if len(self.node.input) > i else ""
        if not name:
            return None
        if name not in self.static:
            if name in self.env or name not in self.produced:
                raise _Unsupported(f"its {what} (input {i}, '{name}') is computed at run time; the graph "
                                   f"needs it known when the model is imported")
            raise _Missing(name)
        return self.static[name]

    def type_of(self, name: str):
        return self.g.type_of(self.value(name))

    def emit(self, op_type: str, inputs, outputs=1, **attrs):
        """Append a node named after the ONNX node and type it at once."""
        base = _clean(self.node.name or f"{self.node.op_type}_{len(self.g.nodes)}")
        name, i = base, 1
        while self.g.defined(name) or name in self.names:
            name, i = f"{base}_{i}", i + 1
        self.names.add(name)
        out = self.g.node(op_type, inputs, name=name, outputs=outputs, **attrs)
        node = self.g.nodes[-1]
        types = infer_node(node, [self.g.type_of(v) if v else None for v in node.inputs])
        for v, t in zip(node.outputs, types):
            self.g.types[v] = t
        return out

    def scalar(self, value, dtype: str) -> str:
        """A 0-d constant holding ``value`` as ``dtype`` (Clip's bounds)."""
        name = f"{_clean(self.node.name or self.node.op_type)}/scalar"
        while self.g.defined(name):
            name += "_"
        return self.g.constant(name, np.asarray(value, dtype=dtype))

    # -- the walk ------------------------------------------------------------------------------
    def _inputs(self):
        onnx = self.onnx
        for inp in self.model.graph.input:
            if inp.name in self.static:
                continue
            tt = inp.type.tensor_type
            dims = [d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim]
            shape = self.shapes.get(inp.name)
            if shape is None:
                if None in dims:
                    raise GraphError(f"from_onnx: input '{inp.name}' has a dim not fixed in the model "
                                     f"({[d.dim_param or d.dim_value for d in tt.shape.dim]}); give its shape as "
                                     f"input_shape='{inp.name}:{','.join(str(d or 1) for d in dims)}' (ATC's "
                                     f"--input_shape form)")
                shape = tuple(dims)
            elif len(shape) != len(dims) or any(d is not None and d != s for d, s in zip(dims, shape)):
                raise GraphError(f"from_onnx: input_shape gives '{inp.name}' the shape {list(shape)}; the model "
                                 f"declares {[d if d is not None else '?' for d in dims]}")
            dtype = str(onnx.helper.tensor_dtype_to_np_dtype(tt.elem_type))
            self.env[inp.name] = self.g.input(_clean(inp.name), shape, dtype)
        unknown = set(self.shapes) - {i.name for i in self.model.graph.input}
        if unknown:
            raise GraphError(f"from_onnx: input_shape names {', '.join(sorted(unknown))}, which the model does "
                             f"not take (inputs: {', '.join(i.name for i in self.model.graph.input)})")

    def run(self) -> Graph:
        self._inputs()
        self.produced = {o for n in self.model.graph.node for o in n.output}
        missing = []
        for node in self.model.graph.node:
            self.node = node
            standard = node.domain in ("", "ai.onnx")
            attrs = {a.name: self.onnx.helper.get_attribute_value(a) for a in node.attribute}
            known = [self.static.get(v) for v in node.input if v]
            if standard and node.op_type in FOLD and known and all(k is not None for k in known):
                self.static[node.output[0]] = np.asarray(FOLD[node.op_type](attrs, *known))
                continue
            fn = ONNX_OPS.get(node.op_type) if standard else None
            if fn is None:
                missing.append((node, ""))
                continue
            try:
                out = fn(self, node, attrs)
            except _Missing:
                continue
            except _Unsupported as exc:
                missing.append((node, str(exc)))
                continue
            if out is None:
                continue
            outs = out if isinstance(out, (list, tuple)) else [out]
            for name, v in zip(node.output, outs):
                if isinstance(v, np.ndarray):
                    self.static[name] = v
                elif name:
                    self.env[name] = v
        if missing:
            raise UnsupportedOpError("\n".join(
                f"Op type not supported: {n.op_type} (node '{n.name}'){': ' + why if why else ''}"
                for n, why in missing))
        for out in self.model.graph.output:
            self.g.output(self.value(out.name))
        return self.g.infer()


def from_onnx(model_or_path, input_shape=None) -> Graph:
    """An ONNX model (a ``ModelProto``, or the path of a ``.onnx`` file) as an inferred
    :class:`~npulab.graph.ir.Graph`. ``input_shape`` fixes inputs' shapes, in ATC's
    ``--input_shape`` spelling (``"input:1,3,224,224;mask:1,128"``) or as a dict; it is needed
    for a dim the model leaves symbolic. Raises UnsupportedOpError listing every node with no
    mapping (its name and op type), one line each."""
    import onnx
    from google.protobuf.message import DecodeError
    model = model_or_path
    if not isinstance(model, onnx.ModelProto):
        try:
            model = onnx.load(str(model_or_path))
        except (OSError, DecodeError) as exc:
            raise GraphError(f"from_onnx: cannot read an ONNX model from {model_or_path!r}: {exc}") from None
    shapes = parse_input_shape(input_shape) if input_shape is not None else {}
    return _Importer(model, shapes).run()


__all__ = ["ONNX_OPS", "from_onnx"]
