"""From PyTorch: a module, exported with ``torch.export``, as a graph of the IR.

The walk, step by step:

1. ``torch.export.export(module.eval(), example_inputs)``: the module traced to one FX graph of
   ATen ops, with every parameter and buffer lifted to an input (its ``state_dict`` name in the
   graph signature);
2. ``run_decompositions``: the many composite ops (``flatten``, ``dropout``, ``reshape``,
   in-place ``relu_``) reduced to the core ATen set, except ``linear`` and ``matmul``, which
   stay whole so that a linear layer is one MatMul with its bias (what ONNX's Gemm and the
   zoo write) rather than a transpose, a view and an ``addmm``; conv, inference batch norm,
   layer norm, softmax and GELU are core ops and stay whole anyway;
3. each ATen op becomes graph ops through its mapping in :data:`ATEN` (one to a few nodes;
   the mappings are in :mod:`~.torch_ops`),
   each parameter or buffer a constant named by its ``state_dict`` key, created when a node
   first reads it (so an unused buffer, BatchNorm's ``num_batches_tracked``, is left out);
4. a Python scalar operand becomes a 0-d constant of the tensor's dtype (rounded to it, as the
   graph's element-wise ops take one dtype); operands of another dtype than the result get a
   Cast, as torch's type promotion does; shapes come from the example values torch.export
   records (``meta["val"]``), so a view is a Reshape to its known shape;
5. a keep-dims mean whose one user only drops the reduced axes (``adaptive_avg_pool2d`` then
   ``flatten``) becomes one ReduceMean without keep-dims, as the zoo's ResNet-50 writes it.

A node is named by the module that ran it (``nn_module_stack``): ``layer1.0.conv1``, then
``layer1.0.relu/relu_1`` for the second op of that module, so errors and profiles read as the
torch model. ATen ops without a mapping are all collected, and reported together in one
:class:`~npulab.errors.UnsupportedOpError`, one line each::

    Op type not supported: aten.sort.default (node 'sort', module 'sorter' (Sorter))
"""
from __future__ import annotations

import operator

import numpy as np

from ...errors import GraphError, UnsupportedOpError
from ..ir import Graph
from ..types import NAME
from .torch_ops import ATEN, IGNORED, _dtype, _op_name, _Unsupported


#: composite ops the decomposition leaves whole: a linear layer stays one MatMul with its bias,
#: a batched matmul one MatMul (not views, an expand and a bmm)
KEPT_WHOLE = ("linear", "matmul")


class _Importer:
    """The state of one import: the graph being built, the graph value of each FX node, the
    exported program's constants (created on first use)."""

    def __init__(self, ep, name: str):
        self.ep, self.g = ep, Graph(name)
        self.env: dict = {}               # fx node name -> graph value name (or a tuple of them)
        self.lifted: dict = {}            # fx placeholder name -> state_dict name
        self.names: set = set()
        self.node = None                  # the fx node being mapped
        self.skip: set = set()            # fx nodes a mapping has already taken care of
        sig = ep.graph_signature
        for spec in sig.input_specs:
            if spec.kind.name in ("PARAMETER", "BUFFER", "CONSTANT_TENSOR"):
                self.lifted[spec.arg.name] = spec.target
        self.arrays = {**ep.state_dict, **(ep.constants or {})}     # state_dict name -> tensor

    # -- values --------------------------------------------------------------------------------
    def val(self, fx):
        """The example value (a FakeTensor) an FX node computes."""
        return fx.meta["val"]

    def value(self, arg) -> str:
        """The graph value of an FX node argument (a constant made on first use)."""
        name = arg.name
        if name in self.env:
            return self.env[name]
        if name in self.lifted:
            key = self.lifted[name]
            array = self.arrays[key].detach().cpu().numpy()
            self.env[name] = self.g.constant(key, array)
            return self.env[name]
        raise _Missing(name)

    def scalar(self, value, dtype: str) -> str:
        """A 0-d constant holding a Python number rounded to ``dtype``."""
        base = f"{self.base_name()}/scalar"
        name, i = base, 1
        while self.g.defined(name):
            name, i = f"{base}_{i}", i + 1
        np_dtype = np.float32 if dtype == "bfloat16" else np.dtype(dtype)
        return self.g.constant(name, np.asarray(value, dtype=np_dtype))

    def operand(self, arg, dtype: str) -> str:
        """An element-wise operand as a graph value of ``dtype``: a tensor (cast if it is of another
        dtype) or a Python number (a constant)."""
        if not hasattr(arg, "name"):
            return self.scalar(arg, dtype)
        v = self.value(arg)
        if _dtype(self.val(arg).dtype) != dtype:
            v = self.emit("Cast", [v], dtype=dtype)
        return v

    # -- nodes ---------------------------------------------------------------------------------
    def module_path(self, fx=None) -> tuple[str, str]:
        """The (path, class name) of the module that ran an FX node ("" for the root)."""
        stack = (fx or self.node).meta.get("nn_module_stack") or {}
        if not stack:
            return "", ""
        path, cls = list(stack.values())[-1]
        return path, str(getattr(cls, "__name__", cls)).rsplit(".", 1)[-1]

    def base_name(self) -> str:
        path, _ = self.module_path()
        return path or self.node.name

    def _taken(self, name: str) -> bool:
        return name in self.names or self.g.defined(name)

    def _unique(self) -> str:
        """A node's name: its module's path for the module's first node, then ``path/fx name``
        (with a count if need be); the fx name at the top level."""
        path, _ = self.module_path()
        base = path if path and not self._taken(_valid(path)) else "/".join(filter(None, [path, self.node.name]))
        base = _valid(base)
        name, i = base, 1
        while self._taken(name):
            name, i = f"{base}_{i}", i + 1
        self.names.add(name)
        return name

    def emit(self, op_type: str, inputs, outputs=1, **attrs):
        """Append a node named by the current module; returns its output value(s)."""
        return self.g.node(op_type, inputs, name=self._unique(), outputs=outputs, **attrs)

    # -- the walk ------------------------------------------------------------------------------
    def run(self, input_names):
        placeholders = [n for n in self.ep.graph.nodes if n.op == "placeholder"]
        users = [n for n in placeholders if n.name not in self.lifted]
        if input_names is not None and len(input_names) != len(users):
            raise GraphError(f"from_torch: input_names has {len(input_names)} names, the module takes "
                             f"{len(users)} tensor inputs ({', '.join(n.name for n in users)})")
        for i, n in enumerate(users):
            t = self.val(n)
            self.env[n.name] = self.g.input(input_names[i] if input_names else n.name, tuple(t.shape),
                                            _dtype(t.dtype))
        missing = []
        for fx in self.ep.graph.nodes:
            if fx.op != "call_function" or fx.name in self.skip:
                continue
            self.node = fx
            key = _op_name(fx.target)
            if key in IGNORED:
                continue
            fn = ATEN.get(key) if fx.target is not operator.getitem else _getitem
            if fn is None:
                missing.append(fx)
                continue
            try:
                out = fn(self, fx)
            except _Missing:
                continue                     # reads an unsupported op's value: already reported
            except _Unsupported as exc:
                missing.append((fx, str(exc)))
                continue
            if out is not None:
                self.env[fx.name] = out
        if missing:
            raise UnsupportedOpError("\n".join(self._report(m) for m in missing))
        out_node = next(n for n in self.ep.graph.nodes if n.op == "output")
        for arg in _flat(out_node.args[0]):
            if hasattr(arg, "name"):
                self.g.output(self.value(arg))
        return self.g.infer()

    def _report(self, m) -> str:
        fx, why = (m, "") if not isinstance(m, tuple) else m
        path, cls = self.module_path(fx)
        where = f"module '{path}' ({cls})" if path else "the top-level module"
        return f"Op type not supported: {fx.target} (node '{fx.name}', {where}){': ' + why if why else ''}"


class _Missing(Exception):
    """A value that an unsupported op would have made."""


def _getitem(im, fx):
    src, i = fx.args
    outs = im.env.get(src.name)
    if outs is None:
        raise _Missing(src.name)
    if not isinstance(outs, (list, tuple)):
        raise _Unsupported(f"item {i} of '{src.name}', which has one output")
    if outs[i] is None:
        raise _Unsupported(f"output {i} of '{src.name}' ({src.target}) has no graph form "
                           f"(only its first output is mapped)")
    return outs[i]


def _valid(name: str) -> str:
    """A module path as a graph name (one starting with a digit, a Sequential's child, gets a _)."""
    return name if NAME.match(name) else "_" + name


def _flat(x):
    if isinstance(x, (list, tuple)):
        for v in x:
            yield from _flat(v)
    else:
        yield x


def from_torch(module, example_inputs, *, input_names=None, name: str | None = None) -> Graph:
    """``module`` (a ``torch.nn.Module``, put in eval mode) exported with ``torch.export`` on
    ``example_inputs`` (a tuple of tensors, or a dict of keyword inputs) as an inferred
    :class:`~npulab.graph.ir.Graph`: one input per tensor input (named by ``input_names`` or
    torch's argument names), its parameters and buffers constants with their ``state_dict``
    names, one output per tensor the module returns (flattened in order). Raises
    UnsupportedOpError listing every ATen op with no mapping, one line each."""
    import torch
    if not isinstance(module, torch.nn.Module):
        raise GraphError(f"from_torch: expected a torch.nn.Module, got {type(module).__name__}")
    module.eval()
    if isinstance(example_inputs, torch.Tensor):
        example_inputs = (example_inputs,)
    args, kwargs = ((), dict(example_inputs)) if isinstance(example_inputs, dict) else (tuple(example_inputs), {})
    with torch.no_grad():
        try:
            ep = torch.export.export(module, args, kwargs)
        except Exception as exc:          # torch raises many kinds; each means "could not trace"
            raise GraphError(f"from_torch: torch.export could not trace {type(module).__name__} on the example "
                             f"inputs ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}); "
                             f"the module must run on them and be traceable by torch.export") from exc
    return from_exported(ep, input_names=input_names, name=name or type(module).__name__.lower())


def from_exported(ep, *, input_names=None, name: str = "model") -> Graph:
    """A ``torch.export.ExportedProgram`` (what ``torch.export.export`` returns and
    ``torch.export.load`` reads from a ``.pt2`` file) as an inferred graph, as :func:`from_torch`
    makes it."""
    import torch
    if not isinstance(ep, torch.export.ExportedProgram):
        raise GraphError(f"from_exported: expected a torch.export.ExportedProgram, got {type(ep).__name__}")
    with torch.no_grad():
        table = torch.export.default_decompositions()
        for op in KEPT_WHOLE:
            table.pop(getattr(torch.ops.aten, op).default, None)
        ep = ep.run_decompositions(table)
    return _Importer(ep, name).run(input_names)


__all__ = ["ATEN", "KEPT_WHOLE", "from_exported", "from_torch"]
