"""Op schemas of the graph: the type of a node's outputs from the types of its inputs (GE's
InferShape), for every op type a graph may hold.

Two kinds of op types:

* **kernel ops**, registered in :mod:`npulab.ops.registry` with a kernel (Conv2D, MatMul,
  BatchMatMul, LayerNorm, Relu, ...): their shape inference is the registry's own (ops-nn's
  op_host InferShape), called with the node's attributes, so the graph and the kernels can never
  disagree on a shape;
* **structural ops**, which move or relabel data and have no cube or vector kernel of their own
  (Identity, Reshape, Flatten, Transpose, Cast, Concat): their schemas are here. They become data
  moves or disappear when the graph is compiled;
* **graph forms** of kernel ops whose kernel takes another form: the graph's Conv2D is torch's
  (4-D, torch's padding), the registry's kernel a 3-D problem of depth 1; the graph's Add and
  Mul broadcast (the registry's Add takes equal shapes, AddBroadcast any);
* **framework-level ops** (:mod:`npulab.graph.forms`: MatMul, RealDiv, Erf, ReduceMean,
  GatherV2, Select, Slice, ...): what importers write; compiling lowers each to a kernel, the
  AI CPU, or a relabel.

:func:`infer_node` raises :class:`~npulab.errors.GraphError` naming the node for an op type no
schema knows (listing the known ones), for attributes it does not take and for inputs it cannot
take.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from ..arch import DEFAULT_CHIP
from ..chips import get_chip
from ..errors import GraphError, NpuError, UnsupportedOpError
from ..ops import registry
from ..ops.conv import conv_args, depth_one
from .types import Node, TensorType

from .table import STRUCTURAL, axis_of, one_input, structural


@structural("Identity")
def _identity(node, ins, **attrs):
    return [one_input(node, ins)]


@structural("Reshape")
def _reshape(node, ins, shape):
    """``shape``: the new shape, one dimension may be -1 (inferred), 0 copies the input's (ONNX)."""
    x = one_input(node, ins)
    dims = [x.shape[i] if d == 0 and i < len(x.shape) else d for i, d in enumerate(shape)]
    if dims.count(-1) > 1 or any(d < -1 for d in dims):
        raise GraphError(f"{node.where()}: shape {list(shape)} may hold one -1 and no other negative")
    known = int(np.prod([d for d in dims if d != -1], dtype=np.int64))
    if -1 in dims:
        if known == 0 or x.size % known:
            raise GraphError(f"{node.where()}: cannot reshape {x.size} elements {x.shape} into {list(shape)}")
        dims[dims.index(-1)] = x.size // known
    elif known != x.size:
        raise GraphError(f"{node.where()}: cannot reshape {x.size} elements {x.shape} into {list(shape)}")
    return [TensorType(tuple(dims), x.dtype)]


@structural("Flatten")
def _flatten(node, ins, axis=1):
    x = one_input(node, ins)
    a = axis_of(node, axis, len(x.shape))
    lead = int(np.prod(x.shape[:a], dtype=np.int64))
    return [TensorType((lead, x.size // lead if lead else 0), x.dtype)]


@structural("Transpose")
def _transpose(node, ins, perm):
    x = one_input(node, ins)
    if sorted(perm) != list(range(len(x.shape))):
        raise GraphError(f"{node.where()}: perm {list(perm)} is not a permutation of the {len(x.shape)} axes")
    return [TensorType(tuple(x.shape[p] for p in perm), x.dtype)]


@structural("Cast")
def _cast(node, ins, dtype):
    x = one_input(node, ins)
    return [TensorType(x.shape, dtype, x.format)]


@structural("Concat")
def _concat(node, ins, axis=0):
    if not ins or any(t is None for t in ins):
        raise GraphError(f"{node.where()}: takes one or more inputs")
    first = ins[0]
    a = axis_of(node, axis, len(first.shape))
    for t in ins[1:]:
        if t.dtype != first.dtype or len(t.shape) != len(first.shape) or \
                any(d != e for i, (d, e) in enumerate(zip(t.shape, first.shape)) if i != a):
            raise GraphError(f"{node.where()}: inputs {first} and {t} do not concatenate along axis {axis}")
    shape = list(first.shape)
    shape[a] = sum(t.shape[a] for t in ins)
    return [TensorType(tuple(shape), first.dtype)]


def depth_one_args(w_shape, stride, padding, dilation, groups, what) -> tuple:
    """The graph Conv2D's torch-style arguments as the registry's depth-1 3-D kernel takes them:
    (stride, pads, dilation, groups)."""
    stride, pads, dilation, groups = conv_args(w_shape, stride, padding, dilation, groups, 2, what)
    return (*depth_one(stride, pads, dilation), groups)


@structural("Conv2D")
def _conv2d(node, ins, stride=1, padding=0, dilation=1, groups=1, relu=False):
    """The graph's Conv2D is torch's conv2d: x (N, Cin, H, W), weight (Cout, Cin / groups, kh,
    kw), an optional bias (Cout,); stride, padding (an int, a pair, 'same' or 'valid'), dilation
    and groups as torch takes them. The kernel (the registry's Conv2D) runs it as a 3-D problem
    of depth 1; its inference checks the shapes."""
    if len(ins) < 2 or ins[0] is None or ins[1] is None or len(ins[0].shape) != 4 or len(ins[1].shape) != 4:
        raise GraphError(f"{node.where()}: takes x (N, C, H, W), weight (Cout, Cin/groups, kh, kw) and an "
                         f"optional bias, got {[str(t) for t in ins]}")
    x, w = ins[0], ins[1]
    what = f"{node.where()}"
    stride, pads, dilation, groups = depth_one_args(w.shape, stride, padding, dilation, groups, what)
    vectors = ("bias",) if len(ins) > 2 and ins[2] is not None else ()
    specs = [registry.TensorSpec(x.shape[:2] + (1,) + x.shape[2:], np.dtype(x.dtype)),
             registry.TensorSpec(w.shape[:2] + (1,) + w.shape[2:], np.dtype(w.dtype))]
    try:
        out = registry.lookup("Conv2D").infer(specs, get_chip(DEFAULT_CHIP), stride=stride, pads=pads,
                                              dilation=dilation, groups=groups, vectors=vectors,
                                              relu=bool(relu), what="conv2d", nd=2)
    except NpuError as exc:
        raise GraphError(f"{node.where()}: {exc}") from None
    return [TensorType(out.shape[:2] + out.shape[3:], str(np.dtype(out.dtype)), x.format)]


from . import forms  # noqa: E402,F401 (registers the framework-level ops: MatMul, RealDiv, ReduceMean, ...)


def known_op_types() -> list[str]:
    """Every op type a graph may hold: the registry's kernel ops and the structural ones."""
    return sorted(set(registry.op_types()) | set(STRUCTURAL))


def infer_node(node: Node, ins: list, chip=None) -> list[TensorType]:
    """The types of ``node``'s outputs from its inputs' types (None for an optional input left
    out) and its attributes; ``chip`` for kernel ops whose inference depends on it (default the
    package's default chip)."""
    fn = STRUCTURAL.get(node.op_type)
    if fn is not None:
        try:
            return fn(node, ins, **node.attrs)
        except TypeError as exc:                 # an attribute the schema does not take
            raise GraphError(f"{node.where()}: {exc}".replace(f"{fn.__name__}()", "attributes:")) from None
    try:
        op = registry.lookup(node.op_type)
    except UnsupportedOpError:
        raise GraphError(f"{node.where()}: Op type not supported: {node.op_type}. A graph may hold "
                         f"{', '.join(known_op_types())}") from None
    if op.infer is None:
        raise GraphError(f"{node.where()}: op type {node.op_type} has no shape inference")
    while ins and ins[-1] is None:           # optional inputs left out at the end
        ins = ins[:-1]
    if any(t is None for t in ins):
        raise GraphError(f"{node.where()}: an optional input left out before a given one; the "
                         f"kernel takes its inputs in order ({', '.join(op.inputs or ())})")
    specs = [registry.TensorSpec(t.shape, np.dtype(t.dtype)) for t in ins]
    attrs = {k: tuple(v) if isinstance(v, list) else v for k, v in node.attrs.items()}
    try:
        op.check_call(len(specs), attrs)
        out = op.infer(specs, get_chip(chip or DEFAULT_CHIP), **attrs)
    except NpuError as exc:
        raise GraphError(f"{node.where()}: {exc}") from None
    outs = out if isinstance(out, list) else [out]
    # an output of the first input's rank keeps its layout (an element-wise op, a norm, a pool
    # of an NC1HWC0 feature map writes NC1HWC0)
    return [TensorType(tuple(o.shape), str(np.dtype(o.dtype)), ins[0].format if len(o.shape) == len(ins[0].shape)
                       else "ND") for o in outs]


__all__ = ["STRUCTURAL", "structural", "known_op_types", "infer_node"]
