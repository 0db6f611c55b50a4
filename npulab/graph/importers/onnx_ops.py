"""The ONNX mappings of :mod:`npulab.graph.importers.onnx`: one function per ONNX op type (or a
family of them), ``mapping(importer, node, attributes)``, registered in :data:`ONNX_OPS` by
``@onnx_op(...)``. Each emits the graph ops the node becomes through the importer and returns
its output value (or a list of them); a form of an op the graph does not take raises
``_Unsupported``, reported with the other unsupported ops.
"""
from __future__ import annotations

import numpy as np

#: ONNX op type -> mapping(importer, node, attributes)
ONNX_OPS: dict = {}


class _Unsupported(Exception):
    """A form of a mapped op the graph does not take (asymmetric pads, a dynamic shape input)."""


def onnx_op(*names):
    def deco(fn):
        for n in names:
            ONNX_OPS[n] = fn
        return fn
    return deco


def _ints(v):
    return [int(x) for x in v]


def _pads2(pads, what):
    """ONNX's [begin_h, begin_w, end_h, end_w] as torch's symmetric (h, w) padding."""
    pads = _ints(pads or [0, 0, 0, 0])
    if pads[:2] != pads[2:]:
        raise _Unsupported(f"asymmetric {what} pads {pads}")
    return pads[:2]


def _no_auto_pad(attrs):
    ap = attrs.get("auto_pad", b"NOTSET")
    ap = ap.decode() if isinstance(ap, bytes) else ap
    if ap not in ("NOTSET", "VALID"):
        raise _Unsupported(f"auto_pad={ap}")


@onnx_op("Conv")
def _conv(im, node, a):
    _no_auto_pad(a)
    x = im.type_of(node.input[0])
    if len(x.shape) != 4:
        raise _Unsupported(f"a {len(x.shape) - 2}-D convolution (the graph's Conv2D is 2-D)")
    ins = [im.value(node.input[0]), im.value(node.input[1])] + ([im.value(node.input[2])] if len(node.input) > 2
                                                               and node.input[2] else [])
    return im.emit("Conv2D", ins, stride=_ints(a.get("strides", [1, 1])), padding=_pads2(a.get("pads"), "Conv"),
                   dilation=_ints(a.get("dilations", [1, 1])), groups=int(a.get("group", 1)))


@onnx_op("BatchNormalization")
def _bn(im, node, a):
    if a.get("training_mode", 0):
        raise _Unsupported("training_mode=1")
    x, scale, b, mean, var = (im.value(v) for v in node.input[:5])
    return im.emit("BatchNorm", [x, mean, var, scale, b], eps=float(a.get("epsilon", 1e-5)), has_weight=True,
                   has_bias=True)


@onnx_op("MaxPool", "AveragePool")
def _pool(im, node, a):
    _no_auto_pad(a)
    if len(node.output) > 1 and node.output[1]:
        raise _Unsupported("MaxPool's indices output")
    k = _ints(a["kernel_shape"])
    attrs = dict(kernel_size=k, stride=_ints(a.get("strides", k)), padding=_pads2(a.get("pads"), node.op_type),
                 ceil_mode=bool(a.get("ceil_mode", 0)))
    if node.op_type == "MaxPool":
        return im.emit("MaxPool", [im.value(node.input[0])], dilation=_ints(a.get("dilations", [1, 1])), **attrs)
    return im.emit("AvgPool", [im.value(node.input[0])], count_include_pad=bool(a.get("count_include_pad", 0)),
                   **attrs)


@onnx_op("GlobalAveragePool", "GlobalMaxPool")
def _global_pool(im, node, a):
    rank = len(im.type_of(node.input[0]).shape)
    op = "ReduceMean" if node.op_type == "GlobalAveragePool" else "ReduceMax"
    return im.emit(op, [im.value(node.input[0])], axes=list(range(2, rank)), keep_dims=True)


@onnx_op("Gemm")
def _gemm(im, node, a):
    if a.get("alpha", 1.0) != 1.0 or a.get("beta", 1.0) != 1.0:
        raise _Unsupported("alpha or beta other than 1")
    ins = [im.value(node.input[0]), im.value(node.input[1])]
    ta, tb = bool(a.get("transA", 0)), bool(a.get("transB", 0))
    if len(node.input) > 2 and node.input[2]:
        c = im.type_of(node.input[2])
        n = im.type_of(node.input[1]).shape[0 if tb else 1]
        if c.shape == (n,):
            return im.emit("MatMul", ins + [im.value(node.input[2])], transpose_a=ta, transpose_b=tb)
        y = im.emit("MatMul", ins, transpose_a=ta, transpose_b=tb)
        return im.emit("Add", [y, im.value(node.input[2])])
    return im.emit("MatMul", ins, transpose_a=ta, transpose_b=tb)


@onnx_op("MatMul")
def _matmul(im, node, a):
    if any(len(im.type_of(v).shape) < 2 for v in node.input):
        raise _Unsupported("a 1-D operand")
    return im.emit("MatMul", [im.value(v) for v in node.input])


_BINARY = {"Add": "Add", "Sub": "Sub", "Mul": "Mul", "Div": "RealDiv", "Pow": "Pow", "Max": "Maximum",
           "Min": "Minimum", "Equal": "Equal", "Less": "Less", "LessOrEqual": "LessEqual", "Greater": "Greater",
           "GreaterOrEqual": "GreaterEqual", "And": "LogicalAnd", "Or": "LogicalOr"}
_UNARY = {"Relu": "Relu", "Neg": "Neg", "Exp": "Exp", "Log": "Log", "Sqrt": "Sqrt", "Reciprocal": "Reciprocal",
          "Abs": "Abs", "Tanh": "Tanh", "Sigmoid": "Sigmoid", "Erf": "Erf", "Not": "LogicalNot", "Identity": "Identity"}


#: integer arithmetic on known values (shapes) done at import; ONNX's integer Div truncates
_SHAPE_MATH = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply,
               "Div": lambda a, b: np.trunc(np.divide(a, b))}


@onnx_op(*_BINARY)
def _binary(im, node, a):
    if len(node.input) != 2:
        raise _Unsupported(f"{len(node.input)} inputs (the graph's {_BINARY[node.op_type]} takes 2)")
    x, y = node.input
    fold = _SHAPE_MATH.get(node.op_type)
    if fold is not None and x in im.static and y in im.static and im.static[x].dtype.kind == "i":
        return fold(im.static[x], im.static[y]).astype(im.static[x].dtype)     # shape arithmetic
    return im.emit(_BINARY[node.op_type], [im.value(x), im.value(y)])


@onnx_op(*_UNARY)
def _unary(im, node, a):
    if node.op_type == "Identity" and node.input[0] in im.static:
        return im.static[node.input[0]]
    return im.emit(_UNARY[node.op_type], [im.value(node.input[0])])


@onnx_op("Gelu")
def _gelu(im, node, a):
    ap = a.get("approximate", b"none")
    return im.emit("Gelu", [im.value(node.input[0])], approximate=ap.decode() if isinstance(ap, bytes) else ap)


@onnx_op("Softmax")
def _softmax(im, node, a):
    x = im.type_of(node.input[0])
    return im.emit("SoftmaxV2", [im.value(node.input[0])], dim=int(a.get("axis", -1)) % len(x.shape))


@onnx_op("LayerNormalization")
def _layer_norm(im, node, a):
    x = im.type_of(node.input[0])
    axis = int(a.get("axis", -1)) % len(x.shape)
    if len(node.output) > 1 and any(node.output[1:]):
        raise _Unsupported("LayerNormalization's mean / inv_std_dev outputs")
    has_b = len(node.input) > 2 and bool(node.input[2])
    ins = [im.value(node.input[0]), im.value(node.input[1])] + ([im.value(node.input[2])] if has_b else [])
    return im.emit("LayerNorm", ins, normalized_shape=list(x.shape[axis:]), eps=float(a.get("epsilon", 1e-5)),
                   has_weight=True, has_bias=has_b)


@onnx_op("Flatten")
def _flatten(im, node, a):
    """ONNX's Flatten (axis in [-rank, rank]: axis = rank gives (size, 1)) as a Reshape."""
    x = im.type_of(node.input[0])
    axis = int(a.get("axis", 1))
    axis = axis + len(x.shape) if axis < 0 else axis
    lead = int(np.prod(x.shape[:axis], dtype=np.int64))
    return im.emit("Reshape", [im.value(node.input[0])], shape=[lead, int(np.prod(x.shape[axis:], dtype=np.int64))])


@onnx_op("Reshape")
def _reshape(im, node, a):
    shape = _ints(im.known(1, "shape"))
    if a.get("allowzero", 0) and 0 in shape:
        raise _Unsupported("allowzero=1 with a 0 in the shape")
    return im.emit("Reshape", [im.value(node.input[0])], shape=shape)


@onnx_op("Transpose")
def _transpose(im, node, a):
    rank = len(im.type_of(node.input[0]).shape)
    return im.emit("Transpose", [im.value(node.input[0])], perm=_ints(a.get("perm", range(rank)[::-1])))


def _axes(im, node, a, i=1):
    """The axes of Squeeze / Unsqueeze / Reduce*: an attribute (older opsets) or input ``i``."""
    if "axes" in a:
        return _ints(a["axes"])
    v = im.known(i, "axes")
    return [] if v is None else _ints(v)


@onnx_op("Squeeze", "Unsqueeze")
def _squeeze(im, node, a):
    axes = _axes(im, node, a)
    if node.input[0] in im.static:
        x = im.static[node.input[0]]
        return np.squeeze(x, tuple(axes) or None) if node.op_type == "Squeeze" else np.expand_dims(x, tuple(axes))
    return im.emit(node.op_type, [im.value(node.input[0])], axes=axes)


@onnx_op("ReduceMean", "ReduceSum", "ReduceMax")
def _reduce(im, node, a):
    axes = _axes(im, node, a)
    if not axes and a.get("noop_with_empty_axes", 0):
        return im.emit("Identity", [im.value(node.input[0])])
    rank = len(im.type_of(node.input[0]).shape)
    return im.emit(node.op_type, [im.value(node.input[0])], axes=[x % rank for x in axes],
                   keep_dims=bool(a.get("keepdims", 1)))


@onnx_op("Concat")
def _concat(im, node, a):
    if all(v in im.static for v in node.input):
        return np.concatenate([im.static[v] for v in node.input], axis=int(a["axis"]))
    rank = len(im.type_of(node.input[0]).shape)
    return im.emit("Concat", [im.value(v) for v in node.input], axis=int(a["axis"]) % rank)


@onnx_op("Gather")
def _gather(im, node, a):
    axis = int(a.get("axis", 0))
    if node.input[0] in im.static and node.input[1] in im.static:
        return np.take(im.static[node.input[0]], im.static[node.input[1]], axis=axis)
    return im.emit("GatherV2", [im.value(node.input[0]), im.value(node.input[1])], axis=axis)


@onnx_op("Slice")
def _slice(im, node, a):
    starts, ends = _ints(im.known(1, "starts")), _ints(im.known(2, "ends"))
    axes = im.known(3, "axes")
    steps = im.known(4, "steps")
    rank = len(im.type_of(node.input[0]).shape)
    big = 2 ** 62
    return im.emit("Slice", [im.value(node.input[0])], starts=[max(min(s, big), -big) for s in starts],
                   ends=[max(min(e, big), -big) for e in ends],
                   axes=[x % rank for x in (_ints(axes) if axes is not None else range(len(starts)))],
                   steps=_ints(steps) if steps is not None else [1] * len(starts))


@onnx_op("Split")
def _split(im, node, a):
    x = im.type_of(node.input[0])
    axis = int(a.get("axis", 0)) % len(x.shape)
    sizes = a.get("split")
    if sizes is None:
        sizes = im.known(1, "split")
    n = len(node.output)
    sizes = _ints(sizes) if sizes is not None else [x.shape[axis] // n] * n
    outs = im.emit("Split", [im.value(node.input[0])], outputs=n, axis=axis, sizes=sizes)
    return outs if isinstance(outs, list) else [outs]


@onnx_op("Shape")
def _shape(im, node, a):
    shape = np.asarray(im.type_of(node.input[0]).shape, dtype=np.int64)
    return shape[a.get("start", 0):a.get("end", None)]


@onnx_op("Constant")
def _constant(im, node, a):
    if "value" in a:
        return im.numpy_helper.to_array(a["value"])
    for key, dtype in (("value_float", np.float32), ("value_int", np.int64), ("value_floats", np.float32),
                       ("value_ints", np.int64)):
        if key in a:
            return np.asarray(a[key], dtype=dtype)
    raise _Unsupported(f"a Constant given by {', '.join(a)}")


@onnx_op("ConstantOfShape")
def _constant_of_shape(im, node, a):
    shape = _ints(im.known(0, "shape"))
    fill = im.numpy_helper.to_array(a["value"]) if "value" in a else np.zeros(1, np.float32)
    return np.full(shape, fill.reshape(-1)[0], dtype=fill.dtype)


@onnx_op("Expand")
def _expand(im, node, a):
    shape = _ints(im.known(1, "shape"))
    x = im.type_of(node.input[0])
    out = list(np.broadcast_shapes(tuple(x.shape), tuple(shape)))
    return im.emit("Expand", [im.value(node.input[0])], shape=out)


@onnx_op("Cast")
def _cast(im, node, a):
    dtype = str(im.onnx.helper.tensor_dtype_to_np_dtype(int(a["to"])))
    if node.input[0] in im.static:
        return im.static[node.input[0]].astype(dtype)
    return im.emit("Cast", [im.value(node.input[0])], dtype=dtype)


@onnx_op("Where")
def _where(im, node, a):
    return im.emit("Select", [im.value(v) for v in node.input])


@onnx_op("Clip")
def _clip(im, node, a):
    x = im.value(node.input[0])
    dtype = im.type_of(node.input[0]).dtype
    lo, hi = im.known(1, "min"), im.known(2, "max")
    lo = a.get("min") if lo is None else lo
    hi = a.get("max") if hi is None else hi
    if lo is not None:
        x = im.emit("Maximum", [x, im.scalar(lo, dtype)])
    if hi is not None:
        x = im.emit("Minimum", [x, im.scalar(hi, dtype)])
    return x


__all__ = ["ONNX_OPS", "onnx_op"]
