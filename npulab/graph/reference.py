"""The reference executor: what a graph means, in numpy, one op at a time.

Every op type a graph may hold has a reference here: the kernel ops through their numpy goldens
(:mod:`npulab.ops.golden`, the values the kernels approximate), the framework-level and
structural ops as a line or two of numpy. Each computes in float64 (integers and bools exactly)
and rounds once to the dtype its schema gives the output, so a float16 graph's reference is the
exact value rounded to float16 at every node, as an fp16 kernel's output is.

It is the oracle of everything above it: an importer is right when the reference of the graph
it writes gives what PyTorch (or onnx's own reference) gives on the model; a fusion pass is
right when the reference of the graph after it gives what the graph before it gave; a compiled
model run functionally on the simulator is compared with it within the tolerance table's
bounds.

    outs = reference.run(graph, {"x": x})          # {output name: array}
    values = reference.run(graph, feeds, keep=True)  # every value, for a precision compare
"""
from __future__ import annotations

import math
from typing import Callable

import numpy as np

from ..errors import GraphError, NpuError
from ..ops import golden
from .forms import slice_range
from .ir import Graph
from .types import Node

#: op type -> (node, input arrays (None for an optional one left out)) -> list of outputs
REFERENCES: dict[str, Callable] = {}

_ERF = np.vectorize(math.erf, otypes=[np.float64])


def reference(*op_types: str):
    def deco(fn):
        for t in op_types:
            REFERENCES[t] = fn
        return fn
    return deco


def _f(a):
    """float64 for floats (and bfloat16 stored as float32), exact ints and bools as they are."""
    a = np.asarray(a)
    return a.astype(np.float64) if a.dtype.kind == "f" else a


# -- element-wise ---------------------------------------------------------------------------
_BINARY = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "RealDiv": np.divide, "Pow": np.power,
           "Maximum": np.maximum, "Minimum": np.minimum, "Equal": np.equal, "NotEqual": np.not_equal,
           "Less": np.less, "LessEqual": np.less_equal, "Greater": np.greater,
           "GreaterEqual": np.greater_equal, "LogicalAnd": np.logical_and, "LogicalOr": np.logical_or,
           "AddBroadcast": np.add}
_UNARY = {"Neg": np.negative, "Exp": np.exp, "Log": np.log, "Sqrt": np.sqrt, "Rsqrt": lambda x: 1 / np.sqrt(x),
          "Reciprocal": lambda x: 1 / x, "Abs": np.abs, "Tanh": np.tanh, "Erf": _ERF,
          "Sigmoid": lambda x: 0.5 * (1 + np.tanh(0.5 * x)),     # = 1 / (1 + exp(-x)), no overflow
          "LogicalNot": np.logical_not}

for _t, _fn in _BINARY.items():
    REFERENCES[_t] = (lambda fn: lambda node, ins: [fn(_f(ins[0]), _f(ins[1]))])(_fn)
for _t, _fn in _UNARY.items():
    REFERENCES[_t] = (lambda fn: lambda node, ins: [fn(_f(ins[0]))])(_fn)


@reference("Relu")
def _relu(node, ins):
    return [golden.relu(ins[0])]


@reference("AddRelu")
def _add_relu(node, ins):
    return [golden.add_relu(ins[0], ins[1])]


@reference("Swish", "SiLU")
def _silu(node, ins):
    return [golden.silu(ins[0])]


@reference("Gelu")
def _gelu(node, ins):
    return [golden.gelu(ins[0], node.attrs.get("approximate", "none"))]


@reference("SoftmaxV2")
def _softmax(node, ins):
    return [golden.softmax(ins[0], node.attrs.get("dim", -1))]


@reference("Pows")
def _pows(node, ins):
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        return [np.power(_f(ins[0]), float(node.attrs["exponent"]))]     # a negative base, e not whole: NaN


@reference("Select")
def _select(node, ins):
    return [np.where(ins[0], _f(ins[1]), _f(ins[2]))]


@reference("Identity", "TransData")
def _identity(node, ins):
    return [ins[0]]


@reference("Cast")
def _cast(node, ins):
    return [np.asarray(ins[0])]       # run() rounds to the output dtype


# -- matmul, conv, norms, pools (the goldens) --------------------------------------------------
@reference("MatMul")
def _matmul(node, ins):
    a, b = _f(ins[0]), _f(ins[1])
    if node.attrs.get("transpose_a"):
        a = np.swapaxes(a, -1, -2)
    if node.attrs.get("transpose_b"):
        b = np.swapaxes(b, -1, -2)
    y = np.matmul(a, b)
    if len(ins) > 2 and ins[2] is not None:
        y = y + _f(ins[2])
    act = node.attrs.get("activation")
    if act == "relu":
        y = np.maximum(y, 0)
    elif act in ("gelu_erf", "gelu_tanh"):
        y = golden.gelu(y, "none" if act == "gelu_erf" else "tanh")
    return [y]


@reference("BatchMatMul")
def _bmm(node, ins):
    a = node.attrs
    return [golden.batch_matmul(ins[0], ins[1], bias=ins[2] if len(ins) > 2 else None,
                                trans_a=a.get("trans_a", False), trans_b=a.get("trans_b", False),
                                relu=a.get("relu", False))]


@reference("FusedMatMul")
def _fused(node, ins):
    return [golden.fused_matmul(ins[0], ins[1], bias=ins[2] if len(ins) > 2 else None,
                                fused_op_type=node.attrs.get("fused_op_type", "gelu_erf"))]


@reference("Conv2D")
def _conv2d(node, ins):
    a = node.attrs
    y = golden.conv2d(ins[0], ins[1], ins[2] if len(ins) > 2 else None, a.get("stride", 1),
                      a.get("padding", 0), a.get("dilation", 1), a.get("groups", 1))
    return [np.maximum(y, 0) if a.get("relu") else y]


def _padded(x, pads):
    """x with the kernel-form ``pads`` (a (before, after) pair per spatial axis) applied."""
    x = _f(x)
    return np.pad(x, [(0, 0), (0, 0)] + [tuple(p) for p in pads])


@reference("Conv3D")
def _conv3d(node, ins):
    """The registry's form: x (N, C, D, H, W), ``pads`` a (before, after) pair per axis."""
    a = node.attrs
    y = golden.conv3d(_padded(ins[0], a["pads"]), ins[1], ins[2] if len(ins) > 2 else None, a["stride"], 0,
                      a["dilation"], a["groups"])
    return [np.maximum(y, 0) if a.get("relu") else y]


@reference("Conv2DBNRelu")
def _conv_bn_relu(node, ins):
    """The registry's form (depth 1 as the third axis): conv, BatchNorm with ins[3:7], ReLU."""
    a = node.attrs
    x, w = _padded(ins[0], a["pads"])[:, :, 0], _f(ins[1])[:, :, 0]
    bias = ins[2] if a.get("has_bias") else None
    mean, var, gamma, beta = ins[3:7] if a.get("has_bias") else ins[2:6]
    y = golden.conv2d_bn_relu(x, w, bias, mean, var, gamma, beta, a["eps"], a["stride"][1:], 0,
                              a["dilation"][1:], a["groups"], relu=a.get("relu", True))
    return [y[:, :, None]]


@reference("Conv2DTranspose")
def _tconv(node, ins):
    a = node.attrs
    return [golden.conv_transpose2d(ins[0], ins[1], ins[2] if len(ins) > 2 else None, a["stride"], a["padding"],
                                    a["output_padding"], a["groups"], a.get("dilation", 1))]


@reference("LayerNorm")
def _layer_norm(node, ins):
    a = node.attrs
    w, b = _optional(node, ins, 1, "has_weight"), _optional(node, ins, 2, "has_bias")
    return [golden.layer_norm(ins[0], a.get("normalized_shape", ()), w, b, a.get("eps", 1e-5))]


@reference("RMSNorm")
def _rms_norm(node, ins):
    return [golden.rms_norm(ins[0], node.attrs.get("normalized_shape", ()),
                            _optional(node, ins, 1, "has_weight"), node.attrs.get("eps"))]


@reference("BatchNorm")
def _batch_norm(node, ins):
    return [golden.batch_norm(ins[0], ins[1], ins[2], _optional(node, ins, 3, "has_weight"),
                              _optional(node, ins, 4, "has_bias"), eps=node.attrs.get("eps", 1e-5))]


def _optional(node, ins, i, flag):
    if len(ins) > i and ins[i] is not None and node.attrs.get(flag, True):
        return ins[i]
    return None


def _pool_args(a):
    return dict(kernel_size=a["kernel_size"], stride=a.get("stride"), padding=a.get("padding", 0),
                ceil_mode=a.get("ceil_mode", False))


@reference("MaxPool")
def _max_pool(node, ins):
    a = node.attrs
    return [golden.max_pool2d(ins[0], dilation=a.get("dilation", 1), **_pool_args(a))]


@reference("AvgPoolScale")
def _avg_pool_scale(node, ins):
    a = node.attrs
    return [golden.avg_pool2d_scale(ins[0], a["kernel_size"], a["scale"], a.get("stride"), a.get("padding", 0),
                                    a.get("ceil_mode", False), a.get("count_include_pad", True))]


@reference("AvgPool")
def _avg_pool(node, ins):
    a = node.attrs
    return [golden.avg_pool2d(ins[0], count_include_pad=a.get("count_include_pad", True), **_pool_args(a))]


# -- reductions and data ------------------------------------------------------------------------
_REDUCE = {"ReduceSum": np.sum, "ReduceMean": np.mean, "ReduceMax": np.max}
for _t, _fn in _REDUCE.items():
    REFERENCES[_t] = (lambda fn: lambda node, ins: [fn(_f(ins[0]), axis=tuple(node.attrs.get("axes", ())) or None,
                                                      keepdims=node.attrs.get("keep_dims", False))])(_fn)


@reference("Reshape", "Flatten", "Squeeze", "Unsqueeze")
def _reshape(node, ins):
    return [np.asarray(ins[0])]        # run() gives it the output's shape


@reference("Transpose")
def _transpose(node, ins):
    return [np.transpose(ins[0], node.attrs["perm"])]


@reference("Concat")
def _concat(node, ins):
    return [np.concatenate([_f(x) for x in ins], axis=node.attrs.get("axis", 0))]


@reference("Expand")
def _expand(node, ins):
    shape = node.attrs["shape"]
    x = np.asarray(ins[0])
    lead = len(shape) - x.ndim
    dims = [x.shape[i - lead] if d == -1 else d for i, d in enumerate(shape)]
    return [np.broadcast_to(x, dims)]


@reference("Slice")
def _slice(node, ins):
    x = np.asarray(ins[0])
    a = node.attrs
    starts = a["starts"]
    axes = a.get("axes") or list(range(len(starts)))
    steps = a.get("steps") or [1] * len(starts)
    index = [slice(None)] * x.ndim
    for s, e, ax, st in zip(starts, a["ends"], axes, steps):
        ax %= x.ndim
        r = slice_range(x.shape[ax], s, e, st)
        index[ax] = slice(r.start, r.stop if r.stop >= 0 else None, r.step)
    return [x[tuple(index)]]


@reference("Split")
def _split(node, ins):
    a = node.attrs
    cuts = np.cumsum(a["sizes"])[:-1]
    return list(np.split(np.asarray(ins[0]), cuts, axis=a.get("axis", 0)))


@reference("Pad")
def _pad(node, ins):
    x = np.asarray(ins[0])
    pads = node.attrs["pads"]
    r = x.ndim
    return [np.pad(_f(x), [(pads[i], pads[i + r]) for i in range(r)], constant_values=node.attrs.get("value", 0.0))]


@reference("GatherV2")
def _gather(node, ins):
    params, idx = np.asarray(ins[0]), np.asarray(ins[1])
    axis = node.attrs.get("axis", 0) % params.ndim
    n = params.shape[axis]
    if idx.size and (idx.min() < -n or idx.max() >= n):
        raise GraphError(f"{node.where()}: an index is outside [-{n}, {n}) along axis {axis}")
    return [np.take(params, idx, axis=axis)]


@reference("Cumsum")
def _cumsum(node, ins):
    return [np.cumsum(_f(ins[0]), axis=node.attrs.get("axis", 0))]


@reference("Range")
def _range(node, ins):
    a = node.attrs
    return [np.arange(a.get("start", 0), a["limit"], a.get("delta", 1))]


@reference("Fill")
def _fill(node, ins):
    return [np.full(tuple(node.attrs["shape"]), node.attrs.get("value", 0.0))]


def _rounded(value, t) -> np.ndarray:
    """``value`` as the output type ``t`` says: its dtype (one rounding) and its shape."""
    dtype = np.float32 if t.dtype == "bfloat16" else np.dtype(t.dtype)
    with np.errstate(over="ignore", invalid="ignore"):
        out = np.asarray(value)
        if out.dtype != dtype:
            out = out.astype(dtype)
    if t.dtype == "bfloat16":           # round to nearest even on the upper 16 bits
        bits = out.view(np.uint32).astype(np.uint64)
        bits = ((bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000).astype(np.uint32)
        out = bits.view(np.float32)
    out = out.reshape(t.shape)
    return out if out.flags.c_contiguous else out.copy()   # (np.ascontiguousarray makes 0-d 1-d)


def run_node(node: Node, ins: list, out_types: list) -> list:
    """The outputs of one node from its input arrays, rounded to its output types."""
    fn = REFERENCES.get(node.op_type)
    if fn is None:
        raise GraphError(f"{node.where()}: no reference for op type {node.op_type}; the reference "
                         f"executor has {', '.join(sorted(REFERENCES))}")
    try:
        outs = fn(node, ins)
    except NpuError as exc:
        raise GraphError(f"{node.where()}: {exc}") from None
    return [_rounded(v, t) for v, t in zip(outs, out_types)]


def run(graph: Graph, feeds: dict, keep: bool = False) -> dict:
    """Run ``graph`` on ``feeds`` ({input name: array}); returns {output name: array}, or every
    value's array with ``keep``. A missing or misshapen feed raises GraphError naming it."""
    missing = [v for v in graph.inputs if v not in feeds]
    if missing:
        raise GraphError(f"graph '{graph.name}': no value fed for input{'s' * (len(missing) > 1)} "
                         f"{', '.join(missing)}")
    values = {}
    for name in graph.inputs:
        t = graph.type_of(name)
        a = np.asarray(feeds[name])
        if tuple(a.shape) != t.shape:
            raise GraphError(f"graph '{graph.name}': input '{name}' is {t}, fed shape {a.shape}")
        values[name] = _rounded(a, t)
    values.update(graph.constants)
    last_use = {}
    for i, node in enumerate(graph.nodes):
        for v in node.inputs:
            last_use[v] = i
    outputs = set(graph.outputs)
    for i, node in enumerate(graph.nodes):
        ins = [values[v] if v else None for v in node.inputs]
        while ins and ins[-1] is None:
            ins.pop()
        outs = run_node(node, ins, [graph.type_of(v) for v in node.outputs])
        values.update(zip(node.outputs, outs))
        if not keep:                   # free what no later node reads
            for v in node.inputs:
                if v and last_use.get(v) == i and v not in outputs and v not in graph.constants:
                    values.pop(v, None)
    return values if keep else {v: values[v] for v in graph.outputs}


__all__ = ["REFERENCES", "reference", "run", "run_node"]
