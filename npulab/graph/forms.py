"""The framework-level op set of the graph: the ops a PyTorch or ONNX model arrives with, as GE
names them (its IR op types: ``MatMul``, ``RealDiv``, ``GatherV2``, ``ReduceMean``, ``Select``,
...), each with its schema (the type of its outputs from its inputs' types and attributes).

These are the ops an importer writes; the compile step lowers each to what runs it (a registered
AI Core kernel, the AI CPU, or nothing at all for a relabel), and the reference executor
(:mod:`npulab.graph.reference`) gives each its meaning in numpy. Attribute conventions, one per
family (the importers follow them; ONNX and torch spell some differently):

* element-wise binary (``Add Sub Mul RealDiv Pow Maximum Minimum``) and comparisons (``Equal
  NotEqual Less LessEqual Greater GreaterEqual``, giving bool), ``LogicalAnd LogicalOr``:
  numpy/torch broadcasting, both operands of one dtype (an importer rounds a Python scalar to
  the tensor's dtype first, as torch does);
* element-wise unary (``Neg Exp Log Sqrt Rsqrt Reciprocal Abs Tanh Sigmoid Erf``) on floats,
  ``LogicalNot`` on bool;
* ``Select(cond, x, y)``: torch.where, broadcast;
* ``MatMul(a, b, bias?)``: torch.matmul of rank >= 2 operands, batch dims broadcast,
  ``transpose_a`` / ``transpose_b`` swap an operand's last two axes first; ``bias`` (N,) is
  added to every row (ONNX Gemm, torch's linear); ``activation`` (None, or one of
  :data:`MATMUL_ACTIVATIONS`) applied last: what MatMul+BiasAdd(+activation) fusion writes;
* ``ReduceSum ReduceMean ReduceMax``: ``axes`` (a list; empty reduces every axis) and
  ``keep_dims``;
* data: ``Squeeze`` / ``Unsqueeze`` (``axes``), ``Expand`` (``shape``, torch's expand: -1 keeps
  a dim), ``Slice`` (``starts ends axes steps``, ONNX's: ends clamp), ``Split`` (``axis``,
  ``sizes``: one output each), ``Pad`` (``pads`` as ONNX [begin_0, ..., end_0, ...],
  ``value``), ``GatherV2`` (params, indices; ``axis``), ``Cumsum`` (``axis``), ``Range``
  (no inputs: ``start limit delta dtype``), ``Fill`` (no inputs: ``shape value dtype``),
  ``TransData`` (``dst_format``: the same values stored in another format; a data move on
  the chip, the values unchanged).
"""
from __future__ import annotations

import numpy as np

from ..errors import GraphError
from .table import axis_of, one_input, structural
from .types import FORMATS, TensorType

FLOATS = ("float16", "float32", "bfloat16")
BINARY = ("Add", "Sub", "Mul", "RealDiv", "Pow", "Maximum", "Minimum")
COMPARE = ("Equal", "NotEqual", "Less", "LessEqual", "Greater", "GreaterEqual")
LOGICAL = ("LogicalAnd", "LogicalOr")
UNARY = ("Neg", "Exp", "Log", "Sqrt", "Rsqrt", "Reciprocal", "Abs", "Tanh", "Sigmoid", "Erf")
REDUCE = ("ReduceSum", "ReduceMean", "ReduceMax")
#: the activations a MatMul node may end with (ops-nn FusedMatMul's fusedOpType names)
MATMUL_ACTIVATIONS = ("relu", "gelu_erf", "gelu_tanh")


def _broadcast(node, a: TensorType, b: TensorType) -> tuple:
    try:
        return tuple(np.broadcast_shapes(a.shape, b.shape))
    except ValueError:
        raise GraphError(f"{node.where()}: shapes {a.shape} and {b.shape} do not broadcast (numpy/torch "
                         f"rules: aligned from the last dim, each pair equal or one of them 1)") from None


def _same_dtype(node, *ts) -> str:
    dts = {t.dtype for t in ts}
    if len(dts) != 1:
        raise GraphError(f"{node.where()}: operands have dtypes {', '.join(t.dtype for t in ts)}; "
                         f"they must be one dtype (insert a Cast)")
    return dts.pop()


def _keep_format(x: TensorType, shape: tuple) -> str:
    return x.format if shape == x.shape else "ND"


def _binary_form(op_type, out_dtype=None, need=None):
    @structural(op_type)
    def infer(node, ins):
        if len(ins) != 2 or None in ins:
            raise GraphError(f"{node.where()}: takes 2 inputs, got {len(ins)}")
        dtype = _same_dtype(node, *ins)
        if need is not None and dtype not in need:
            raise GraphError(f"{node.where()}: takes {' or '.join(need)} operands, got {dtype}")
        shape = _broadcast(node, *ins)
        return [TensorType(shape, out_dtype or dtype, _keep_format(ins[0], shape))]
    return infer


def _unary_form(op_type, need):
    @structural(op_type)
    def infer(node, ins):
        x = one_input(node, ins)
        if x.dtype not in need:
            raise GraphError(f"{node.where()}: takes {' or '.join(need)}, got {x.dtype}")
        return [x]
    return infer


for _t in BINARY:
    _binary_form(_t)
for _t in COMPARE:
    _binary_form(_t, out_dtype="bool")
for _t in LOGICAL:
    _binary_form(_t, out_dtype="bool", need=("bool",))
for _t in UNARY:
    _unary_form(_t, FLOATS)
_unary_form("LogicalNot", ("bool",))


@structural("Select")
def _select(node, ins):
    if len(ins) != 3 or None in ins:
        raise GraphError(f"{node.where()}: takes cond, x and y, got {len(ins)} inputs")
    cond, x, y = ins
    if cond.dtype != "bool":
        raise GraphError(f"{node.where()}: cond must be bool, got {cond.dtype}")
    dtype = _same_dtype(node, x, y)
    shape = _broadcast(node, TensorType(_broadcast(node, cond, x), dtype), y)
    return [TensorType(shape, dtype)]


@structural("MatMul")
def _matmul(node, ins, transpose_a=False, transpose_b=False, activation=None):
    if len(ins) not in (2, 3) or ins[0] is None or ins[1] is None:
        raise GraphError(f"{node.where()}: takes a, b and an optional bias")
    a, b = ins[0], ins[1]
    if len(a.shape) < 2 or len(b.shape) < 2:
        raise GraphError(f"{node.where()}: operands must have rank >= 2, got {a} and {b} (an importer "
                         f"unsqueezes a vector first)")
    dtype = _same_dtype(node, a, b)
    if activation is not None and activation not in MATMUL_ACTIVATIONS:
        raise GraphError(f"{node.where()}: activation {activation!r} is not one of {', '.join(MATMUL_ACTIVATIONS)}")
    m, ka = a.shape[-2:][::-1] if transpose_a else a.shape[-2:]
    kb, n = b.shape[-2:][::-1] if transpose_b else b.shape[-2:]
    if ka != kb:
        raise GraphError(f"{node.where()}: inner dimensions differ: a {a} gives K={ka}, b {b} gives K={kb}"
                         f"{' (after transpose)' if transpose_a or transpose_b else ''}")
    try:
        batch = tuple(np.broadcast_shapes(a.shape[:-2], b.shape[:-2]))
    except ValueError:
        raise GraphError(f"{node.where()}: batch dims {a.shape[:-2]} and {b.shape[:-2]} do not broadcast") from None
    if len(ins) == 3 and ins[2] is not None:
        bias = ins[2]
        if bias.shape != (n,):
            raise GraphError(f"{node.where()}: bias must be ({n},), got {bias}")
    return [TensorType(batch + (m, n), dtype)]


def _reduce_form(op_type):
    @structural(op_type)
    def infer(node, ins, axes=(), keep_dims=False):
        x = one_input(node, ins)
        rank = len(x.shape)
        red = sorted({axis_of(node, a, rank, "axes") for a in axes}) if axes else list(range(rank))
        shape = tuple(1 if i in red else d for i, d in enumerate(x.shape)) if keep_dims else \
            tuple(d for i, d in enumerate(x.shape) if i not in red)
        return [TensorType(shape, x.dtype)]
    return infer


for _t in REDUCE:
    _reduce_form(_t)


@structural("Squeeze")
def _squeeze(node, ins, axes=()):
    x = one_input(node, ins)
    rank = len(x.shape)
    drop = {axis_of(node, a, rank, "axes") for a in axes} if axes else {i for i, d in enumerate(x.shape) if d == 1}
    bad = [a for a in drop if x.shape[a] != 1]
    if bad:
        raise GraphError(f"{node.where()}: axis {bad[0]} of {x} is {x.shape[bad[0]]}, not 1: it cannot be squeezed")
    return [TensorType(tuple(d for i, d in enumerate(x.shape) if i not in drop), x.dtype)]


@structural("Unsqueeze")
def _unsqueeze(node, ins, axes=()):
    x = one_input(node, ins)
    rank = len(x.shape) + len(axes)
    put = sorted(axis_of(node, a, rank, "axes") for a in axes)
    dims = list(x.shape)
    for a in put:
        dims.insert(a, 1)
    return [TensorType(tuple(dims), x.dtype)]


@structural("Expand")
def _expand(node, ins, shape=()):
    x = one_input(node, ins)
    if len(shape) < len(x.shape):
        raise GraphError(f"{node.where()}: shape {list(shape)} has fewer dims than the input {x}")
    lead = len(shape) - len(x.shape)
    dims = []
    for i, d in enumerate(shape):
        src = x.shape[i - lead] if i >= lead else 1
        d = src if d == -1 else d
        if src not in (1, d):
            raise GraphError(f"{node.where()}: cannot expand {x} to {list(shape)}: dim {i} is {src}, not 1 or {d}")
        dims.append(d)
    return [TensorType(tuple(dims), x.dtype)]


def slice_range(n: int, start: int, end: int, step: int) -> range:
    """The indices ONNX's Slice takes along an axis of length n (negative counts from the end,
    out-of-range values clamp)."""
    return range(n)[slice(start, end, step)]


@structural("Slice")
def _slice(node, ins, starts=(), ends=(), axes=None, steps=None):
    x = one_input(node, ins)
    rank = len(x.shape)
    axes = list(axes) if axes is not None else list(range(len(starts)))
    steps = list(steps) if steps is not None else [1] * len(starts)
    if not len(starts) == len(ends) == len(axes) == len(steps):
        raise GraphError(f"{node.where()}: starts, ends, axes and steps must have one entry per sliced axis")
    dims = list(x.shape)
    for s, e, a, st in zip(starts, ends, axes, steps):
        if st == 0:
            raise GraphError(f"{node.where()}: a step of 0")
        a = axis_of(node, a, rank, "axes")
        dims[a] = len(slice_range(x.shape[a], s, e, st))
    return [TensorType(tuple(dims), x.dtype)]


@structural("Split")
def _split(node, ins, axis=0, sizes=()):
    x = one_input(node, ins)
    a = axis_of(node, axis, len(x.shape))
    if sum(sizes) != x.shape[a] or any(s < 0 for s in sizes):
        raise GraphError(f"{node.where()}: sizes {list(sizes)} do not add up to axis {axis}'s {x.shape[a]}")
    return [TensorType(x.shape[:a] + (s,) + x.shape[a + 1:], x.dtype) for s in sizes]


@structural("Pad")
def _pad(node, ins, pads=(), value=0.0):
    x = one_input(node, ins)
    rank = len(x.shape)
    if len(pads) != 2 * rank or any(p < 0 for p in pads):
        raise GraphError(f"{node.where()}: pads must be {2 * rank} numbers >= 0 ([begin per axis, then end "
                         f"per axis], ONNX's order), got {list(pads)}")
    return [TensorType(tuple(d + pads[i] + pads[i + rank] for i, d in enumerate(x.shape)), x.dtype)]


@structural("GatherV2")
def _gather(node, ins, axis=0):
    if len(ins) != 2 or None in ins:
        raise GraphError(f"{node.where()}: takes params and indices")
    params, idx = ins
    if idx.dtype not in ("int32", "int64"):
        raise GraphError(f"{node.where()}: indices must be int32 or int64, got {idx.dtype}")
    a = axis_of(node, axis, len(params.shape))
    return [TensorType(params.shape[:a] + idx.shape + params.shape[a + 1:], params.dtype)]


@structural("Cumsum")
def _cumsum(node, ins, axis=0):
    x = one_input(node, ins)
    axis_of(node, axis, len(x.shape))
    return [x]


@structural("Range")
def _range(node, ins, start=0, limit=0, delta=1, dtype="int64"):
    if ins:
        raise GraphError(f"{node.where()}: takes no inputs (start, limit and delta are attributes)")
    if delta == 0:
        raise GraphError(f"{node.where()}: delta 0")
    return [TensorType((len(np.arange(start, limit, delta)),), dtype)]


@structural("Fill")
def _fill(node, ins, shape=(), value=0.0, dtype="float32"):
    if ins:
        raise GraphError(f"{node.where()}: takes no inputs (shape and value are attributes)")
    return [TensorType(tuple(shape), dtype)]


@structural("TransData")
def _transdata(node, ins, dst_format="ND"):
    x = one_input(node, ins)
    if dst_format not in FORMATS:
        raise GraphError(f"{node.where()}: dst_format {dst_format!r} is not one of {', '.join(FORMATS)}")
    return [TensorType(x.shape, x.dtype, dst_format)]


__all__ = ["BINARY", "COMPARE", "LOGICAL", "UNARY", "REDUCE", "FLOATS", "MATMUL_ACTIVATIONS", "slice_range"]
